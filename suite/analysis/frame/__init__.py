"""The columns every view of a frame of records derives first: speedups against the in-run
baseline, emulation and diagnoses (`derived`; the folders' own derived columns come with a run's
settings, `suite.analysis.outcome.answers.with_settings`), and each case's short, unique name
(`labels`); a frame's rows as plain dicts, cheaply (`rows`). The other analysis subpackages build on
these."""
