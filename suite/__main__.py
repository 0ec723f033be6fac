from suite.cli import entry

raise SystemExit(entry())
