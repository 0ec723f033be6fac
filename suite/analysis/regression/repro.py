"""How to reproduce a stored run, from its own records: the install lines (every recorded version
pinned; torch's build from the recorded version's local label), the suite's commit, the command that
re-runs it, and what the records cannot say.

What the run was asked is its `scenario_spec` column (the validated scenario, the device asked for,
the case filter), which `suite.results.store.finish_run` copies from the run's journal header since
the journal is deleted when the run completes. A run stored before that column existed has only its
scenario's name and commit: `scenario_at_commit` reads `scenarios/<name>.toml` as that commit had it
and accepts it only when it expands to exactly the run's case ids (timing rules are not in a case
id, so they stay unconfirmed, and the recipe says so).

A results file is something people send each other, so nothing it carries is copied into a command:
each field a line is built from is checked first (`checks`; one that fails is named in `rejected` and
left out), a stored scenario_spec goes through the scenario schema (`suite.scenario.spec.RunSpec`),
every command is an argument vector (`Step`: what `--json` holds) printed with its words shell-quoted,
and a comment never holds a newline.
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from dataclasses import dataclass, field
from typing import Callable, get_args

import pandas as pd

from suite.analysis.regression import envdiff
from suite.core.errors import UserError
from suite.measure.env import ISA_ENV
from suite.results import columns
from suite.scenario import registry, spec as specs

PYTORCH_INDEX = "https://download.pytorch.org/whl"
# A nightly wheel's version: 2.14.0.dev20261201+cpu. download.pytorch.org drops nightlies after about
# 60-90 days (replicate/monobase#17; vllm-project/vllm#18351); then only torch_git_version rebuilds it.
NIGHTLY = re.compile(r"\.dev\d{8}", re.ASCII)
# Record columns of the packages a run pins, with their distribution names, after torch; then the
# libraries the precision and workload folders declare, as each says it installs
# (`suite.scenario.registry.libraries`).
PACKAGES = (("numpy_version", "numpy"),)
VENV = ".venv-repro"
CODE_HASH_CHECK = "from suite.measure.env import code_hash; print(code_hash())"

# --- what a record's field must be before a printed line holds it ---------------------------------
# A results file is something people send each other: every field a line below is built from is
# checked first, and one that fails is named and left out, never copied into a command.

# PEP 440's public versions and local labels, as torch, its libraries and Python write them:
# 2.13.0+cpu, 2.14.0.dev20261201+cpu, 2.9.0a0+git1234abc, 0.18.0, 3.11.9, 570.86.15.
VERSION = re.compile(r"\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?(\+[A-Za-z0-9]+([._][A-Za-z0-9]+)*)?", re.ASCII)
GIT_SHA = re.compile(r"[0-9a-fA-F]{7,40}")
HASH = re.compile(r"[0-9a-f]{8,64}")
# An ISA override's value: a word (avx2, AVX512_CORE_AMX, AVX2), never shell syntax.
ISA_VALUE = re.compile(r"[A-Za-z0-9_]{1,40}")
# OMP_NUM_THREADS: a count, or one per nesting level (4,2).
OMP_THREADS = re.compile(r"\d{1,4}(,\d{1,4}){0,7}", re.ASCII)
# A device name (the CPU model, the GPU's name) is free text, shown only in comments: one line of it.
MAX_NAME = 200
# Where a run's cases ran: the devices `run --device` names.
DEVICES = tuple(d for d in get_args(specs.Device) if d != "auto")


def _isa_env(text: str) -> bool:
    pairs = [word.partition("=") for word in text.split(" ")]
    return bool(pairs) and all(name in ISA_ENV and sep and ISA_VALUE.fullmatch(value) for name, sep, value in pairs)


def _threads(text: str) -> bool:
    if not re.fullmatch(r"-?[0-9]{1,9}", text):  # int() would take " 2" and Unicode digits too
        return False
    try:
        specs.Defaults(threads=int(text))  # the scenario's bounds, as `run --threads` has them
    except ValueError:  # not a whole number, or out of bounds (pydantic's ValidationError is one)
        return False
    return True


def _pattern(pattern: re.Pattern) -> Callable[[str], bool]:
    return lambda text: bool(pattern.fullmatch(text))


VERSION_RULE = (_pattern(VERSION), "a version (PEP 440, e.g. 2.13.0+cpu)")
# Columns checked as versions, the declared libraries' among them (`checks`).
VERSIONS = ("python_version", "torch_version", columns.LIBRARIES, "numpy_version", "driver_version")
CHECKS: dict[str, tuple[Callable[[str], bool], str]] = {
    "git_sha": (_pattern(GIT_SHA), "a commit (7 to 40 hex digits)"),
    "torch_git_version": (_pattern(GIT_SHA), "a commit (7 to 40 hex digits)"),
    "code_hash": (_pattern(HASH), "a hash (hex digits)"),
    "scenario_hash": (_pattern(HASH), "a hash (hex digits)"),
    "device": (lambda text: text in DEVICES, f"a device ({', '.join(DEVICES)})"),
    "device_name": (lambda text: text.isprintable() and len(text) <= MAX_NAME,
                    f"a name (printable, one line, at most {MAX_NAME} characters)"),
    "cpu_isa_env": (_isa_env, f"NAME=value overrides ({', '.join(ISA_ENV)}; value a word)"),
    "env_threads": (_pattern(OMP_THREADS), "OMP_NUM_THREADS's form (a count, or counts joined by ,)"),
    "threads_setting": (_threads, "a whole number of threads from 1 to 4096"),
}
# What `repro --run` acts on: left out, the re-run would silently differ from the run.
RERUN_FIELDS = ("cpu_isa_env", "env_threads", "threads_setting")


def checks() -> dict[str, tuple[Callable[[str], bool], str]]:
    """What each field must be: CHECKS, and a version for every column of VERSIONS."""
    return {**{column: VERSION_RULE for column in columns.with_libraries(VERSIONS)}, **CHECKS}


def checked(facts: dict) -> tuple[dict, dict[str, str]]:
    """`facts` with every field that fails its check (`checks`) left out, and those fields, each with
    what it must be."""
    clean, rejected = dict(facts), {}
    for column, (fits, expected) in checks().items():
        if facts.get(column) is not None and not fits(facts[column]):
            clean[column] = None
            rejected[column] = expected
    return clean, rejected


def comment(text: str) -> str:
    """`# text` as one line whatever it holds: a newline in it would start a shell line of its own."""
    return "# " + "".join(c if c.isprintable() else "?" for c in text)


def shell_word(word: str) -> str:
    """One word of a printed line: quoted where the shell would read it as more (shlex.quote); a
    requirement (torch==2.13.0+cpu) always, as pip's documentation writes it."""
    if "==" in word:
        return "'" + word.replace("'", "'\"'\"'") + "'"
    return shlex.quote(word)


