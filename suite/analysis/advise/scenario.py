"""The scenario of one training step's GEMMs (`advise --scenario OUT.toml`): what `python -m suite
run` measures on the user's GPU, or plans and runs emulated on a CPU, so that `advise --from` can use
measured speedups where the model would otherwise predict them.

Three sweeps, each over the baseline and the recipes asked for:
- `gemm`: every distinct (m, k, n) the step multiplies outside the experts, fprop, dgrad and wgrad
  each at its own shape, quantized before the timing (`pre`: the GEMM alone) and inside it (`inline`:
  the casts a training step pays) where a recipe takes `quantize`;
- `grouped_gemm`: the experts' GEMMs, one sweep per expert count, M = each expert's rows x experts,
  balanced (a wgrad's rows are the output features: the same E GEMMs of its shape, grouped by rows
  where training groups them along K);
- `linear`: one Linear's fwd+bwd (its three GEMMs and their casts) at each layer's fprop shape.

The scenario carries `advised` (`suite.scenario.spec.Advised`): the model, the GPU, the layout and
the GEMMs with their layers, passes and counts, kept in every record's `scenario_spec`.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict
from pathlib import Path
from typing import NamedTuple, Sequence

from suite.analysis.advise.estimate import BASELINE
from suite.core import names
from suite.models.step import Parallel, StepWork
from suite.results import atomic
from suite.scenario import registry, spec
# What the roofline model counts each sweep's call as (`WorkloadRecord.roofline`): how the scenario
# finds its workloads without naming them.
ONE_GEMM, GROUPED_GEMM, LAYER_STEP = "matmul", "grouped_matmul", "linear_step"
# The quantize choices of a GEMM case: the GEMM alone, and with the casts training pays.
QUANTIZE = ["pre", "inline"]


class Shapes(NamedTuple):
    """The distinct shapes of a step's GEMMs, as the scenario's sweeps take them (sorted)."""

    gemms: list[tuple[int, int, int]]  # dense GEMMs: (m, k, n)
    grouped: dict[int, list[tuple[int, int, int]]]  # experts -> (rows of all experts, k, n)
    layers: list[tuple[int, int, int]]  # dense layers' fprop shapes: (tokens, in, out)


def distinct_shapes(work: StepWork) -> Shapes:
    gemms = {(g.m, g.k, g.n) for g in work.gemms if g.groups == 1}
    layers = {(g.m, g.k, g.n) for g in work.gemms if g.groups == 1 and g.pass_ == "fprop"}
    grouped: dict[int, set] = {}
    for g in work.gemms:
        if g.groups > 1:
            grouped.setdefault(g.groups, set()).add((g.m * g.groups, g.k, g.n))
    return Shapes(sorted(gemms), {e: sorted(s) for e, s in sorted(grouped.items())}, sorted(layers))


def advised_marker(work: StepWork, model: str, parallel: Parallel, device: str) -> dict:
    """The scenario's `advised` table: what it was written for, and every GEMM with its layer."""
    gemms = [spec.AdvisedGemm(layer=g.layer, module=g.module, pass_=g.pass_, m=g.m, k=g.k, n=g.n, count=g.count,
                              groups=g.groups) for g in work.gemms]
    return spec.Advised(model=model, device=device, gemms=gemms, **asdict(parallel)).model_dump(mode="json")


def default_name(model: str) -> str:
    """`advise-<model>`: a config.json path is named by its folder."""
    path = Path(model)
    stem = path.parent.name if path.suffix == ".json" and path.parent.name else path.stem or model
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", stem).strip("-.")
    return names.slug(f"advise-{safe}" if safe else "advise")


def workload_of(kernel: str) -> str:
    """The workload that times one call of `kernel` and nothing beside it: of several, the one
    without parameters of its own (the fidelity and outlier sweeps time GEMMs too, under theirs)."""
    found = [name for name, record in registry.WORKLOADS.items() if record.shaped and record.roofline == kernel]
    plain = [name for name in found if not registry.WORKLOADS[name].params.model_fields]
    if not found:
        raise LookupError(f"no workload declares roofline {kernel!r}")
    return (plain or found)[0]


def _declares(recipes: Sequence[str], param: str) -> bool:
    return any(param in registry.PRECISIONS[r].params.model_fields for r in recipes if r in registry.PRECISIONS)


