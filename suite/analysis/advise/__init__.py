"""`python -m suite advise`: from a model's training step (`suite.models.step.StepWork`) to which
layers to convert for each recipe and the step speedup to expect, predicted anywhere and measured
where a run of its GEMMs exists.

- `scenario`: the scenario of exactly the step's GEMMs, its grouped expert GEMMs and the Linear
  fwd+bwd of its layer shapes (`--scenario OUT.toml`), marked with what it was advised for;
- `measured`: measured speedups of those GEMMs and layers from a run's records (`--from RESULTS`),
  and the advised run's per-layer table the report shows.
"""
