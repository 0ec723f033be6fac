"""The ground floor: helpers every stage may use, importing no stage of the suite.

The suite's exceptions (`errors`), names that become paths (`names`), text made safe for a terminal
and numbers as text (`text`), files read only when regular and within a size (`files`), the limits
of every JSON read from a file (`jsontext`), one JSON line of a record (`jsonl`), error metrics against a reference (`accuracy`) and the budgets that bound them (`budgets`), quantiles and spreads of
samples (`quantiles`), and vendor GPU peaks (`peaks`)."""
