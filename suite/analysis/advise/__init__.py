"""`advise`: from one training step's GEMMs (`suite.models.step.StepWork`) to each recipe's step
time and which layers to convert. Every GEMM's time per recipe and pass, and the step's other terms
with their constants and sources (`estimate`, docs/advise.md); which layers to convert and which to
keep, and why (`advice`); the whole answer, as the command prints it and `--json` writes it
(`answer`); the estimate against published measurements (`published`). Reads the roofline model
(`suite.analysis.roofline.model`) for every kernel's time."""
