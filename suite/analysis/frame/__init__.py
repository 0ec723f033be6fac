"""The columns every view of a frame of records derives first: speedups against the in-run
baseline, emulation, diagnoses and the folders' derived columns (`derived`), and each case's short,
unique name (`labels`). The other analysis subpackages build on these."""