@dataclass(frozen=True)
class Step:
    """One command of a recipe: its argument vector (what `--json` holds), and for its printed line
    the environment in front, a comment behind and whether the venv is entered after it."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    note: str = ""
    activate: bool = False

    @property
    def vector(self) -> list[str]:
        """The argv to execute as is: the environment through env(1)."""
        return ["env", *(f"{k}={v}" for k, v in self.env.items()), *self.argv] if self.env else list(self.argv)

    def line(self) -> str:
        words = [f"{k}={shlex.quote(v)}" for k, v in self.env.items()] + [shell_word(w) for w in self.argv]
        text = " ".join(words) + (f" && . {VENV}/bin/activate" if self.activate else "")
        return f"{text}   {comment(self.note)}" if self.note else text


@dataclass(frozen=True)
class Asked:
    """What a run was asked to run, and where that came from."""

    spec: specs.RunSpec | None
    source: str  # in words
    stored: bool = False  # the run's own scenario_spec (else recovered from its commit, or unknown)


@dataclass
class Recipe:
    """Everything `python -m suite repro` prints about one run, from its checked facts."""

    run_id: str
    scenario: str
    about: str  # one line: the run, its machine
    facts: dict  # the run's facts, those failing their check left out (`checked`)
    install: list[Step]
    command: Step  # the run command
    rerun: Step | None  # `python -m suite repro ... --run` (from the stored spec); None: the scenario is unknown
    asked: Asked
    unknown: list[str]  # what the records cannot say
    rejected: dict[str, str]  # field: what it must be (left out of every line)

    def lines(self) -> list[str]:
        out = [comment(self.about), comment(f"the scenario: {self.asked.source}"),
               *(step.line() for step in self.install), self.command.line()]
        if self.rerun:
            out += [comment("or, from the scenario as the run stored it (then compared with this run):"),
                    self.rerun.line()]
        return out + [comment(f"not in the records: {u}") for u in self.unknown]

    def as_json(self) -> dict:
        return {"run_id": self.run_id, "scenario": self.scenario, "about": self.about, "venv": VENV,
                "install": [step.vector for step in self.install], "command": self.command.vector,
                "rerun": self.rerun.vector if self.rerun else None, "code_hash": self.facts.get("code_hash"),
                "scenario_source": self.asked.source, "scenario_stored": self.asked.stored,
                "scenario_known": self.asked.spec is not None, "unknown": self.unknown,
                "rejected": [{"field": k, "expected": v} for k, v in self.rejected.items()]}


def run_facts(records: pd.DataFrame) -> dict:
    """The run-level facts of one run's records (their first record's), as text; UserError when the
    records hold more than one run."""
    runs = sorted(records["run_id"].unique())
    if len(runs) != 1:
        raise UserError(f"repro takes one run; the selector picks {len(runs)}: {', '.join(runs)} (add runs=1)")
    return {k: envdiff.as_text(v) for k, v in records.iloc[0].items()}


def pip_argv(dist: str, version: str, *options: str) -> list[str]:
    """`pip install dist==version`, from torch's own index where the version's local label names a
    build there (+cpu, +cu130, +rocm6.4, +xpu) and from its nightly index for a .devYYYYMMDD."""
    label = version.partition("+")[2]
    nightly = bool(NIGHTLY.search(version))
    argv = ["pip", "install", *(["--pre"] if nightly else []), *options, f"{dist}=={version}"]
    if label or nightly:
        argv += ["--index-url", f"{PYTORCH_INDEX}/{'nightly/' if nightly else ''}{label or 'cpu'}"]
    return argv


def pip_line(dist: str, version: str, extra: str = "") -> str:
    return Step(pip_argv(dist, version, *extra.split())).line()


def install_steps(facts: dict) -> list[Step]:
    """The environment, then the suite at its commit; each step pins what the run recorded
    (`facts` checked: a field left out leaves its pin out)."""
    python = facts.get("python_version") or ""
    major_minor = ".".join(python.split(".")[:2])
    steps = [Step([f"python{major_minor}", "-m", "venv", VENV], note=f"Python {python or '?'} measured it",
                  activate=True)]
    if facts.get("torch_version"):
        steps.append(Step(pip_argv("torch", facts["torch_version"])))
    steps += [Step(pip_argv(dist, facts[column])) for column, dist in PACKAGES if facts.get(column)]
    steps += [Step(pip_argv(library.install, facts[library.column], *library.install_options))
              for library in registry.libraries() if facts.get(library.column)]
    if facts.get("git_sha"):
        steps.append(Step(["git", "checkout", facts["git_sha"]], note="the suite's commit (in a clone of mpsuite)"))
    steps.append(Step(["pip", "install", "-e", "."]))
    if facts.get("code_hash"):
        steps.append(Step(["python", "-c", CODE_HASH_CHECK],
                          note=f"prints {facts['code_hash']} where the measuring code is the run's"))
    steps.append(Step(["python", "-m", "suite", "env"], note="versions and device, to hold against the lines above"))
    return steps


def environment(facts: dict) -> dict[str, str]:
    """The run's environment overrides: its ISA overrides and OMP threads, which act when torch
    loads, so a command starts under them."""
    env = dict(pair.split("=", 1) for pair in (facts.get("cpu_isa_env") or "").split() if "=" in pair)
    return env | ({"OMP_NUM_THREADS": facts["env_threads"]} if facts.get("env_threads") else {})


def run_command(facts: dict, asked: Asked) -> Step:
    """The command that re-runs the run, under its environment overrides."""
    argv = ["python", "-m", "suite", "run", facts["scenario"]]
    device = asked.spec.device if asked.spec else facts.get("device")
    if device:
        argv += ["--device", device]
    if facts.get("threads_setting"):
        argv += ["--threads", facts["threads_setting"]]
    for terms in (asked.spec.only if asked.spec else None) or []:
        argv += ["--only", terms]
    note = ""
    if facts.get("shard_count"):
        argv += ["--shard", f"K/{facts['shard_count']}", "--group", "NAME"]
        note = "once per shard K, one NAME for all"
    return Step(argv, environment(facts), note)


def unknowns(facts: dict, asked: Asked) -> list[str]:
    """What reproducing the run needs that its records do not hold."""
    out = []
    if asked.spec is None:
        out.append("the scenario as run (stored from scenario_spec on: runs before it keep only its name)")
    elif not asked.stored:
        out.append("the scenario as run: recovered from the run's commit, whose file its case ids confirm, "
                   "not its timing rules")
    if facts.get("git_dirty") == "yes":
        out.append(f"uncommitted changes at {facts.get('git_sha') or 'the commit'} (git_dirty): "
                   "the printed code_hash tells whether the measuring code was the same")
    if not facts.get("git_sha"):
        out.append("the suite's commit (git_sha was not recorded)")
    if NIGHTLY.search(facts.get("torch_version") or ""):
        out.append("the nightly wheel once download.pytorch.org drops it (60-90 days): build torch from "
                   f"commit {facts.get('torch_git_version') or '(torch_git_version not recorded)'}")
    out.append("environment variables other than the ISA overrides and OMP_NUM_THREADS "
               "(TORCH_BLAS_PREFER_CUBLASLT, CUBLAS_WORKSPACE_CONFIG, KMP_*, ...)")
    device = facts.get("device_name") or facts.get("device") or "?"
    driver = f", NVIDIA driver {facts['driver_version']}" if facts.get("driver_version") else ""
    out.append(f"the machine itself: {device}{driver}, its clocks and load")
    return out


def stored_spec(records: pd.DataFrame) -> dict | None:
    """The run's scenario_spec column, parsed; None where the run predates it."""
    if "scenario_spec" not in records:
        return None
    found = records["scenario_spec"].dropna()
    return json.loads(found.iloc[0]) if len(found) else None


