"""Bad input never ends in a traceback. Property tests (hypothesis) over scenario files (random bytes,
mutated real scenarios, random structures written as TOML) and command lines: every input gives a
valid plan, a one-line `UserError`/`ScenarioError`, or argparse's usage error (exit 2)."""

from __future__ import annotations

import functools
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import torch

from suite import cli, pipeline
from suite.measure import env
from suite.scenario import plan, registry, spec
from suite.results import store
from tests.conftest import TINY_SCENARIO

ROOT = Path(__file__).resolve().parent.parent
FUZZ = settings(max_examples=200, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def plan_or_one_line_error(path: Path) -> list[plan.Case] | None:
    """The property: a scenario file loads and expands, or fails with one line naming the file."""
    try:
        scenario = spec.load(path)
    except spec.ScenarioError as err:
        message = str(err)
        assert message.startswith(str(path)) and "\n" not in message, message
        event("one-line error")
        return None
    event("valid plan")
    cases = plan.expand(scenario)
    ids = [c.case_id for c in cases]
    assert len(ids) == len(set(ids))
    for case in cases:
        assert case.workload in registry.WORKLOADS and case.precision in registry.PRECISIONS
    return cases


# --- scenario files: raw bytes and mutated real scenarios -------------------------------------------

@FUZZ
@given(data=st.binary(max_size=300))
def test_any_bytes(tmp_path, data):
    path = tmp_path / "s.toml"
    path.write_bytes(data)
    plan_or_one_line_error(path)


BASES = [TINY_SCENARIO, (ROOT / "scenarios" / "cpu.toml").read_text(encoding="utf-8")]
TOKENS = st.sampled_from([
    "[", "]", "[[sweep]]", "[defaults]", "[defaults.timing]", "[sweep.timing]", "=", "\"", "'", '"""', "\n", "#",
    "{", "}", ",", ".", "\\", "\x00", "\x7f", "ü", "inf", "-inf", "nan", "-1", "0", "1e999", "18446744073709551616",
    "true", "1979-05-27", "sizes", "precisions", "baseline", "shapes", "mkn", "params", "include", "exclude",
    "workload", "name", "timing", "budget_s", "fp8", "fp32", "gemm", "square", "llama3_8b", "tokens",
]) | st.text(max_size=6)


@st.composite
def mutated(draw):
    text = draw(st.sampled_from(BASES))
    for _ in range(draw(st.integers(1, 6))):
        at = draw(st.integers(0, len(text)))
        cut = draw(st.integers(0, 12))
        op = draw(st.sampled_from(["insert", "delete", "replace"]))
        token = draw(TOKENS)
        if op == "insert":
            text = text[:at] + token + text[at:]
        elif op == "delete":
            text = text[:at] + text[at + cut:]
        else:
            text = text[:at] + token + text[at + cut:]
    return text


@FUZZ
@given(text=mutated())
def test_mutated_scenarios(tmp_path, text):
    path = tmp_path / "s.toml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    plan_or_one_line_error(path)


def test_deeply_nested_toml_is_an_error_not_a_crash(tmp_path):
    path = tmp_path / "deep.toml"
    path.write_text("name = " + "[" * 5000 + "]" * 5000)
    with pytest.raises(spec.ScenarioError, match="deep.toml: invalid TOML"):
        spec.load(path)


# --- scenario files: random structures, written as TOML --------------------------------------------

def toml_string(s: str) -> str:
    out = []
    for ch in s:
        if ch in '"\\' or ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return toml_string(v)
    if isinstance(v, list):
        return "[" + ", ".join(map(toml_value, v)) + "]"
    return "{" + ", ".join(f"{toml_string(k)} = {toml_value(x)}" for k, x in v.items()) + "}"


def toml_document(doc: dict) -> str:
    return "".join(f"{toml_string(k)} = {toml_value(v)}\n" for k, v in doc.items())


INT64 = st.integers(-(2**63), 2**63 - 1)
SCALAR = st.one_of(st.booleans(), INT64, st.floats(), st.text(max_size=8))
ANY = st.recursive(SCALAR, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
                   max_leaves=6)


SIZES = st.lists(st.sampled_from([16, 32, 48, 64, 1024, 2**40]), min_size=1, max_size=3, unique=True)
POW2 = st.lists(st.sampled_from([16, 32, 64, 1024, 2**40]), min_size=1, max_size=3, unique=True)
TRIPLE = st.lists(st.sampled_from([1, 16, 48, 64, 10**7]), min_size=3, max_size=3)
TIMING = st.fixed_dictionaries({}, optional={
    "warmup_s": st.sampled_from([0.0, 0.01, 0.5]), "min_warmup": st.integers(1, 3),
    "min_samples": st.integers(1, 10), "max_samples": st.integers(10, 1000),
    "target_rel_ci": st.sampled_from([0.01, 0.5]), "budget_s": st.sampled_from([0.01, 1.0]),
})
PARAMS = st.dictionaries(st.sampled_from(["mode", "x", "<b>"]), SCALAR | st.lists(SCALAR, min_size=1, max_size=3),
                         max_size=2)


@st.composite
def valid_sweep(draw) -> dict:
    precisions = draw(st.lists(st.sampled_from(sorted(registry.PRECISIONS)), min_size=1, max_size=4, unique=True))
    sweep = {"workload": draw(st.sampled_from(sorted(w for w, r in registry.WORKLOADS.items() if r.shaped))), "precisions": precisions}
    source = draw(st.sampled_from(["square", "square_pow2", "llama3_8b", "mkn"]))
    if source == "mkn":
        sweep["mkn"] = draw(st.lists(TRIPLE, min_size=1, max_size=3))
    else:
        sweep["shapes"] = source
        if source == "llama3_8b":
            if draw(st.booleans()):
                sweep["tokens"] = draw(st.sampled_from([1, 2048]))
        else:
            sweep["sizes"] = draw(POW2 if source == "square_pow2" else SIZES)
    if draw(st.booleans()):
        sweep["baseline"] = draw(st.sampled_from(precisions))
    if draw(st.booleans()):
        sweep["params"] = draw(PARAMS)
    if draw(st.booleans()):
        sweep["exclude"] = [{"precision": draw(st.sampled_from(precisions))}]
    if draw(st.booleans()):
        sweep["include"] = [dict(zip("mkn", draw(TRIPLE)), precision=draw(st.sampled_from(precisions)))]
    if draw(st.booleans()):
        sweep["timing"] = draw(TIMING)
    return sweep


VALID_SCENARIO = st.fixed_dictionaries(
    {"name": st.sampled_from(["s", "cpu", "a.b-c_1"]), "sweep": st.lists(valid_sweep(), min_size=1, max_size=3)},
    optional={"description": st.text(max_size=20),
              "defaults": st.fixed_dictionaries({}, optional={
                  "device": st.sampled_from(["auto", "cpu", "cuda"]), "seed": INT64, "timing": TIMING})},
)


@st.composite
def corrupted(draw, doc: dict) -> dict:
    """`doc` with one value replaced, one key removed or one unknown key added, somewhere inside."""
    node = doc
    while True:  # walk down to a random table or array
        children = list(node.items()) if isinstance(node, dict) else list(enumerate(node))
        deeper = [(k, v) for k, v in children if isinstance(v, (dict, list)) and v]
        if not deeper or draw(st.booleans()):
            break
        node = draw(st.sampled_from(deeper))[1]
    keys = list(node) if isinstance(node, dict) else list(range(len(node)))
    action = draw(st.sampled_from(["replace", "remove", "add"]))
    if action == "add" and isinstance(node, dict):
        node[draw(st.text(max_size=6))] = draw(ANY)
    elif action == "remove" and keys:
        del node[draw(st.sampled_from(keys))]
    elif keys:
        node[draw(st.sampled_from(keys))] = draw(ANY | st.sampled_from(["fp64", "nope", "bogus", "..", 0, -1, []]))
    return doc


# Half valid scenarios (checked all the way to a plan), half with one to three things wrong.
SCENARIO = st.one_of(
    VALID_SCENARIO,
    VALID_SCENARIO.flatmap(corrupted),
    VALID_SCENARIO.flatmap(corrupted).flatmap(corrupted).flatmap(corrupted),
    st.dictionaries(st.text(max_size=8), ANY, max_size=4),
)


@FUZZ
@given(doc=SCENARIO)
def test_random_scenario_structures(tmp_path, doc):
    path = tmp_path / "s.toml"
    path.write_text(toml_document(doc), encoding="utf-8")
    plan_or_one_line_error(path)


# --- command lines ----------------------------------------------------------------------------------

RUN_ID = "20260101T120000Z-abcdef"  # the sandbox holds an unfinished run with this id
JUNK = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), max_size=6)
SCENARIO_ARG = ["tiny", "tiny.toml", "scenarios/tiny.toml", "broken", "broken.toml", "missing", "missing.toml",
                "scenarios", "", "-"]
