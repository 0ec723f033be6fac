"""`python -m suite advise`: from one training step's GEMMs (`suite.models.step.StepWork`) to each
recipe's step time, which layers to convert and the step speedup to expect, predicted anywhere and
measured where a run of its GEMMs exists.

- `estimate`: every GEMM's time per recipe and pass, and the step's other terms with their
  constants and sources (docs/advise.md), on the roofline model (`suite.analysis.roofline.model`);
- `advice`: which layers to convert and which to keep, and why;
- `answer`: the whole answer, as the command prints it and `--json` writes it;
- `published`: the estimate against published measurements;
- `scenario`: the scenario of exactly the step's GEMMs, its grouped expert GEMMs and the Linear
  fwd+bwd of its layer shapes (`--scenario OUT.toml`), marked with what it was advised for;
- `measured`: measured speedups of those GEMMs and layers from a run's records (`--from RESULTS`),
  and the advised run's per-layer table the report shows.
"""
