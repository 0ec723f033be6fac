"""Expand a scenario into cases: one case = one workload x precision x shape x parameter choice.

`case_id` hashes only what defines the computation (workload, precision, shape, parameters), never
the run, the machine or the versions, so the same case joins across all three.
"""

from __future__ import annotations

import contextlib
import fnmatch
import gc
import hashlib
import itertools
import json
import math
from dataclasses import InitVar, dataclass, field

from pydantic import ValidationError

from suite.scenario import params as case_params
from suite.scenario import registry
from suite.scenario.shapes import SHAPE_SETS
from suite.core.errors import ScenarioError
from suite.scenario.spec import Scenario, Sweep
from suite.scenario.stop_rule import StopRule

SHAPE_KEYS = ("m", "k", "n")


def case_hash(workload: str, precision: str, m, k, n, params: dict) -> str:
    """The first 16 hex digits of the sha256 of the key {"workload", "precision", "m", "k", "n",
    "params"} as JSON with sorted keys and no spaces: the identity every stored result joins on."""
    return _digest(_shape_key(m, k, n) + _rest_key(workload, precision, params))


# The key's JSON in two parts, so a plan builds each part once rather than once per case (10^6
# cases share a few thousand (precision, params) parts and far fewer shapes). Sorted, the shape's
# keys "k", "m", "n" come before "params", "precision", "workload": the concatenation is exactly
# json.dumps(key, sort_keys=True, separators=(",", ":")).
def _shape_key(m, k, n) -> bytes:
    return f'{{"k":{_json_dim(k)},"m":{_json_dim(m)},"n":{_json_dim(n)},'.encode()


def _rest_key(workload: str, precision: str, params: dict) -> bytes:
    rest = {"params": params, "precision": precision, "workload": workload}
    return json.dumps(rest, sort_keys=True, separators=(",", ":"))[1:].encode()


def _json_dim(value) -> str:
    return "null" if value is None else str(value) if type(value) is int else json.dumps(value)


def _digest(key: bytes) -> str:
    return hashlib.sha256(key).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Case:
    scenario: str
    workload: str
    precision: str
    baseline: str | None
    m: int | None
    k: int | None
    n: int | None
    params: dict = field(hash=False)
    seed: int
    timing: StopRule = field(hash=False, compare=False)
    device: str = "auto"
    # the baseline precision's case's params, normalised for that precision (None: the same params)
    baseline_params: dict | None = field(default=None, hash=False, compare=False)
    # The plan passes the id it computed from the same key in two parts (`expand_sweep`); any other
    # construction, `dataclasses.replace` included, hashes the case's own fields.
    known_case_id: InitVar[str | None] = None
    case_id: str = field(init=False, repr=False, hash=False, compare=False)

    def __post_init__(self, known_case_id: str | None) -> None:
        case_id = known_case_id or case_hash(self.workload, self.precision, self.m, self.k, self.n, self.params)
        object.__setattr__(self, "case_id", case_id)

    @property
    def baseline_case_id(self) -> str | None:
        if self.baseline is None:
            return None
        base = self.params if self.baseline_params is None else self.baseline_params
        return case_hash(self.workload, self.baseline, self.m, self.k, self.n, base)

    @property
    def label(self) -> str:
        shape = f" {self.m}x{self.k}x{self.n}" if self.m is not None else ""
        params = self.params
        extra = "".join([f" {k}={params[k]}" for k in sorted(params)]) if params else ""
        return f"{self.workload} {self.precision}{shape}{extra}"

    def params_json(self) -> str:
        return json.dumps(self.params, sort_keys=True)


def _param_grid(params: dict) -> list[dict]:
    keys = sorted(params)
    values = [v if isinstance(v, list) else [v] for v in (params[k] for k in keys)]
    return [dict(zip(keys, combo)) for combo in itertools.product(*values)]


def _matches(rule: dict, precision: str, shape: tuple, params: dict) -> bool:
    fields = {"precision": precision, **dict(zip(SHAPE_KEYS, shape)), **params}
    return all(k in fields and fields[k] == v for k, v in rule.items())


def _shapes(sweep: Sweep) -> list[tuple]:
    shapes: list[tuple] = []
    if sweep.shapes is not None:
        shapes += SHAPE_SETS[sweep.shapes].triples(sweep.sizes, sweep.tokens)
    if sweep.mkn is not None:
        shapes += [tuple(t) for t in sweep.mkn]
    return shapes or [(None, None, None)]


