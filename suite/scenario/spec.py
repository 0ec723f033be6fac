"""Scenario files: TOML in, typed and validated objects out.

A scenario is data only: it is parsed with `tomllib`, never executed. Every validation error is
turned into one line that names the file, the field and what was expected (`ScenarioError`).
"""

from __future__ import annotations

import os
import sys
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_serializer,
                      model_validator)

from suite.core import files, names
from suite.scenario import params as case_params
from suite.scenario import registry
from suite.core.errors import ScenarioError
from suite.scenario.shapes import SHAPE_SETS
from suite.scenario.stop_rule import StopRule

# strict: a TOML `true`, "64" or 64.0 is an error, not 1 or 64 (pydantic's lax mode would coerce them)
PositiveInt = Annotated[int, Field(gt=0, strict=True)]
Scalar = Union[bool, int, float, str]


def _known(kind: str, value: str, table) -> str:
    if value not in table:
        raise ValueError(f"unknown {kind} {value!r}; valid: {', '.join(sorted(table))}")
    return value


PrecisionName = Annotated[str, AfterValidator(lambda v: _known("precision", v, registry.PRECISIONS))]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# Where a run's cases run: the same choices as `run --device`.
Device = Literal["auto", "cpu", "cuda"]


class Defaults(Strict):
    device: Device = "auto"
    baseline: PrecisionName | None = None
    seed: Annotated[int, Field(strict=True)] = 0
    # torch's intra-op CPU threads for the run (torch.set_num_threads), restored after it; None keeps
    # torch's default (one per physical core). On a busy machine one thread is steadier: a two-thread
    # GEMM stalls whenever one of its threads is descheduled (fp32 256^3: 0.67 ms on one thread,
    # about 32 ms on two, on a loaded 2-core VM).
    threads: Annotated[int, Field(ge=1, le=4096, strict=True)] | None = None
    timing: StopRule = StopRule()


class Sweep(Strict):
    workload: str
    precisions: Annotated[list[PrecisionName], Field(min_length=1)]
    baseline: PrecisionName | None = None
    shapes: str | None = None
    sizes: list[PositiveInt] | None = None
    tokens: PositiveInt | None = None
    mkn: list[tuple[PositiveInt, PositiveInt, PositiveInt]] | None = None
    # Workload parameters; a list value is swept (cartesian product with the other lists).
    params: dict[str, Scalar | list[Scalar]] = {}
    include: list[dict[str, Scalar]] = []
    exclude: list[dict[str, Scalar]] = []
    timing: StopRule | None = None

    @field_validator("workload")
    @classmethod
    def _workload_known(cls, v):
        return _known("workload", v, registry.WORKLOADS)

    @field_validator("precisions")
    @classmethod
    def _precisions_unique(cls, v):
        if len(set(v)) != len(v):
            raise ValueError("precisions are listed twice")
        return v

    @field_validator("shapes")
    @classmethod
    def _shapes_known(cls, v):
        return None if v is None else _known("shape set", v, SHAPE_SETS)

    @field_validator("params")
    @classmethod
    def _params_not_empty_lists(cls, v):
        for key, value in v.items():
            if isinstance(value, list) and not value:
                raise ValueError(f"params.{key} is an empty list: nothing to sweep")
        return v

    @model_validator(mode="after")
    def _params_known(self):
        """Every key is a parameter of the workload or of one of the sweep's precisions, and every
        value (each element of a swept list) is valid for each of them that declares it."""
        models = {"workload " + repr(self.workload): registry.WORKLOADS[self.workload].params}
        models.update({repr(pr): registry.PRECISIONS[pr].params for pr in self.precisions})
        for key, value in self.params.items():
            owners = {who: m for who, m in models.items() if key in m.model_fields}
            if not owners:
                valid = sorted({f for m in models.values() for f in m.model_fields})
                raise ValueError(f"params.{key}: unknown parameter for workload {self.workload!r} with "
                                 f"precisions {', '.join(self.precisions)}; valid: {', '.join(valid) or '(none)'}")
            for v in value if isinstance(value, list) else [value]:
                for who, model in owners.items():
                    why = case_params.field_error(model, key, v)
                    if why:
                        raise ValueError(f"params.{key}: {v!r} is not valid for {who}: {why}")
        workload_model = registry.WORKLOADS[self.workload].params
        for name, info in workload_model.model_fields.items():
            if info.is_required() and name not in self.params and not all(name in r for r in self.include or [{}]):
                raise ValueError(f"params.{name}: required by workload {self.workload!r} ({info.description})")
        return self

    @model_validator(mode="after")
    def _shape_source(self):
        shaped = registry.WORKLOADS[self.workload].shaped
        has_shape = self.shapes is not None or self.mkn is not None
        if shaped and not has_shape and not self.include:
            raise ValueError(f"workload {self.workload!r} needs `shapes` (a named set) or `mkn` triples")
        if not shaped and (has_shape or self.sizes):
            raise ValueError(f"workload {self.workload!r} takes its shape from `params`, not shapes/mkn/sizes")
        if self.sizes is not None and self.shapes is None:
            raise ValueError("`sizes` needs `shapes` (e.g. shapes = \"square\")")
        if self.shapes is not None:
            SHAPE_SETS[self.shapes].check(self.sizes, self.tokens)
        keys = {"precision", "m", "k", "n", *self.params}
        for kind, rules in (("include", self.include), ("exclude", self.exclude)):
            for i, rule in enumerate(rules):
                unknown = sorted(set(rule) - keys)
                if unknown:
                    raise ValueError(f"{kind}[{i}]: unknown key {unknown[0]!r}; valid: {', '.join(sorted(keys))}")
                if "precision" in rule:
                    _known("precision", str(rule["precision"]), registry.PRECISIONS)
                for dim in ("m", "k", "n"):
                    if dim in rule and not (type(rule[dim]) is int and rule[dim] > 0):  # bool is an int
                        raise ValueError(f"{kind}[{i}].{dim}: expected a positive integer, got {rule[dim]!r}")
            if kind == "include" and shaped:
                for i, rule in enumerate(rules):
                    missing = [d for d in ("m", "k", "n") if d not in rule]
                    if missing:
                        raise ValueError(f"include[{i}]: a {self.workload} case needs m, k and n; missing {missing}")
        return self


