"""Stage 3, records at rest: the parquet store (`store`), run journals (`journal`), atomic writes
(`atomic`) and run selectors (`select`). The only stage that writes `results/`."""
