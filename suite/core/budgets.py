"""The accuracy metrics a budget bounds (`recommend`'s flags, the report's "which precision"), each
declared once with what the stages say of it: the error against a reference every case records
(`accuracy`: `rel_err`, `sqnr_db`) here, and a folder's own metric in its hooks
(`suite.scenario.declare.Hooks.metrics`: a training step's loss gap). Torch-free.

The stages iterate over them (`suite.scenario.registry.budget_metrics`): a bound's flag, its JSON
key, its words, how a value meets it, its margin.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    """An accuracy metric a budget may bound: a record column, or one a folder's `derived` hook adds.

    Its texts are format strings of the value `v`, the bound `b`, the margin `m` and, in `shown`, the
    `reference` its value is against; "" where a place does not show it."""

    column: str  # the column holding its value
    bound: str  # the budget's bound of it: `recommend`'s flag (--max-rel-err) and its JSON "budget" key
    words: str  # what it is called: "no rel. error recorded"
    help: str  # the flag's help
    metavar: str  # the flag's value
    at_most: bool = True  # a value meets the bound at most it (<=); False: at least it (>=)
    absolute: bool = False  # the bound holds the value's magnitude
    positive: bool = True  # a bound is a positive number (False: any finite number, as a decibel floor)
    meets: str = ""  # the bound in words: "rel. error <= {b:.3g}"
    over: str = ""  # why a value misses it: "rel. error {v:.2e} > {b:.3g}"
    shown: str = ""  # `recommend`'s error of its pick: "rel. error {v:.2e}"
    cell: str = ""  # the report's pick cell of a recipe decided on accuracy ("" not shown there)
    headline: str = ""  # the headline's error of a recipe ("" not shown there)
    reference: str | None = None  # the column naming what its value is against (shown as `reference`)
    # the report's budgets: the tighter and the looser bound it answers for (None: unbounded there)
    tight: float | None = None
    loose: float | None = None
    # a value beyond which the case did not work (a training step that did not train): the headline
    # ranks such recipes after the others and `outside` says so; the report's "fastest measured" bounds it
    margin: float | None = None
    outside: str = ""  # the headline's note beyond the margin: ", outside the {m:g}-nat margin"
    judges: str = ""  # the cases that record it, in words ("training steps"), where not every case does


# The errors every case with an output records against its float64 reference (`accuracy`). A
# relative error of 1e-2 admits bf16 (its unit roundoff is 2^-8 = 3.9e-3); 1e-3 asks ten times tighter.
REL_ERR = Metric("rel_err", "max_rel_err", "rel. error", "relative error against the reference at most X", "X",
                 meets="rel. error <= {b:.3g}", over="rel. error {v:.2e} > {b:.3g}", shown="rel. error {v:.2e}",
                 cell="rel. error {v:.1e}", headline="rel. error {v:.1e}", tight=1e-3, loose=1e-2)
SQNR = Metric("sqnr_db", "min_sqnr_db", "SQNR", "SQNR at least DB decibels", "DB", at_most=False, positive=False,
              meets="SQNR >= {b:.3g} dB", over="SQNR {v:.1f} dB < {b:.3g}", shown="SQNR {v:.1f} dB")
ERROR_METRICS = (REL_ERR, SQNR)
