"""Runs against runs: statistics (`stats`), a comparison of two sets of runs (`compare`), history with
change points (`history`) and the nightly's gate over it (`history_gate`), what differs between
runs (`envdiff`), and how to reproduce a stored run (`repro`)."""
