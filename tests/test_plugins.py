"""Adding a precision or a workload is one folder: a toy of each, written as a folder of its own
(a torch-free `__init__.py` declaring it, its torch code beside it), runs through plan, run and
report with nothing else changed; the toy precision's own backing library (`packaging`, installed
wherever pip is) is collected, selected, diffed, shown and reproduced like torchao. The folders are
put on the packages' search path for the test (`suite.precisions.__path__`,
`suite.workloads.__path__`), as if they sat in `suite/`."""

from __future__ import annotations

import json
import sys
import textwrap
from datetime import datetime, timezone
from importlib import metadata

import pandas as pd
import pyarrow.parquet as pq
import pytest

import suite.precisions
import suite.workloads
from suite.scenario import registry

TOY_PRECISION = {
    "__init__.py": '''
        """A toy precision: bf16 operands, A multiplied by a factor first (tests/test_plugins.py)."""

        from pydantic import Field

        from suite.scenario.declare import Hooks, Library, Plot, PrecisionRecord, columns
        from suite.scenario.params import Params, PositiveFloat


        class ToyScaleParams(Params):
            """`toy_scaled`: how A is scaled before its GEMM."""

            toy_scale: PositiveFloat = Field(1.0, description="multiplies A before the GEMM")


        # the library whose version its numbers depend on: any installed distribution serves
        PACKAGING = Library("packaging_version", "packaging (toy)", ("packaging",), "packaging", install="packaging")
        PRECISIONS = {
            "toy_scaled": PrecisionRecord("suite.precisions.toy_scaled.recipes:TOY_SCALED", ToyScaleParams, "bf16",
                                          description="bf16 operands, A scaled by toy_scale",
                                          scaling="toy_prescale", fused_casts=True, libraries=(PACKAGING,)),
        }
        HOOKS = Hooks(scalings={"toy_prescale": "suite.precisions.toy_scaled.hooks:TOY_PRESCALE"},
                      derived=("suite.precisions.toy_scaled.hooks:with_scale",),
                      columns=columns("derived (toy_scaled)", ("toy_scale_used", "float", "", "the scale of A")),
                      answers=("suite.precisions.toy_scaled.hooks:error_by_scale",),
                      plots=(Plot("toy_error_by_scale", "suite.precisions.toy_scaled.hooks:draw_error"),))
    ''',
    "hooks.py": '''
        """What the toy precision adds to the analysis and the report (torch-free)."""

        import json

        import pandas as pd

        from suite.scenario.declare import Casts

        # the roofline model's term for its scaling kind: one pass over each operand, scaling it
        TOY_PRESCALE = Casts(fused=lambda model, role, e, s, first, width: [
            model.Kernel("cast", f"{role} toy scale", (first + 2) * e)])


        def with_scale(df):
            """`toy_scale_used`: the toy's scale of A (1 where not set), on its own rows."""
            mine = df["precision"] == "toy_scaled"
            scale = [json.loads(p).get("toy_scale", 1.0) if isinstance(p, str) else 1.0 for p in df["params"]]
            return df.assign(toy_scale_used=pd.Series(scale, index=df.index).where(mine))


        def error_by_scale(df, kit):
            rows = kit.with_settings(df)
            rows = rows[rows["toy_scale_used"].notna()]
            if rows.empty:
                return []
            worst = rows.groupby("toy_scale_used")["rel_err"].max()
            return ["toy_scaled: worst rel. error " + ", ".join(f"{e:.2g} at scale {s:g}" for s, e in worst.items()) + "."]


        def draw_error(df, workload, path, kit):
            rows = df[(df["workload"] == workload) & (df["precision"] == "toy_scaled")]
            if rows.empty:
                return None
            fig, axes = kit.figures.new(4.0, 3.0)
            scale = [json.loads(p).get("toy_scale", 1.0) for p in rows["params"]]
            kit.figures.name(axes[0, 0].scatter(scale, rows["rel_err"]), [f"scale {s:g}" for s in scale])
            return kit.figures.save(fig, path)
    ''',
    "recipes.py": '''
        import torch

        from suite.precisions.base import Precision
        from suite.precisions.toy_scaled import ToyScaleParams


        class ToyScaled(Precision):
            def gemm(self, a, b, params):
                scale = ToyScaleParams.of(params).toy_scale
                a, b = (a * scale).to(torch.bfloat16), b.to(torch.bfloat16)
                return lambda: torch.matmul(a, b).float()


        TOY_SCALED = ToyScaled("toy_scaled", torch.bfloat16)
    ''',
}

