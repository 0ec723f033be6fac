"""Stage 3, records at rest: the parquet store (`store`), run journals (`journal`), atomic writes
(`atomic`), run selectors (`select`), and where results live, a folder or a URL (`location`). The
only stage that writes `results/`."""