def sweeps(shapes: Shapes, precisions: list[str]) -> list[dict]:
    """The scenario's sweeps: dense GEMMs, grouped GEMMs per expert count, layers."""
    quantize = _declares(precisions, "quantize")
    out = []
    if shapes.gemms:
        out.append({"workload": workload_of(ONE_GEMM), "precisions": precisions,
                    "mkn": [list(s) for s in shapes.gemms], **({"params": {"quantize": QUANTIZE}} if quantize else {})})
    for experts, mkn in shapes.grouped.items():
        # grouped GEMMs quantize inline (MX recipes take nothing else): the casts training pays
        out.append({"workload": workload_of(GROUPED_GEMM), "precisions": precisions, "mkn": [list(s) for s in mkn],
                    "params": {"experts": experts, **({"quantize": "inline"} if quantize else {})}})
    if shapes.layers:
        out.append({"workload": workload_of(LAYER_STEP), "precisions": precisions,
                    "mkn": [list(s) for s in shapes.layers]})
    return out


def scenario_data(work: StepWork, recipes: Sequence[str], model: str, parallel: Parallel, device: str, *,
                  name: str | None = None, baseline: str = BASELINE, timing: dict | None = None,
                  run_device: str = "auto") -> dict:
    """The scenario as TOML data: `baseline` and `recipes` over every distinct GEMM of `work`, run on
    `run_device` (auto: the GPU where there is one), timed by `timing` (a StopRule's fields; default
    the suite's), marked as advised for `model` on `device` laid out as `parallel`."""
    precisions = list(dict.fromkeys([baseline, *recipes]))
    layout = f"{parallel.gpus} GPU(s), TP {parallel.tp}, EP {parallel.ep}, {parallel.batch} x {parallel.seq} tokens per GPU"
    layout += f", {parallel.ac} activation checkpointing" if parallel.ac != "none" else ""
    defaults = {"device": run_device, "baseline": baseline, **({"timing": dict(timing)} if timing else {})}
    return {
        "name": name or default_name(model),
        "description": f"advise: every distinct GEMM of one training step of {model} on {device} ({layout}), "
                       "and the Linear fwd+bwd of each layer shape",
        "defaults": defaults,
        "sweep": sweeps(distinct_shapes(work), precisions),
        "advised": advised_marker(work, model, parallel, device),
    }


def write_scenario(path: str | Path, work: StepWork, recipes: Sequence[str], model: str, parallel: Parallel,
                   device: str, **options) -> spec.Scenario:
    """Write `scenario_data(work, recipes, model, parallel, device, **options)` to `path` as TOML and
    return it as `run` will read it: a scenario `run` refuses is a ScenarioError here, before any file."""
    data = scenario_data(work, recipes, model, parallel, device, **options)
    scenario = spec.parse(data, str(path))
    text = toml_text(data, header=f"Written by `python -m suite advise {model} --scenario`: "
                                  "measure it with `python -m suite run " + str(path) + "`.")
    atomic.atomic_write_text(Path(path), text)
    return scenario


BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def toml_value(value) -> str:
    """One TOML value: a string as a basic string, numbers, booleans, arrays and inline tables of them."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"TOML has no {value!r} a scenario may hold")
        return repr(value)
    if isinstance(value, str):
        # JSON's escapes are TOML's, but for its surrogate pairs: other characters as themselves, DEL
        # (which JSON leaves as it is and TOML refuses) escaped
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML value for {type(value).__name__}")


def toml_key(key: str) -> str:
    return key if BARE_KEY.fullmatch(key) else json.dumps(key)


def _is_tables(value) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def toml_table(data: dict, path: tuple[str, ...] = (), array: bool = False) -> list[str]:
    """A table's lines: its header, its keys (a table of plain values inline), then its tables and
    arrays of tables, each under its dotted header."""
    dotted = ".".join(toml_key(p) for p in path)
    lines = [f"[[{dotted}]]" if array else f"[{dotted}]"] if path else []
    # top-level tables get headers, as do tables holding tables; a table of plain values below
    # them is written inline (a sweep's `params`)
    nested = {k: v for k, v in data.items() if _is_tables(v) or (isinstance(v, dict) and (not path or any(
        isinstance(x, dict) or _is_tables(x) for x in v.values())))}
    for key, value in data.items():
        if key not in nested and value is not None:
            lines.append(f"{toml_key(key)} = {toml_value(value)}")
        elif path and _is_tables(value) and not any(isinstance(x, (dict, list)) for v in value for x in v.values()):
            # rows of plain values (the advised GEMMs): one inline table a line
            lines += [f"{toml_key(key)} = [", *(f"  {toml_value(v)}," for v in value), "]"]
            del nested[key]
    for key, value in nested.items():
        for item, is_array in ([(v, True) for v in value] if isinstance(value, list) else [(value, False)]):
            lines += ["", *toml_table(item, (*path, key), is_array)]
    return lines


def toml_text(data: dict, header: str = "") -> str:
    """`data` as a TOML document, `header` a comment above it."""
    comment = [f"# {line}" for line in header.splitlines()]
    return "\n".join([*comment, *(["" ] if comment else []), *toml_table(data)]) + "\n"
