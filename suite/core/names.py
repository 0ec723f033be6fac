"""Names that become parts of paths: scenario names, run ids, workload and precision names.

Results files and pytest-benchmark JSON come from elsewhere (CI artifacts, colleagues), so a value
read from them is never trusted to be a file name. A name that must be exact (a scenario, which names
`results/<scenario>/`) is checked against `NAME` where it enters; a free-text value that only labels
a file (a workload in a plot's name) is mapped through `slug`. Every output path is then checked to
stay under its folder (`inside`).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from suite.core.errors import UserError

# One plain path component: letters, digits, '_', '.', '-', not starting with '.' (so never '.',
# '..' or a hidden file), at most 100 characters.
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")
NAME_RULE = "letters, digits, '_', '.' and '-', not starting with '.', at most 100 characters"
# A run id (`suite.results.store.new_run_id`): UTC start time (so ids sort by age) and 24 random
# bits (so two runs started in the same second on one or many machines do not collide).
RUN_ID = re.compile(r"\d{8}T\d{6}Z-[0-9a-f]{6}")


def check_name(kind: str, value, where: str = "") -> str:
    """`value` if it is a NAME, else a one-line UserError naming what and where."""
    if not isinstance(value, str) or not NAME.fullmatch(value):
        at = f"{where}: " if where else ""
        raise UserError(f"{at}{kind} {value!r} cannot name a file or folder (expected {NAME_RULE})")
    return value


def slug(value) -> str:
    """A NAME for any text: itself when it already is one, else its safe characters plus a short
    hash of the original (so two different names never share a file)."""
    text = str(value)
    if NAME.fullmatch(text):
        return text
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", text).lstrip(".")[:60] or "_"
    return f"{safe}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


def inside(folder: str | Path, path: str | Path) -> Path:
    """`path`, after checking that it resolves to somewhere under `folder` (links followed)."""
    root, target = Path(folder).resolve(), Path(path).resolve()
    if target != root and root not in target.parents:
        raise UserError(f"{path}: refusing to write outside {folder}")
    return Path(path)