TOY_WORKLOAD = {
    "__init__.py": '''
        """A toy workload: C = A @ B + shift, its output's mean recorded (tests/test_plugins.py)."""

        from pydantic import Field

        from suite.scenario.declare import Hooks, Library, Metric, Plot, WorkloadRecord, columns
        from suite.scenario.params import Params


        class ShiftParams(Params):
            """`toy_shifted`: what is added to every output element."""

            shift: float = Field(description="added to C (required)")


        COLUMNS = columns(
            "toy shifted GEMM (tests/test_plugins.py)",
            ("shift", "float", "", "what was added to C"),
            ("out_mean", "float", "", "the mean of one call's output"),
        )
        # its own library (pluggy: installed wherever pytest is)
        PLUGGY = Library("pluggy_version", "pluggy (toy)", ("pluggy",), "pluggy", install="pluggy")
        # its own accuracy metric, on the column its derived hook adds: `Budget(max_out_offset=...)`
        OFFSET = Metric("out_offset", "max_out_offset", "output offset", "toy_shifted: |mean - shift| at most X", "X",
                        absolute=True, meets="output offset within {b:.3g}", over="output offset {v:+.3g}, over {b:.3g}",
                        shown="output offset {v:+.3g}", judges="toy shifted GEMMs")
        WORKLOADS = {
            "toy_shifted": WorkloadRecord(
                "suite.workloads.toy_shifted.workload:TOY_SHIFTED", ShiftParams, shaped=True, columns=COLUMNS,
                description="a GEMM plus a constant", detail_columns=(("out_mean", "output mean", ".3f"),),
                roofline="toy_shifted_gemm", libraries=(PLUGGY,),
                plots=(Plot("shift_error", "sweep", {
                    "x": "shift", "y": "rel_err", "xlabel": "shift", "ylabel": "relative error",
                    "title": "error against the shift"}),
                       Plot("toy_out_mean", "suite.workloads.toy_shifted.hooks:draw_out_mean"))),
        }
        HOOKS = Hooks(derived=("suite.workloads.toy_shifted.hooks:with_offset",),
                      columns=columns("derived (toy_shifted)", ("out_offset", "float", "", "out_mean - shift")),
                      metrics=(OFFSET,),
                      answers=("suite.workloads.toy_shifted.hooks:offset_answer",),
                      rooflines={"toy_shifted_gemm": "suite.workloads.toy_shifted.hooks:kernels"})
    ''',
    "hooks.py": '''
        """What the toy workload adds to the analysis, the model and the report (torch-free)."""


        def kernels(model, task, precision, m, k, n, params):
            """The roofline model's terms of one call: the recipe's GEMM, then the shift read and written."""
            return model.gemm_case(precision, m, k, n, params) + [model.Kernel("other", "add shift", 8 * m * n)]


        def with_offset(df):
            """`out_offset`: the output's mean less the shift (the GEMM's own mean), on its rows."""
            if "shift" not in df or "out_mean" not in df:
                return df
            return df.assign(out_offset=df["out_mean"] - df["shift"])


        def offset_answer(df, kit):
            rows = kit.with_settings(df)
            rows = rows[rows["out_offset"].notna()] if "out_offset" in rows else rows.iloc[:0]
            if rows.empty:
                return []
            return [f"toy_shifted: the output's mean less the shift is {rows['out_offset'].abs().max():.3g} at most."]


        def draw_out_mean(df, workload, path, kit):
            rows = df[(df["workload"] == workload) & df["out_mean"].notna()] if "out_mean" in df else df.iloc[:0]
            if rows.empty:
                return None
            fig, axes = kit.figures.new(4.0, 3.0)
            kit.figures.name(axes[0, 0].scatter(rows["shift"], rows["out_mean"]), list(rows["variant"]))
            return kit.figures.save(fig, path)
    ''',
    "workload.py": '''
        import torch

        from suite.workloads.base import Prepared, Workload
        from suite.workloads.toy_shifted import ShiftParams


        class ToyShifted(Workload):
            name = "toy_shifted"

            def prepare(self, case, precision, device):
                shift = ShiftParams.of(case.params).shift
                gen = torch.Generator().manual_seed(case.seed)
                a, b = torch.randn(case.m, case.k, generator=gen), torch.randn(case.k, case.n, generator=gen)
                matmul = precision.gemm(a, b, case.params)
                ref = a.double() @ b.double() + shift

                def check_output(out):
                    error = torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref)
                    return {"rel_err": float(error), "out_mean": float(out.mean())}

                def fn():
                    return matmul() + shift

                return Prepared(fn=fn, flops=2.0 * case.m * case.n * case.k, bytes_moved=None,
                                check=lambda: check_output(fn()), check_output=check_output, extra={"shift": shift})


        TOY_SHIFTED = ToyShifted()
    ''',
}


