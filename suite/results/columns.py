"""The columns as a results file holds them: each defined column's Arrow type, the one schema of
every file and the schema page. What the columns are (their types, units, meanings, ranges, the
contract) is defined where records are made, `suite.measure.columns`, and read from there by the
record (`suite.measure.record`) and by the file checks (`suite.results.validate`); the names below
are those definitions, for the stages that read files.

`docs/results-schema.md` is generated from here (`python -m suite.results.columns >
docs/results-schema.md`; a test fails when the page and the code differ).

A `timestamp` column is an Arrow timestamp in microseconds, UTC (`timestamp[us, tz=UTC]`: pandas
reads it as `datetime64[us, UTC]`, DuckDB as TIMESTAMPTZ). Records on their way to a file (journals
are JSON) hold a timestamp as ISO 8601 text; the store converts it.
"""

from __future__ import annotations

from suite.measure.columns import (  # noqa: F401 (the definitions, for the stages that read files)
    AT_LEAST_0, CONTRACT, CORE, ERROR, LIBRARIES, LIBRARY_GROUP, PEAK, SHAPE, STATUSES, all_columns, library_columns,
    library_titles, with_libraries)
from suite.measure import columns as definitions
from suite.scenario.declare import Column

TIMESTAMP_UNIT = "us"  # of every `timestamp` column, which is in UTC


def __getattr__(name: str):
    """`COLUMNS` and `BY_NAME` as the registry stands now (`suite.measure.columns`)."""
    if name in ("COLUMNS", "BY_NAME"):
        return getattr(definitions, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def arrow_type(column: Column):
    """The column's Arrow type: every results file has every column with this type (null where a
    record has no value), so pandas, pyarrow, polars and DuckDB read any mix of files as one table."""
    import pyarrow as pa

    return {
        "string": pa.string(), "json": pa.string(), "int": pa.int64(), "float": pa.float64(), "bool": pa.bool_(),
        "list<float>": pa.list_(pa.float64()), "list<bool>": pa.list_(pa.bool_()), "list<string>": pa.list_(pa.string()),
        "timestamp": pa.timestamp(TIMESTAMP_UNIT, tz="UTC"),
    }[column.type]


def arrow_schema():
    """The one schema of every results file, units and meanings in each field's metadata."""
    import pyarrow as pa

    return pa.schema([pa.field(c.name, arrow_type(c), metadata={"unit": c.unit, "description": c.description})
                      for c in all_columns()])


def schema_markdown() -> str:
    """docs/results-schema.md: one table per group."""
    lines = [
        "# Results schema",
        "",
        "Generated from `suite/measure/columns.py` and the precision and workload folders' declarations",
        "(`python -m suite.results.columns > docs/results-schema.md`); a test fails when this page and",
        "the code differ. One parquet file per run, one row per case; run metadata is repeated on every",
        "row. **Bold** columns are on every record (the contract); the libraries group holds the versions",
        "of the libraries the folders declare, the groups named after a workload the columns its folder",
        "declares. `json`: a string holding JSON. `timestamp`: an Arrow",
        f"timestamp, unit `{TIMESTAMP_UNIT}`, zone UTC (pandas `datetime64[{TIMESTAMP_UNIT}, UTC]`, DuckDB `TIMESTAMPTZ`).",
        "`values`: what a number may be, checked on every read and import before any arithmetic (NaN",
        "never, null always; `finite`: not infinite; an int column holds whole numbers; a list column's",
        "elements each); blank: not checked.",
        "",
    ]
    every = all_columns()
    for group in dict.fromkeys(c.group for c in every):
        lines += [f"## {group}", "", "| column | type | unit | values | meaning |", "|---|---|---|---|---|"]
        for c in (c for c in every if c.group == group):
            name = f"**`{c.name}`**" if c.contract else f"`{c.name}`"
            lines.append(f"| {name} | {c.type} | {c.unit} | {c.accepts_text} | {c.description.replace('|', '/')} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(schema_markdown(), end="")
