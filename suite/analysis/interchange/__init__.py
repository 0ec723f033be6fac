"""Records in other tools' shapes: pytest-benchmark JSON, both ways (`bench_json`), and the records as a
notebook wants them (`notebook`: `suite.analysis.load`)."""