def asked_stored(data, facts: dict) -> Asked:
    """The run's stored scenario_spec, checked as the command line checks the same flags (the
    scenario schema, the devices, --only's filters): one that fails is not used."""
    try:
        run_spec = specs.parse_run_spec(data, "scenario_spec")
    except UserError as err:
        return Asked(None, f"not usable: {err}")
    return Asked(run_spec, f"stored in the run's records (scenario_hash {facts.get('scenario_hash') or '?'})", True)


def scenario_at_commit(facts: dict, case_ids: set[str], show: Callable[[str, str], str | None]) -> Asked:
    """The run's scenario file as its commit had it (`show(sha, path)`: the file's text, None where
    there is none), accepted when it expands to exactly the run's case ids. `facts` checked: git_sha
    is a commit's hex digits."""
    from suite.scenario import plan

    sha, name = facts.get("git_sha"), facts["scenario"]
    path = f"scenarios/{name}.toml"
    text = show(sha, path) if sha else None
    if text is None:
        return Asked(None, f"not recoverable: neither stored nor found as {path} at the run's commit")
    try:
        scenario = specs.parse(tomllib.loads(text), f"{path} at {sha[:12]}")
        planned = {c.case_id for c in plan.expand(scenario)}
    except (UserError, tomllib.TOMLDecodeError) as err:
        return Asked(None, f"not recoverable: {path} at {sha[:12]} does not load here ({err})")
    if planned != case_ids:
        return Asked(None, f"not recoverable: {path} at {sha[:12]} expands to {len(planned)} cases, "
                           f"{len(planned & case_ids)} of the run's {len(case_ids)} (the run used --only, or another file)")
    run_spec = specs.RunSpec(scenario=scenario, device=facts.get("device") or "auto")
    return Asked(run_spec, f"{path} at commit {sha[:12]}: its cases are the run's {len(case_ids)} "
                           "(timing rules are not in a case id: unconfirmed)")


def recipe(records: pd.DataFrame, rerun: list[str], show: Callable[[str, str], str | None]) -> Recipe:
    """The recipe of the one run in `records`; `rerun` is the `repro ... --run` command's words.
    Every line is built from the run's checked facts (`checked`); what failed is in `rejected`."""
    facts, rejected = checked(run_facts(records))
    data = stored_spec(records)
    if data is not None:
        asked = asked_stored(data, facts)
        if asked.spec is None:
            rejected["scenario_spec"] = "what a run is asked (the scenario schema, device, --only filters)"
    else:
        asked = scenario_at_commit(facts, set(records["case_id"]), show)
    threads, device = facts.get("cpu_threads") or "?", facts.get("device") or "?"
    about = (f"run {facts['run_id']} of scenario {facts['scenario']}: {len(records)} cases on "
             f"{facts.get('device_name') or device} ({device}, {threads} threads), "
             f"torch {facts.get('torch_version')}, started {facts.get('started_at') or '?'}")
    command = run_command(facts, asked)
    again = Step(rerun, command.env) if asked.spec is not None else None
    return Recipe(facts["run_id"], facts["scenario"], about, facts, install_steps(facts), command, again, asked,
                  unknowns(facts, asked), rejected)
