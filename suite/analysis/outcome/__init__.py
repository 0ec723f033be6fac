"""What a run came to: the answers a report opens with and `recommend` (`answers`), the headline and
the summary table the CLI prints (`summary`), energy per unit of work (`energy`), and across devices
(`fleet`). Reads the frame (`suite.analysis.frame`) and the model's crossovers
(`suite.analysis.roofline`)."""