FOLDER = ["scenarios", "bad", "missing", "tiny.toml"]
OPTIONS = {
    "run": {"--scenarios": FOLDER, "--results": ["results", "out/r", "tiny.toml"], "--reports": ["reports", "tiny.toml"],
            "--device": ["cpu", "cuda", "auto", "gpu"], "--no-report": None, "--quiet": None,
            "--resume": [RUN_ID, "20260101T120000Z-000000", "../../etc", "latest"], "--isolate": None,
            "--case-timeout": ["30", "0", "-5", "nan", "inf", "soon"]},  # (needs --isolate)
    "plan": {"--scenarios": FOLDER},
    "list": {"--scenarios": FOLDER},
    "report": {"--out": ["out", "tiny.toml"], "--all-runs": None},
}
POSITIONAL = {"run": SCENARIO_ARG, "plan": SCENARIO_ARG, "list": [],
              "report": ["results", "results/tiny", "missing", "tiny.toml", "broken.toml", "bad"]}


def pick(values: list[str]):
    """The first (valid) value more often than not, else any listed value or junk."""
    return st.integers(0, 9).flatmap(lambda i: st.just(values[0]) if i < 6 else st.sampled_from(values) | JUNK)


@st.composite
def command_line(draw) -> list[str]:
    command = draw(st.sampled_from([*OPTIONS, "nonsense", "--help", ""]))
    argv = [command]
    if POSITIONAL.get(command) and draw(st.integers(0, 9)):
        argv.append(draw(pick(POSITIONAL[command])))
    options = OPTIONS.get(command, {})
    for flag in draw(st.lists(st.sampled_from(sorted(options)), max_size=3, unique=True)) if options else []:
        argv.append(flag)
        if options[flag] is not None and draw(st.integers(0, 9)):
            argv.append(draw(pick(options[flag])))
    if not draw(st.integers(0, 9)):  # a stray token somewhere
        argv.insert(draw(st.integers(0, len(argv))), draw(st.sampled_from(["-h", "--bogus", "--", "-", "="]) | JUNK))
    return argv


