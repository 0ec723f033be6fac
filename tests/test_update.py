"""Update-side recipes (suite/precisions/update.py): the swamping threshold derived from bf16's
format and checked against each recipe's own optimizer and parameter storage, bytes per parameter
read off a training step against the textbook count, and skip reasons when a library is missing."""

from __future__ import annotations

import math
import sys

import pytest
import torch
from torch import nn

from suite.measure import inprocess
from suite.measure.timing import CpuClock
from suite.scenario import registry
from suite.scenario.plan import Case
from tests.test_train_step import FAST, checked

CPU = torch.device("cpu")
UPDATE_RECIPES = ["bf16_pure", "bf16_pure_sr", "bf16_pure_kahan", "bf16_adamw8bit", "bf16_adamw4bit", "bf16_adamw_fp8"]
# bf16 keeps 8 significant bits: eps = 2^-7 is the spacing just above 1.0, so w + u rounds back to
# w = 1 whenever u < eps / 2 = 2^-8 (round-to-nearest). An update of 2^-9 sits at half of that.
BF16_EPS = torch.finfo(torch.bfloat16).eps
THRESHOLD = BF16_EPS / 2
UPDATE = 2.0**-9
N = 2**14  # entries: a multiple of every low-bit block (256, 128) and above torchao's 4096 minimum
STEPS = 8  # 8 x 2^-9 = 2^-6: a whole number of bf16 ulps above 1.0, so a kept sum is representable
# a training step small enough to count bytes in well under a second (4.6k parameters)
SMALL = {"n_layer": 1, "d_model": 16, "vocab": 64, "seq_len": 16, "batch": 2, "steps": 2}


class Weights(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(N))


def increments(name: str, master: str = "fp32") -> torch.Tensor:
    """Per entry, how far STEPS AdamW steps moved w = 1 through the recipe's own module storage and
    optimizer, with a constant gradient of -1 and lr = 2^-9: Adam normalises the gradient, so each
    step's update is lr * m_hat / sqrt(v_hat) = 2^-9 (to the rounding of the stored moments)."""
    # torchao's recipes with compile_step = false: their own step function, run eagerly (compiling
    # it is minutes of inductor on 2 cores and changes nothing this test looks at)
    recipe = registry.precision(name).configured({"master": master, "compile_step": False})
    reason = recipe.unsupported(CPU)
    if reason:
        pytest.skip(reason)
    module = recipe.prepare_module(Weights(), CPU)
    opt = recipe.optimizer([{"params": [module.w], "weight_decay": 0.0}], lr=UPDATE, betas=(0.9, 0.95), eps=1e-8,
                           device=CPU)
    for _ in range(STEPS):
        module.w.grad = torch.full_like(module.w, -1.0)
        opt.step()
    return module.w.detach().double() - 1.0


def test_an_update_of_half_the_threshold_is_lost_under_round_to_nearest():
    assert UPDATE == THRESHOLD / 2 == 2.0**-9
    moved = increments("bf16_pure")
    assert torch.all(moved == 0)  # every step's 2^-9 rounded back to 1.0: 2^-6 lost in total


def test_fp32_master_weights_keep_the_update():
    moved = increments("bf16")
    # fp32 holds 1 + k 2^-9 exactly (2^-24 relative), and fp32 moments make each update 2^-9
    assert torch.allclose(moved, torch.full_like(moved, STEPS * UPDATE), rtol=2**-20, atol=0)


@pytest.mark.parametrize("name", ["bf16_adamw8bit", "bf16_adamw4bit", "bf16_adamw_fp8"])
def test_low_bit_state_on_fp32_master_weights_swamps_no_update(name):
    moved = increments(name)
    # The quantized moments scale each update by their codes' rounding (a factor near 1, further
    # from it with fewer bits), but the fp32 master adds whatever comes: every entry moves, by
    # more than half of the sum round-to-nearest on bf16 weights drops entirely.
    assert torch.all(moved > STEPS * UPDATE / 2) and torch.all(moved < 2 * STEPS * UPDATE)


