"""Stage 4, numbers from records, in five subpackages by concern, each importing only itself and those
before it (tests/test_layout.py): `frame` (derived columns and labels), `roofline` (the performance
model, its anchors and predictions, crossovers), `outcome` (a run's answers, headline, energy,
fleet), `regression` (statistics, compare, history and its gate, envdiff, repro) and `interchange`
(pytest-benchmark JSON, the notebook loader); `load`, the records as a notebook wants them. Plots
nothing."""

from suite.analysis.interchange.notebook import load

__all__ = ["load"]
