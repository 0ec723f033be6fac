"""Stage 4, numbers from records, in six subpackages by concern, each importing only itself and those
before it (tests/test_layout.py): `frame` (derived columns, labels, rows as dicts), `roofline` (the
performance model, its anchors and predictions, crossovers), `outcome` (a run's answers, headline,
energy, fleet), `advise` (a model's training step: which linears to convert, the step speedup),
`regression` (statistics, compare, history and its gate, envdiff, repro) and `interchange`
(pytest-benchmark JSON, the notebook loader); `load`, the records as a notebook wants them. Plots
nothing."""

from suite.analysis.interchange.notebook import load

__all__ = ["load"]