def expand_sweep(scenario: Scenario, index: int) -> list[Case]:
    sweep = scenario.sweep[index]
    d = scenario.defaults
    where = f"{scenario.name}: sweep[{index}]"
    name, workload, precisions, exclude = scenario.name, sweep.workload, sweep.precisions, sweep.exclude
    baseline, timing, seed, device = sweep.baseline or d.baseline, sweep.timing or d.timing, d.seed, d.device
    grid = _param_grid(sweep.params)
    includes = []
    for extra in sweep.include:
        extra = dict(extra)
        precision = str(extra.pop("precision", precisions[0]))
        shape = tuple(extra.pop(k, None) for k in SHAPE_KEYS)
        includes.append((precision, shape, {**grid[0], **extra}))
    # Shapes never change a case's params: each (precision, params) pair is validated, and its half
    # of the case key built, once however many shapes share it (a 10^6-case plan has thousands of
    # pairs, not millions); the baseline's params once per params.
    identities: dict[tuple[str, int], tuple] = {}
    bases: dict[int, dict | None] = {}

    def identify(precision: str, j: int, params: dict) -> tuple:
        own = identity_params(workload, precision, params, where)
        if j not in bases:
            bases[j] = identity_params(workload, baseline, params, where) if baseline else None
        found = identities[precision, j] = (own, bases[j], _rest_key(workload, precision, own))
        return found

    cases = []

    def add(precision: str, shape: tuple, shape_key: bytes, j: int, params: dict) -> None:
        if exclude and any(_matches(rule, precision, shape, params) for rule in exclude):
            return
        own, base, rest = identities.get((precision, j)) or identify(precision, j, params)
        cases.append(Case(name, workload, precision, baseline, *shape, own, seed, timing, device, base,
                          _digest(shape_key + rest)))

    for shape in _shapes(sweep):
        shape_key = _shape_key(*shape)
        for j, params in enumerate(grid):
            for precision in precisions:
                add(precision, shape, shape_key, j, params)
    for j, (precision, shape, params) in enumerate(includes, start=len(grid)):
        add(precision, shape, _shape_key(*shape), j, params)
    return cases


def identity_params(workload: str, precision: str, raw: dict, where: str = "params") -> dict:
    """A case's params as its identity sees them (`suite.scenario.params.normalise`): the keys its
    workload or precision knows, validated, defaults left out. A bad combination is a ScenarioError."""
    try:
        return case_params.normalise(registry.params_model(workload, precision), raw)
    except ValidationError as err:
        raise ScenarioError(f"{where}: {precision}: params.{case_params.one_line(err)}") from None


# Above this many cases a plan is refused unless asked for (`--max-cases`): 10^6 cases take seconds
# to expand and list (benchmarks/test_harness.py), 10^10 would exhaust memory; no benchmark run
# needs that many.
MAX_CASES = 100_000


def count(scenario: Scenario) -> int:
    """How many cases the scenario's sweeps produce, counted without building them: an upper bound
    of `len(expand(scenario))` (exclude rules and duplicates only remove cases)."""
    total = 0
    for sweep in scenario.sweep:
        grid = math.prod(len(v) if isinstance(v, list) else 1 for v in sweep.params.values())
        total += len(_shapes(sweep)) * grid * len(sweep.precisions) + len(sweep.include)
    return total


def check_size(scenario: Scenario, max_cases: int | None = None) -> int:
    """The case count bound, or a ScenarioError when it exceeds `max_cases` (default MAX_CASES)."""
    limit = MAX_CASES if max_cases is None else max_cases
    n = count(scenario)
    if n > limit:
        raise ScenarioError(f"scenario {scenario.name!r} expands to up to {n:,} cases, more than {limit:,}; "
                            f"narrow its sweeps, or pass --max-cases {n} to proceed")
    return n


def expand(scenario: Scenario) -> list[Case]:
    """All cases of a scenario, in file order, each case once (the first occurrence wins)."""
    seen: set[str] = set()
    out = []
    with _no_cycle_collection():
        for i in range(len(scenario.sweep)):
            for case in expand_sweep(scenario, i):
                if case.case_id not in seen:
                    seen.add(case.case_id)
                    out.append(case)
    return out


# --- a case filter (`run --only`, `plan --only`) ---------------------------------------------------

FILTER_KEYS = ("workload", "precision", "m", "k", "n", "shape")


def _case_fields(case: Case) -> dict[str, str]:
    shape = f"{case.m}x{case.k}x{case.n}" if case.m is not None else ""
    fields = {"workload": case.workload, "precision": case.precision, "m": str(case.m), "k": str(case.k),
              "n": str(case.n), "shape": shape}
    return {**fields, **{k: str(v) for k, v in case.params.items()}}


def only(cases: list[Case], filters: list[str] | None) -> list[Case]:
    """The cases matching any of `filters`. A filter is comma-joined terms that must all hold:
    `key=pattern` (a key of FILTER_KEYS or a parameter; shell-style wildcards, e.g. `precision=fp8_*`,
    `shape=2048x*`) or a bare word, which must occur in the case's label."""
    if not filters:
        return cases
    keys = set(FILTER_KEYS) | {k for c in cases for k in c.params}
    parsed = []
    for text in filters:
        terms = []
        for term in (t.strip() for t in text.split(",")):
            if not term:
                continue
            key, sep, pattern = term.partition("=")
            if sep and key.strip() not in keys:
                raise ScenarioError(f"--only {text!r}: unknown key {key.strip()!r}; valid: {', '.join(sorted(keys))}")
            terms.append((key.strip(), pattern.strip()) if sep else (None, term))
        parsed.append(terms)

    def hit(case: Case, terms) -> bool:
        fields = _case_fields(case)
        return all(fnmatch.fnmatchcase(fields.get(k, ""), p) if k else p in case.label for k, p in terms)

    chosen = [c for c in cases if any(hit(c, terms) for terms in parsed)]
    if not chosen:
        raise ScenarioError(f"--only {' / '.join(filters)} selects none of the {len(cases)} cases "
                            "(`python -m suite plan SCENARIO` lists them)")
    return chosen


@contextlib.contextmanager
def _no_cycle_collection():
    """Python's cycle collector paused: a plan allocates up to 10^6 cases and none is in a cycle,
    yet the collector's passes over them cost as much as building them. Reference counting still
    frees everything as usual; the collector resumes (as it was) afterwards."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
