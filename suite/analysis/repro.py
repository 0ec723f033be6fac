"""How to reproduce a stored run, from its own records: the install lines (every recorded version
pinned; torch's build from the recorded version's local label), the suite's commit, the command that
re-runs it, and what the records cannot say.

What the run was asked is its `scenario_spec` column (the validated scenario, the device asked for,
the case filter), which `suite.results.store.finish_run` copies from the run's journal header since
the journal is deleted when the run completes. A run stored before that column existed has only its
scenario's name and commit: `scenario_at_commit` reads `scenarios/<name>.toml` as that commit had it
and accepts it only when it expands to exactly the run's case ids (timing rules are not in a case
id, so they stay unconfirmed, and the recipe says so).
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from dataclasses import dataclass, field
from typing import Callable

import pandas as pd

from suite.analysis import envdiff
from suite.core.errors import UserError

PYTORCH_INDEX = "https://download.pytorch.org/whl"
# A nightly wheel's version: 2.14.0.dev20261201+cpu. download.pytorch.org drops nightlies after about
# 60-90 days (replicate/monobase#17; vllm-project/vllm#18351); then only torch_git_version rebuilds it.
NIGHTLY = re.compile(r"\.dev\d{8}")
# Record columns of the packages a run pins, with their distribution names, after torch.
PACKAGES = (("torchao_version", "torchao"), ("numpy_version", "numpy"))
VENV = ".venv-repro"


@dataclass(frozen=True)
class Asked:
    """What a run was asked to run, and where that came from."""

    spec: dict | None  # {"scenario": ..., "device": ..., "only": [...]}
    source: str  # in words
    stored: bool = False  # the run's own scenario_spec (else recovered from its commit, or unknown)


@dataclass
class Recipe:
    """Everything `python -m suite repro` prints about one run."""

    run_id: str
    scenario: str
    about: str  # one line: the run, its machine
    install: list[str] = field(default_factory=list)  # shell lines, in order
    command: str = ""  # the run command line
    rerun: str = ""  # `python -m suite repro ... --run` (from the stored spec)
    asked: Asked = Asked(None, "")
    unknown: list[str] = field(default_factory=list)  # what the records cannot say

    def lines(self) -> list[str]:
        out = [f"# {self.about}", f"# the scenario: {self.asked.source}", *self.install, self.command]
        if self.rerun:
            out += ["# or, from the scenario as the run stored it (then compared with this run):", self.rerun]
        return out + [f"# not in the records: {u}" for u in self.unknown]

    def as_json(self) -> dict:
        return {"run_id": self.run_id, "scenario": self.scenario, "about": self.about, "install": self.install,
                "command": self.command, "rerun": self.rerun or None, "scenario_source": self.asked.source,
                "scenario_stored": self.asked.stored, "scenario_known": self.asked.spec is not None,
                "unknown": self.unknown}


def run_facts(records: pd.DataFrame) -> dict:
    """The run-level facts of one run's records (their first record's), as text; UserError when the
    records hold more than one run."""
    runs = sorted(records["run_id"].unique())
    if len(runs) != 1:
        raise UserError(f"repro takes one run; the selector picks {len(runs)}: {', '.join(runs)} (add runs=1)")
    return {k: envdiff.as_text(v) for k, v in records.iloc[0].items()}


def pip_line(dist: str, version: str, extra: str = "") -> str:
    """`pip install dist==version`, from torch's own index where the version's local label names a
    build there (+cpu, +cu130, +rocm6.4, +xpu) and from its nightly index for a .devYYYYMMDD."""
    label = version.partition("+")[2]
    nightly = bool(NIGHTLY.search(version))
    line = f"pip install {'--pre ' if nightly else ''}{extra}'{dist}=={version}'"
    if label or nightly:
        line += f" --index-url {PYTORCH_INDEX}/{'nightly/' if nightly else ''}{label or 'cpu'}"
    return line


def install_lines(facts: dict) -> list[str]:
    """The environment, then the suite at its commit; each line pins what the run recorded."""
    python = facts.get("python_version") or ""
    major_minor = ".".join(python.split(".")[:2])
    lines = [f"python{major_minor} -m venv {VENV} && . {VENV}/bin/activate   # Python {python or '?'} measured it"]
    if facts.get("torch_version"):
        lines.append(pip_line("torch", facts["torch_version"]))
    lines += [pip_line(dist, facts[column]) for column, dist in PACKAGES if facts.get(column)]
    if facts.get("te_version"):  # builds against the torch above, as noxfile.py installs it
        lines.append(pip_line("transformer_engine[pytorch]", facts["te_version"], "--no-build-isolation "))
    sha = facts.get("git_sha")
    if sha:
        lines.append(f"git checkout {sha}   # the suite's commit (in a clone of mpsuite)")
    lines.append("pip install -e .")
    if facts.get("code_hash"):
        lines.append("python -c 'from suite.measure.env import code_hash; print(code_hash())'   "
                     f"# prints {facts['code_hash']} where the measuring code is the run's")
    lines.append("python -m suite env   # versions and device, to hold against the lines above")
    return lines


def environment(facts: dict) -> list[str]:
    """The run's environment overrides as VAR=value words: its ISA overrides and OMP threads, which
    act when torch loads, so a command line starts with them."""
    env = facts["cpu_isa_env"].split() if facts.get("cpu_isa_env") else []
    return env + ([f"OMP_NUM_THREADS={facts['env_threads']}"] if facts.get("env_threads") else [])


def run_command(facts: dict, asked: Asked) -> str:
    """The command line that re-runs the run, its environment overrides first."""
    words = [*environment(facts), "python", "-m", "suite", "run", facts["scenario"]]
    device = (asked.spec or {}).get("device") or facts.get("device")
    if device:
        words += ["--device", device]
    if facts.get("threads_setting"):
        words += ["--threads", facts["threads_setting"]]
    for terms in (asked.spec or {}).get("only") or []:
        words += ["--only", _quoted(terms)]
    line = " ".join(words)
    if facts.get("shard_count"):
        line += f" --shard K/{facts['shard_count']} --group NAME   # once per shard K, one NAME for all"
    return line


def _quoted(text: str) -> str:
    return text if re.fullmatch(r"[\w.=,/:-]+", text) else "'" + text.replace("'", "'\"'\"'") + "'"


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


def scenario_at_commit(facts: dict, case_ids: set[str], show: Callable[[str, str], str | None]) -> Asked:
    """The run's scenario file as its commit had it (`show(sha, path)`: the file's text, None where
    there is none), accepted when it expands to exactly the run's case ids."""
    from suite.scenario import plan, spec

    sha, name = facts.get("git_sha"), facts["scenario"]
    path = f"scenarios/{name}.toml"
    text = show(sha, path) if sha else None
    if text is None:
        return Asked(None, f"not recoverable: neither stored nor found as {path} at the run's commit")
    try:
        scenario = spec.parse(tomllib.loads(text), f"{path} at {sha[:12]}")
        planned = {c.case_id for c in plan.expand(scenario)}
    except (UserError, tomllib.TOMLDecodeError) as err:
        return Asked(None, f"not recoverable: {path} at {sha[:12]} does not load here ({err})")
    if planned != case_ids:
        return Asked(None, f"not recoverable: {path} at {sha[:12]} expands to {len(planned)} cases, "
                           f"{len(planned & case_ids)} of the run's {len(case_ids)} (the run used --only, or another file)")
    spec_of = {"scenario": scenario.model_dump(mode="json"), "device": facts.get("device") or "auto"}
    return Asked(spec_of, f"{path} at commit {sha[:12]}: its cases are the run's {len(case_ids)} "
                          "(timing rules are not in a case id: unconfirmed)")


def recipe(records: pd.DataFrame, rerun: list[str], show: Callable[[str, str], str | None]) -> Recipe:
    """The recipe of the one run in `records`; `rerun` is the `repro ... --run` command's words."""
    facts = run_facts(records)
    spec = stored_spec(records)
    if spec is not None:
        asked = Asked(spec, f"stored in the run's records (scenario_hash {facts.get('scenario_hash')})", True)
    else:
        asked = scenario_at_commit(facts, set(records["case_id"]), show)
    threads = facts.get("cpu_threads") or "?"
    about = (f"run {facts['run_id']} of scenario {facts['scenario']}: {len(records)} cases on "
             f"{facts.get('device_name') or facts.get('device')} ({facts.get('device')}, {threads} threads), "
             f"torch {facts.get('torch_version')}, started {facts.get('started_at') or '?'}")
    again = " ".join([*environment(facts), shlex.join(rerun)]) if asked.spec is not None else ""
    return Recipe(facts["run_id"], facts["scenario"], about, install_lines(facts), run_command(facts, asked),
                  again, asked, unknowns(facts, asked))