def write_folder(root, files: dict[str, str]) -> None:
    root.mkdir(parents=True)
    for name, text in files.items():
        (root / name).write_text(textwrap.dedent(text).lstrip())


@pytest.fixture
def toy_folders(tmp_path):
    """The two folders on the packages' search path, found by the registry; everything undone after."""
    write_folder(tmp_path / "precisions" / "toy_scaled", TOY_PRECISION)
    write_folder(tmp_path / "workloads" / "toy_shifted", TOY_WORKLOAD)
    paths = {suite.precisions: list(suite.precisions.__path__), suite.workloads: list(suite.workloads.__path__)}
    try:
        suite.precisions.__path__.append(str(tmp_path / "precisions"))
        suite.workloads.__path__.append(str(tmp_path / "workloads"))
        registry.discover()
        yield tmp_path
    finally:
        for package, path in paths.items():
            package.__path__[:] = path
        for name in [m for m in sys.modules if m.startswith(("suite.precisions.toy_", "suite.workloads.toy_"))]:
            del sys.modules[name]
        registry.discover()


TOY_SCENARIO = """
    [[sweep]]
    workload = "toy_shifted"
    precisions = ["fp32", "toy_scaled"]
    mkn = [[32, 48, 16]]
    params = { shift = [0.5, 4.0], toy_scale = [1.0, 2.0] }
"""