@pytest.mark.parametrize("name,master", [("bf16_pure_sr", "fp32"), ("bf16_adamw8bit", "bf16_sr")])
def test_stochastic_rounding_keeps_the_update_in_expectation(name, master):
    moved = increments(name, master)
    # Each step lands on a bf16 neighbour (1 or 1 + 2^-7 near 1.0), so single entries are on the
    # bf16 grid and most are off the true sum; their mean is the sum. Each step adds at most a
    # Bernoulli's spread, ulp / 2, so STEPS steps over N entries leave a standard error of at most
    # ulp / 2 sqrt(STEPS / N); 5 of those (and the moments' 2^-7) bound the mean's distance.
    grid = moved / BF16_EPS
    assert torch.all(grid == grid.round())
    assert moved.std() > 0
    sem = BF16_EPS / 2 * math.sqrt(STEPS / N)
    assert abs(float(moved.mean()) - STEPS * UPDATE) < 5 * sem + 2**-7 * STEPS * UPDATE


def test_kahan_compensation_carries_the_rounded_part_into_later_steps():
    moved = increments("bf16_pure_kahan")
    # The bf16 weight moves only once the compensation holds a whole ulp, and then by that ulp:
    # after 8 steps of 2^-9 it stands at 1 + 2^-6 (within one ulp), the same in every entry.
    assert torch.all((moved - STEPS * UPDATE).abs() <= BF16_EPS)
    assert torch.all(moved == moved[0]) and float(moved[0]) > 0


def test_bytes_per_parameter_match_the_textbook():
    """The mixed-precision reference (fp32 master weights and gradients, two fp32 AdamW moments: 16
    B/param) within 1%; pure bf16 halves every part (8), Kahan adds its bf16 buffer (10)."""
    out = checked("bf16", **SMALL)
    assert out["textbook_bytes_per_param"] == 16
    assert out["bytes_per_param"] == pytest.approx(16, rel=0.01)
    assert (out["bytes_per_param_weights"], out["bytes_per_param_master"], out["bytes_per_param_grads"]) == (4, 0, 4)
    # AdamW's step counters (one 4-byte scalar per tensor) are the only state beyond the moments
    assert out["bytes_per_param_optimizer"] == pytest.approx(8, rel=0.01)
    pure = checked("bf16_pure", **SMALL)
    assert pure["textbook_bytes_per_param"] == 8 and pure["bytes_per_param"] == pytest.approx(8, rel=0.01)
    assert (pure["bytes_per_param_weights"], pure["bytes_per_param_grads"]) == (2, 2)
    kahan = checked("bf16_pure_kahan", **SMALL)
    assert kahan["textbook_bytes_per_param"] == 10 and kahan["bytes_per_param"] == pytest.approx(10, rel=0.01)
    assert kahan["bytes_per_param_master"] == 2


def test_quantized_state_is_counted_by_what_it_stores():
    """A torchao 8-bit moment poses as an fp32 tensor; its bytes are its uint8 codes, one fp32 scale
    per block of 256 and its own 256-entry fp32 code book (torchao/optim/subclass_8bit.py)."""
    recipe = registry.precision("bf16_adamw8bit")
    if recipe.unsupported(CPU):
        pytest.skip(recipe.unsupported(CPU))
    from suite.workloads.train_step.workload import tensor_bytes

    from torchao.optim.subclass_8bit import OptimState8bit

    state = OptimState8bit.zeros((N,), block_size=256)
    assert state.element_size() == 4  # what numel x element_size alone would count
    assert tensor_bytes(state) == N * 1 + N // 256 * 4 + 256 * 4


def _fail_import(monkeypatch, module: str):
    """`import module` (and its submodules) raises ImportError, as where it is not installed."""
    for name in [m for m in sys.modules if m == module or m.startswith(module + ".")] + [module]:
        monkeypatch.setitem(sys.modules, name, None)