def _one_line_text(v: str) -> str:
    if not v.isprintable():  # a newline or escape in a filter would break the line `repro` prints it in
        raise ValueError("must be printable text on one line")
    return v


class AdvisedGemm(Strict):
    """One GEMM of the advised model's training step (`suite.models.step.Gemm`): which layer and
    pass runs (m x k) @ (k x n), `count` times per step, over `groups` experts (m: each one's rows)."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_by_name=True, validate_by_alias=True,
                              serialize_by_alias=True)
    layer: Annotated[str, Field(min_length=1), AfterValidator(_one_line_text)]
    module: Annotated[str, Field(min_length=1), AfterValidator(_one_line_text)]
    pass_: Literal["fprop", "dgrad", "wgrad"] = Field(alias="pass")
    m: PositiveInt
    k: PositiveInt
    n: PositiveInt
    count: PositiveInt
    groups: PositiveInt = 1


class Advised(Strict):
    """What `python -m suite advise --scenario` wrote the scenario for: the model, the GPU it was
    advised for, the step's layout (`suite.models.step.Parallel`) and its GEMMs. It travels with the
    scenario into every record (`scenario_spec`), so the report and `advise --from` know the run."""

    model: Annotated[str, Field(min_length=1), AfterValidator(_one_line_text)]
    device: Annotated[str, Field(min_length=1), AfterValidator(_one_line_text)]
    gpus: PositiveInt = 1
    tp: PositiveInt = 1
    ep: PositiveInt = 1
    seq: PositiveInt
    batch: PositiveInt
    ac: Literal["none", "full"] = "none"  # activation checkpointing (suite.models.step.AC_MODES)
    gemms: Annotated[list[AdvisedGemm], Field(min_length=1)]


class Scenario(Strict):
    name: str
    description: str = ""
    defaults: Defaults = Defaults()
    sweep: Annotated[list[Sweep], Field(min_length=1)]
    advised: Advised | None = None

    @model_serializer(mode="wrap")
    def _without_unadvised(self, handler):
        """A scenario `advise` did not write dumps as it did before the field: its hash, and so its
        runs' resumption, stay as they were."""
        data = handler(self)
        if isinstance(data, dict) and data.get("advised") is None:
            data.pop("advised", None)
        return data

    @field_validator("name")
    @classmethod
    def _name_is_a_folder_name(cls, v):
        if not names.NAME.fullmatch(v):  # it names results/<name>/ and reports/<name>/
            raise ValueError(f"{v!r} cannot name a folder (expected {names.NAME_RULE})")
        return v

    @model_validator(mode="after")
    def _baselines_are_measured(self):
        for i, sweep in enumerate(self.sweep):
            baseline = sweep.baseline or self.defaults.baseline
            if baseline is not None and baseline not in sweep.precisions:
                raise ValueError(
                    f"sweep[{i}]: baseline {baseline!r} is not among its precisions {sweep.precisions}"
                )
        return self


