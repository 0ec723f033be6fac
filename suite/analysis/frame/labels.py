"""Short, unique names for cases: what a person reads in a table row, a headline or a legend.

A case is its workload, its shape, its workload's parameters, its precision and its precision's
parameters. Written out whole that is ~150 characters for a training step; most of it is the same
for every case of a report. So a name keeps only what tells cases apart *within the frame it names*:

- `shape`: M x K x N (shaped workloads) and the workload parameters whose values differ between the
  frame's cases of that workload (`vocab=50304`, `outlier=1e+04`); the workload's name where nothing
  else is left;
- `variant`: the precision and, in parentheses, its own parameters whose values differ between the
  frame's cases of that precision (`bf16_adamw8bit (master=bf16_sr)`, `fp8_tensorwise (fp8 all-gather)`,
  `fp8_rowwise (quantize=inline)`).

Two cases with different parameters never share a `variant` within one workload and shape, so
geomeans and headlines that group by it never pool them. Names are computed once per distinct
(workload, precision, params) triple: a million records hold a few hundred.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd

from suite.scenario import registry


def _fields(table: dict, name) -> dict:
    known = table.get(name)
    return dict(known.params.model_fields) if known is not None else {}


def _word(key: str, value, field) -> str:
    """One parameter as a reader wants it: a flag by its title (or its name), a value as key=value."""
    title = (getattr(field, "title", None) or key) if field is not None else key
    if value is True:
        return title
    if value is False:
        return f"no {title}"
    if isinstance(value, float):
        return f"{key}={value:g}"
    return f"{key}={value}"


def _varying(dicts: list[dict], keys) -> list[str]:
    """The keys among `keys` whose value (absent = the default) differs between the dicts."""
    distinct = list({id(d): d for d in dicts}.values())  # a dict shared by many combinations counts once
    return [k for k in keys if len({json.dumps(d.get(k), sort_keys=True) for d in distinct}) > 1]


def _parsed(params) -> list[dict]:
    """Each combination's parameters as a dict, parsed once per distinct text (a combination is a
    shape too: a million records hold a hundred thousand of them, and a few thousand texts)."""
    texts: dict = {}
    for p in params:
        if p not in texts:
            value = json.loads(p) if isinstance(p, str) and p else {}
            texts[p] = value if isinstance(value, dict) else {}
    return [texts[p] for p in params]


def _names(combos: pd.DataFrame) -> tuple[list[str], list[str]]:
    """(variant, params part of the shape) for each row of distinct (workload, precision, params)."""
    parsed = _parsed(combos["params"].tolist())
    variant, shape_words = [""] * len(combos), [""] * len(combos)
    positions = pd.Series(range(len(combos)), index=combos.index)
    for workload, g in combos.groupby("workload", sort=False, dropna=False):
        at = positions[g.index].tolist()
        w_fields = _fields(registry.WORKLOADS, workload)
        # a workload's own keys, and keys no one declares (records from elsewhere), name the shape
        p_keys = {k for name in g["precision"].unique() for k in _fields(registry.PRECISIONS, name)}
        all_keys = sorted({k for i in at for k in parsed[i]})
        shape_keys = _varying([parsed[i] for i in at], [k for k in all_keys if k in w_fields or k not in p_keys])
        words = {id(parsed[i]): parsed[i] for i in at}  # named once per distinct parameters
        words = {key: " ".join(_word(k, p[k], w_fields.get(k)) for k in shape_keys if k in p) for key, p in words.items()}
        for i in at:
            shape_words[i] = words[id(parsed[i])]
        for precision, pg in g.groupby("precision", sort=False, dropna=False):
            pat = positions[pg.index].tolist()
            p_fields = _fields(registry.PRECISIONS, precision)
            keys = _varying([parsed[i] for i in pat], sorted(k for k in p_fields if k not in w_fields))
            names = {}
            for i in pat:
                if id(parsed[i]) not in names:
                    words = [_word(k, parsed[i][k], p_fields.get(k)) for k in keys if k in parsed[i]]
                    names[id(parsed[i])] = f"{precision} ({', '.join(words)})" if words else str(precision)
                variant[i] = names[id(parsed[i])]
    return variant, shape_words


def combinations(columns: dict[str, pd.Series]) -> tuple[np.ndarray, pd.DataFrame]:
    """One integer per row for its combination of the columns' values, and the distinct
    combinations in order of first appearance, as objects (each column factorised alone, then
    combined as integers: nothing built per row; `drop_duplicates` hashes every row's values)."""
    combined, values = None, {}
    for name, column in columns.items():
        codes, uniques = pd.factorize(column, use_na_sentinel=False)
        combined = codes.astype(np.int64) if combined is None else combined * (len(uniques) + 1) + codes
        values[name] = (codes, uniques)
    codes, _ = pd.factorize(combined)
    first = pd.Series(np.arange(len(codes))).groupby(codes).first().to_numpy()
    combos = pd.DataFrame({name: np.asarray(uniques, dtype=object)[c[first]] for name, (c, uniques) in values.items()})
    return codes, combos


def with_labels(df: pd.DataFrame) -> pd.DataFrame:
    """`df` with `variant` and `shape` columns (see the module's docstring), named within `df`; a
    frame that has them is returned as it is (a subset keeps the names its whole frame gave it)."""
    if "variant" in df and "shape" in df:
        return df
    df = df.copy(deep=False)
    if df.empty:
        return df.assign(variant=pd.Series(dtype=object), shape=pd.Series(dtype=object))
    missing = pd.Series(None, index=df.index, dtype=object)
    column = {name: df[name] if name in df else missing for name in ("workload", "precision", "params", "m", "k", "n")}
    # named per distinct (workload, precision, params) and per distinct M, K, N: a million records
    # hold a few thousand of the one and a few dozen of the other
    codes, combos = combinations({name: column[name] for name in ("workload", "precision", "params")})
    variant, words = _names(combos)
    sizes, dims = combinations({name: column[name] for name in ("m", "k", "n")})
    shaped = dims.notna().all(axis=1) & dims.ne(None).all(axis=1)
    dims = [f"{int(m)}x{int(k)}x{int(n)}" if s else "" for m, k, n, s in zip(dims["m"], dims["k"], dims["n"], shaped)]
    # a shape's name: its dims, its words and (where both are empty) its workload's name
    word_codes, word_texts = pd.factorize(pd.Series(words, dtype=object))
    workload_codes, workloads = pd.factorize(combos["workload"], use_na_sentinel=False)
    shapes, parts = combinations({"dims": pd.Series(sizes), "words": pd.Series(word_codes[codes]),
                                  "workload": pd.Series(workload_codes[codes])})
    shape = [f"{dims[d]} {word_texts[w]}".strip() or str(workloads[k])
             for d, w, k in zip(parts["dims"], parts["words"], parts["workload"])]
    # object columns: taken from the few distinct names without converting a million strings
    df["variant"] = pd.Series(np.asarray(variant, dtype=object)[codes], index=df.index, dtype=object)
    df["shape"] = pd.Series(np.asarray(shape, dtype=object)[shapes], index=df.index, dtype=object)
    return df


_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def sort_key(name) -> tuple:
    """A name's sort key with its numbers by value: `outlier=30000` before `outlier=1e+06`, `256x...`
    before `1024x...` (text order puts 1000000 before 30000)."""
    parts = _NUMBER.split(str(name))
    numbers = [float(n) for n in _NUMBER.findall(str(name))]
    key: list = []
    for i, text in enumerate(parts):
        key.append((0, text, 0.0))
        if i < len(numbers):
            key.append((1, "", numbers[i]))
    return tuple(key)
