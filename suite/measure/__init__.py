"""Stage 2, running cases: the runner (`runner`), the one timing loop (`timing`), GPU telemetry
(`telemetry`), a process per case (`isolate`), error metrics (`accuracy`), the machine's facts
(`env`) and vendor peaks (`peaks`). Writes no files: it yields records."""