@pytest.mark.parametrize("name,module,extra", [
    ("bf16_pure_kahan", "optimi", "update"), ("bf16_pure_sr", "torchao", "fp8"), ("bf16_adamw4bit", "torchao", "fp8"),
])
def test_a_missing_library_is_a_skipped_case_with_its_import_error(monkeypatch, name, module, extra):
    _fail_import(monkeypatch, module)
    case = Case("t", "train_step", name, "fp32", None, None, None, {"size": "tiny", "steps": 1}, 0, FAST)
    record = inprocess.run_case(case, CPU, CpuClock(), {"run_id": "r", "device": "cpu", "device_name": "cpu"})
    assert record["status"] == "skipped"
    assert f"is not importable (import of {module}" in record["reason"]  # the ImportError itself
    assert f"pip install 'mpsuite[{extra}]'" in record["reason"]


def test_torchao_recipes_without_a_compiler_are_skipped_with_the_reason(monkeypatch):
    import shutil

    monkeypatch.setattr(shutil, "which", lambda name: None)
    reason = registry.precision("bf16_adamw8bit").unsupported(CPU)
    assert reason is not None and "C++ compiler" in reason
    assert registry.precision("bf16_pure_kahan").unsupported(CPU) is None  # optimi compiles nothing
    # the same torchao step run eagerly needs no compiler
    assert registry.precision("bf16_adamw8bit").configured({"compile_step": False}).unsupported(CPU) is None


def test_every_update_recipe_is_registered_with_a_textbook_count():
    for name in UPDATE_RECIPES:
        recipe = registry.precision(name)
        parts = recipe.textbook_bytes()
        assert set(parts) == {"weights", "master", "grads", "optimizer"} and all(v >= 0 for v in parts.values())
        assert sum(parts.values()) < 16  # each stores less than the fp32-master reference


def test_low_bit_recipe_on_bf16_weights_prepares_a_bf16_module():
    recipe = registry.precision("bf16_adamw8bit").configured({"master": "bf16_sr"})
    assert recipe.prepare_module(Weights(), CPU).w.dtype == torch.bfloat16
    assert recipe.textbook_bytes()["weights"] == 2


def test_a_run_reports_which_recipes_kept_within_the_margin_and_their_bytes(write_scenario, tmp_path, monkeypatch):
    """A real (tiny) run: every record holds the update columns, the report's headline names the
    reference's loss, each recipe's gap and bytes per parameter, and a recipe whose library is
    missing as not measured with the reason."""
    from suite import pipeline
    from suite.analysis.outcome import summary
    from suite.results import store
    from suite.scenario import spec
    from tests.conftest import quick_toml

    _fail_import(monkeypatch, "torchao")
    path = write_scenario(quick_toml("upd", """
    [[sweep]]
    workload = "train_step"
    precisions = ["bf16", "bf16_pure_kahan", "bf16_pure_sr"]
    params = { size = "tiny", n_layer = 1, d_model = 16, vocab = 64, seq_len = 16, batch = 2, steps = 5, lr = 1e-2 }
    """, baseline="bf16"))
    df = store.read_file(pipeline.run(pipeline.RunRequest(spec.load(path), tmp_path / "results", None, progress=False)).path)
    ok = df[df["status"] == "ok"].set_index("precision")
    assert sorted(ok.index) == ["bf16", "bf16_pure_kahan"]
    assert ok["textbook_bytes_per_param"].to_dict() == {"bf16": 16, "bf16_pure_kahan": 10}
    assert ok["stuck_update_frac"].between(0, 1).all() and ok["fp32_stuck_update_frac"].between(0, 1).all()
    [line] = [line for line in summary.headline(df) if line.startswith("Update precision (gpt2 1 x 16, vocab 64, 5 steps)")]
    assert f"final loss {ok.loc['bf16', 'final_loss']:.4f} nats" in line
    gap = ok.loc["bf16_pure_kahan", "final_loss"] - ok.loc["bf16", "final_loss"]
    assert f"bf16_pure_kahan {gap:+.4f}" in line and f"{ok.loc['bf16_pure_kahan', 'bytes_per_param']:.3g} B/param" in line
    assert "not measured: bf16_pure_sr skipped (torchao.optim is not importable" in line