# One fast case: fp32 32x32x32 with a tiny timing budget.
FAST_SCENARIO = TINY_SCENARIO.replace('["fp32", "tf32", "bf16", "fp16"]', '["fp32"]').replace("[32, 64]", "[32]")


@pytest.fixture
def cli_sandbox(tmp_path, monkeypatch):
    """A working folder with valid and broken scenarios; the environment is captured once and
    reports only create their folder (rendering is tested elsewhere), and `--isolate` runs the case
    here, so that hundreds of command lines take seconds, not minutes."""
    for folder in ("scenarios", "bad"):
        (tmp_path / folder).mkdir()
    for path in ("scenarios/tiny.toml", "tiny.toml"):
        (tmp_path / path).write_text(FAST_SCENARIO)
    for path in ("bad/broken.toml", "broken.toml"):
        (tmp_path / path).write_text("name = [")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(env, "capture", functools.lru_cache(env.capture))

    from suite import report
    from suite.report import pages
    from suite.measure import executors
    from suite.measure.executors.process import Process
    from suite.measure.timing import clock_for

    def render_stub(df, out):
        pages.output_dir(out)  # the real folder checks, without drawing anything
        return []

    def in_process(self, unit, run_meta, progress=None):
        # the unit as the child process would run it, in this process (a child costs seconds)
        device = torch.device(self.device)
        return executors.run_here(unit, device, clock_for(device), run_meta)

    monkeypatch.setattr(report, "render", render_stub)
    monkeypatch.setattr(Process, "run_unit", in_process)
    scenario = spec.load(tmp_path / "tiny.toml")
    meta = env.run_meta(torch.device("cpu"))
    header = {"plan": [c.case_id for c in plan.expand(scenario)],
              "identity": {key: meta.get(key) for key in pipeline.IDENTITY}}
    store.start_run(tmp_path / "results", scenario.name, RUN_ID, header).close()
    return tmp_path


@settings(FUZZ, max_examples=100)  # some of these are whole (one-case) runs
@given(argv=command_line())
def test_any_command_line(cli_sandbox, capsys, argv):
    try:
        status = cli.main(argv)
    except SystemExit as stop:  # argparse: --help (0) or a usage error (2)
        assert stop.code in (0, 2), argv
        status = stop.code
    out, err = capsys.readouterr()
    event(f"{argv[0]}: exit {status}")
    assert "Traceback" not in err and "Traceback" not in out, (argv, err)
    assert status in (0, 1, 2), (argv, status, err)
    if status == 2:
        errors = [line for line in err.splitlines() if "error:" in line]
        assert len(errors) == 1, (argv, err)  # exactly one line says what was wrong


def test_run_with_a_results_folder_that_is_a_file_is_one_line(cli_sandbox, capsys):
    assert cli.main(["run", "tiny", "--results", "tiny.toml", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "cannot create run journal" in err and err.count("\n") == 1