def _where(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif str(part).startswith("function-") or "[" in str(part):
            continue  # pydantic's own validator and union-member tags, not a place in the file
        elif str(part).isidentifier():
            out += f".{part}" if out else str(part)
        else:
            out += f"[{str(part)!r}]"  # a key from the file that is no identifier: quoted, escaped
    return out or "(top level)"


def _one_line(err: ValidationError) -> str:
    errors = err.errors(include_url=False)
    first = errors[0]
    msg = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        msg = "unknown field"
    elif first["type"] == "missing":
        msg = "required field is missing"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{_where(first['loc'])}: {msg}{more}"


def parse(data: dict[str, Any], source: str = "<scenario>") -> Scenario:
    try:
        return Scenario.model_validate(data)
    except ValidationError as err:
        raise ScenarioError(f"{source}: {_one_line(err)}") from None


class RunSpec(Strict):
    """What a run was asked (`suite.pipeline.scenario_spec`), as a results file stores it in
    `scenario_spec`: read back (`repro --run`), it is checked as the command line checks the same."""

    scenario: Scenario
    device: Device
    only: list[Annotated[str, Field(min_length=1), AfterValidator(_one_line_text)]] | None = None


def parse_run_spec(data: Any, source: str) -> RunSpec:
    try:
        return RunSpec.model_validate(data)
    except ValidationError as err:
        raise ScenarioError(f"{source}: {_one_line(err)}") from None


# A scenario of a million cases is a few hundred bytes of lists, and one listing ten thousand
# shapes by hand some 200 KB; past this a file is no scenario (tomllib reads it in seconds still).
MAX_SCENARIO_BYTES = 16 * 2**20


def load(path: str | Path) -> Scenario:
    """A scenario file: a regular file (a FIFO or device named *.toml is named, never opened
    blocking: `suite.core.files`) of at most MAX_SCENARIO_BYTES."""
    path = Path(path)
    try:
        text = files.read_bytes(path, MAX_SCENARIO_BYTES, "scenario file").decode("utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ScenarioError(f"{path}: cannot read scenario file: {err}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ScenarioError(f"{path}: invalid TOML: {err}") from None
    except RecursionError:  # tomllib parses nested arrays/tables recursively
        raise ScenarioError(f"{path}: invalid TOML: arrays or tables nested too deeply") from None
    return parse(data, str(path))


# Where scenarios are looked for when --scenarios is not given, first match wins: $MPSUITE_SCENARIOS,
# ./scenarios, then the scenarios shipped beside the package (a source checkout or editable install).
ENV_FOLDER = "MPSUITE_SCENARIOS"
SHIPPED = Path(__file__).resolve().parents[2] / "scenarios"


def folder_candidates(given: str | Path | None = None) -> list[Path]:
    """The folders `find_folder` tries, in order."""
    if given is not None:
        return [Path(given)]
    env = os.environ.get(ENV_FOLDER)
    return [Path(env)] if env else [Path("scenarios"), SHIPPED]


def find_folder(given: str | Path | None = None) -> Path:
    """The scenarios folder: `given`, else the first of `folder_candidates` that exists; a
    ScenarioError naming every place looked at when there is none."""
    looked = folder_candidates(given)
    for folder in looked:
        if folder.is_dir():
            return folder
    where = ", ".join(str(p.resolve()) for p in looked)
    hint = "" if given is not None else f" (pass --scenarios DIR or set {ENV_FOLDER})"
    raise ScenarioError(f"no scenarios folder: looked in {where}{hint}")


def load_dir(folder: str | Path, problems: list[str] | None = None) -> dict[str, tuple[Path, Scenario]]:
    """Every scenario in a folder, by name. With `problems` (a list), a file that does not load, and
    a name two files claim, is appended there as one line and left out, so one bad file never
    blocks the others; without it, the first such problem raises."""
    found: dict[str, tuple[Path, Scenario]] = {}
    claimed: dict[str, list[Path]] = {}
    for path in sorted(Path(folder).glob("*.toml")):
        try:
            scenario = load(path)
        except ScenarioError as err:
            if problems is None:
                raise
            problems.append(str(err))
            continue
        claimed.setdefault(scenario.name, []).append(path)
        found.setdefault(scenario.name, (path, scenario))
    for name, paths in claimed.items():
        if len(paths) > 1:
            message = f"{paths[1]}: name: scenario name {name!r} is already used by {paths[0]}"
            if problems is None:
                raise ScenarioError(message)
            problems.append(f"{message} (both left out)")
            del found[name]
    return found


def resolve(name_or_path: str, folder: str | Path | None = None) -> Scenario:
    """A scenario given as a file path or as a name from the scenarios folder (`find_folder`);
    other files of the folder that do not load are reported (on stderr) but do not stop this one."""
    if name_or_path.endswith(".toml") or Path(name_or_path).is_file():
        return load(name_or_path)
    folder = find_folder(folder)
    problems: list[str] = []
    scenarios = load_dir(folder, problems)
    clash = [p for p in problems if f"scenario name {name_or_path!r} is already used" in p]
    if clash:
        raise ScenarioError(clash[0].removesuffix(" (both left out)"))
    if name_or_path not in scenarios:
        valid = ", ".join(sorted(scenarios)) or "(none)"
        unreadable = f"; {len(problems)} file(s) there do not load: {problems[0]}" if problems else ""
        raise ScenarioError(f"unknown scenario {name_or_path!r} in {folder}/; valid: {valid}{unreadable}")
    for problem in problems:
        print(f"mpsuite: warning: left out {problem}", file=sys.stderr)
    return scenarios[name_or_path][1]
