"""Models written in the suite (random init, nothing downloaded), the synthetic corpus they train
on, and their FLOP counts: `gpt2`, `llama`, `corpus`, `flops`. And, torch-free, what `advise` knows of
a model it does not run: its dimensions, linears, parameter counts, presets and Hugging Face
config.json files (`architecture`), and one training step of it on one GPU (`step`: the shared
`Parallel`, `Gemm` and `StepWork`; `step_work`: every GEMM after tensor and expert parallel, and the
work beside them)."""