def test_a_toy_precision_and_workload_run_through_plan_run_and_report(toy_folders, write_scenario, capsys):
    from suite import pipeline
    from suite.results import columns
    from suite.scenario import plan, spec
    from tests.conftest import quick_toml

    from suite.analysis.roofline import model

    assert registry.PRECISIONS["toy_scaled"].peak == "bf16" and registry.WORKLOADS["toy_shifted"].shaped
    # its scaling kind's cost term, in the roofline model's kernels of a GEMM and a layer step
    gemm = model.case_kernels("gemm", "toy_scaled", 64, 32, 16, {})
    assert [(k.label, k.bytes) for k in gemm if k.what == "cast"] == [("input toy scale", 4 * 64 * 32),
                                                                    ("weight toy scale", 4 * 16 * 32)]
    assert any(k.label == "grad_output toy scale" for k in model.case_kernels("linear", "toy_scaled", 64, 32, 16, {}))
    # the toy workload's own kind of call to the model: the recipe's GEMM (its casts too), then the shift
    toy_call = model.case_kernels("toy_shifted", "toy_scaled", 64, 32, 16, {})
    assert toy_call[-1].label == "add shift" and any(k.label == "input toy scale" for k in toy_call)
    scenario = spec.load(write_scenario(quick_toml("toy", TOY_SCENARIO, baseline="fp32")))
    cases = plan.expand(scenario)
    # toy_scale is the precision's: fp32 cases keep only the workload's shift (2 cases), the toy's 4
    assert sorted((c.precision, json.dumps(c.params, sort_keys=True)) for c in cases) == sorted([
        ("fp32", '{"shift": 0.5}'), ("fp32", '{"shift": 4.0}'),
        ("toy_scaled", '{"shift": 0.5}'), ("toy_scaled", '{"shift": 0.5, "toy_scale": 2.0}'),
        ("toy_scaled", '{"shift": 4.0}'), ("toy_scaled", '{"shift": 4.0, "toy_scale": 2.0}')])
    assert [c.case_id for c in plan.expand(scenario)] == [c.case_id for c in cases]  # stable ids

    out = toy_folders / "out"
    result = pipeline.run(pipeline.RunRequest(scenario, out / "results", out / "reports", "cpu", progress=False))
    records = result.records.to_dict("records")
    toy = {r["params"]: r for r in records if r["precision"] == "toy_scaled"}
    assert {r["status"] for r in records} == {"ok"}, [r["reason"] for r in records]
    assert toy['{"shift": 0.5}']["rel_err"] < 2**-6  # bf16 operands: about 2^-8
    assert toy['{"shift": 0.5, "toy_scale": 2.0}']["rel_err"] > 0.5  # 2AB + s against AB + s: the parameter worked
    assert all(r["shift"] in (0.5, 4.0) and r["out_mean"] == r["out_mean"] for r in records)
    assert {r["pluggy_version"] for r in records} == {metadata.version("pluggy")}  # the toy workload's library
    assert_the_toy_metric_judges(result.records)

    schema = pq.read_schema(result.path)  # the declared columns, typed, with their meaning
    assert schema.field("out_mean").metadata[b"description"] == b"the mean of one call's output"
    assert str(schema.field("shift").type) == "double"
    assert "`out_mean`" in columns.schema_markdown() and "### `toy_scaled`" in registry.parameters_markdown()

    report = out / "reports" / "toy"
    text = (report / "report.md").read_text()
    assert "## toy_shifted" in text and "| output mean |" in text  # the declared detail table
    assert (report / "shift_error_toy_shifted.svg").stat().st_size > 0  # the declared plot
    # each folder's own hooks: a plot, a derived column its answer reads, the answer in the headline
    assert (report / "toy_out_mean_toy_shifted.svg").stat().st_size > 0
    assert (report / "toy_error_by_scale_toy_shifted.svg").stat().st_size > 0
    assert "- toy_shifted: the output's mean less the shift is " in text
    assert "- toy_scaled: worst rel. error " in text and "at scale 2." in text
    with pytest.raises(spec.ScenarioError, match="params.toy_scale: -1.0 is not valid for 'toy_scaled'"):
        spec.load(write_scenario(quick_toml("toy2", TOY_SCENARIO.replace("2.0]", "-1.0]")), "toy2.toml"))
    capsys.readouterr()
    assert_the_toy_library_travels(result.path, out, capsys)


def assert_the_toy_metric_judges(df) -> None:
    """The folders' derived columns, declared and added, and the toy workload's budget metric on its
    own: a bound of it judges its settings (`recommend`), as a loss bound judges training steps."""
    from suite.analysis.outcome import answers

    assert {"toy_scale_used", "out_offset"} <= {column.name for column in registry.derived_columns()}
    judged = answers.with_settings(df)
    assert judged["out_offset"].notna().all() and judged["toy_scale_used"].notna().any()
    loose, tight = answers.Budget(max_out_offset=1e3), answers.Budget(max_out_offset=1e-12)
    assert tight.describe() == "output offset within 1e-12" and tight.bounds() == {"max_out_offset": 1e-12}
    assert answers.recommend(df, loose)["pick"].notna().all()
    picks = answers.recommend(df, tight)
    assert picks["pick"].isna().all() and "out_offset" in picks
    assert {r["reason"].split(" +")[0].split(" -")[0] for rows in picks["rejected"] for r in rows} == {"output offset"}


def assert_the_toy_library_travels(path, out, capsys) -> None:
    """The toy precision's library: its version on every record, in `env`, in a run selector, in
    what env-diff and compare say differs from a run that had another, and pinned by repro."""
    from suite import cli
    from suite.results import store

    installed = metadata.version("packaging")
    df = store.read_file(path)
    assert set(df["packaging_version"]) == {installed}  # collected into every record
    assert cli.main(["env"]) == 0 and f"packaging {installed}" in capsys.readouterr().out
    # the same run as if measured a year earlier with packaging 0.1: a run of its own beside it
    older = store.new_run_id(datetime(2025, 1, 1, tzinfo=timezone.utc))
    then = df.assign(run_id=older, packaging_version="0.1", started_at=df["started_at"] - pd.Timedelta(days=365))
    store.write_run(store.records_of(then), path.parent / f"{older}.parquet")
    results = ["--results", str(out / "results")]
    assert cli.main(["env-diff", "packaging=0.1", f"packaging={installed}", *results]) == 0
    assert f"packaging (toy) 0.1 -> {installed}" in capsys.readouterr().out
    cli.main(["compare", "packaging=0.1", f"packaging={installed}", *results, "--quiet", "--fail-on", "none",
              "--out", str(out / "compare")])
    said, page = capsys.readouterr().out, (out / "compare" / "index.html").read_text()
    assert f"what differs: packaging (toy) 0.1 -> {installed}" in said and f"packaging (toy) {installed}" in said
    assert f"packaging (toy) 0.1 -&gt; {installed}" in page  # what differs, and the sides' facts:
    assert f"<th>packaging (toy)</th><td>0.1</td><td>{installed}</td>" in page
    assert cli.main(["repro", str(path)]) == 0
    assert f"pip install 'packaging=={installed}'" in capsys.readouterr().out.splitlines()


# A scaling kind cast eagerly (no library kernels, `fused_casts` False), whose own parameter, not
# fp8's `quantize`, says when a GEMM case casts inside the timed call (`Casts.inline`).
EAGER_PRECISION = {
    "__init__.py": '''
        """A toy FP8 recipe whose casts the roofline model counts as eager PyTorch runs them."""

        from pydantic import Field

        from suite.scenario.declare import Hooks, PrecisionRecord
        from suite.scenario.params import Params


        class ToyEagerParams(Params):
            """`toy_eager`: where its GEMM cases cast."""

            toy_cast_in_call: bool = Field(False, description="cast A and B inside the timed call")


        PRECISIONS = {"toy_eager": PrecisionRecord("suite.precisions.toy_eager.recipes:TOY_EAGER", ToyEagerParams,
                                                   "fp8", description="eager casts", scaling="toy_eager_cast")}
        HOOKS = Hooks(scalings={"toy_eager_cast": "suite.precisions.toy_eager.casts:TOY_EAGER_CAST"})
    ''',
    "casts.py": '''
        from suite.scenario.declare import Casts

        TOY_EAGER_CAST = Casts(
            fused=lambda model, role, e, s, first, width: [model.Kernel("cast", f"{role} fused", (first + 1) * e)],
            eager=lambda model, role, e, s, width: [model.Kernel("cast", f"{role} eager", (s + 1) * e)],
            layer=lambda model, tensors, width: [model.Kernel("cast", f"{r} layer", (s + 1) * e)
                                                 for r, e, s in tensors],
            inline=lambda opts: opts.toy_cast_in_call)
    ''',
}


@pytest.fixture
def eager_folder(tmp_path):
    write_folder(tmp_path / "precisions" / "toy_eager", EAGER_PRECISION)
    path = list(suite.precisions.__path__)
    try:
        suite.precisions.__path__.append(str(tmp_path / "precisions"))
        registry.discover()
        yield
    finally:
        suite.precisions.__path__[:] = path
        for name in [m for m in sys.modules if m.startswith("suite.precisions.toy_")]:
            del sys.modules[name]
        registry.discover()


def test_a_new_eager_scaling_kind_is_its_folder_alone(eager_folder):
    """The model counts a folder's eager scaling kind from its declaration only: no cast where its
    GEMM cases cast before the timing, its `eager` casts where its own parameter says the call casts,
    its `layer` casts in an eager Linear step."""
    from suite.analysis.roofline import model

    def casts(workload, params):
        kernels = model.case_kernels(workload, "toy_eager", 64, 32, 16, params)
        return [(k.label, k.bytes) for k in kernels if k.what == "cast"]

    assert casts("gemm", {}) == []
    assert casts("gemm", {"toy_cast_in_call": True}) == [("A eager", 3 * 64 * 32), ("B eager", 3 * 16 * 32)]
    assert [label for label, _ in casts("linear", {})] == ["input layer", "weight layer", "grad_output layer"]
