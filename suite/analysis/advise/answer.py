"""The whole of `advise`'s answer for one model's step on one GPU: per recipe the step speedup with
the advised filter and with every linear it can take converted, the linears' GEMM speedup (casts
included, and alone), the layers to convert and to keep; per GEMM its time and speedup under each
recipe. A plain dict, as `--json` writes it (docs/schemas/advise.schema.json)."""

from __future__ import annotations

from suite.analysis.advise import advice
from suite.analysis.advise.estimate import BASELINE, Terms, step_terms, time_all
from suite.analysis.roofline import model
from suite.core.errors import UserError
from suite.models.step import Parallel, StepWork
from suite.scenario import registry

SOURCE = "predicted: the roofline model's GEMMs and casts and the step terms of docs/advise.md"


def default_recipes() -> list[str]:
    """The recipes advised by default: every one whose casts the roofline model counts (a declared
    scaling kind: torchao's FP8 and block-scaled recipes, Transformer Engine's), in declaration order;
    each where the GPU has it (`model.unsupported`)."""
    return [name for name, record in registry.PRECISIONS.items() if record.scaling and not record.no_roofline]


def model_step(name: str, parallel: Parallel) -> StepWork:
    """A model's training step on one GPU: a preset or a config.json (`suite.models.architecture`)."""
    from suite.models import architecture, step_work

    return step_work.step_work(architecture.resolve(name), parallel)


def device_of(name: str) -> model.Device:
    device = model.gpu_device(name)
    if device is None:
        raise UserError(f"--device {name!r} is not in the peak table (suite/core/peaks.py): try h100, h200, b200, b300")
    return device


def why_not(recipe: str, device: model.Device) -> str | None:
    """Why the estimate has nothing for the recipe on this GPU, or None."""
    if recipe not in registry.PRECISIONS:
        raise UserError(f"unknown recipe {recipe!r}; known: {', '.join(sorted(registry.PRECISIONS))}")
    return registry.PRECISIONS[recipe].no_roofline or model.unsupported(recipe, device)


def ratio(base: float, mine: float) -> float:
    return base / mine if mine else float("nan")


def recipe_answer(step: StepWork, parallel: Parallel, device: model.Device, recipe: str, timed: dict,
                  base: Terms, evidence: tuple[bool, str]) -> dict:
    """One recipe's entry of the answer (module docstring)."""
    accurate, note = evidence
    decisions = advice.decide(step, recipe, timed, accurate)
    convert = [d.layer for d in decisions if d.reason is None]
    kept = [d for d in decisions if d.reason is not None]
    advised = step_terms(step, parallel, device, recipe, set(convert), timed)
    everything = step_terms(step, parallel, device, recipe, {d.layer for d in decisions if d.able}, timed)
    return {"recipe": recipe, "unsupported": None, "source": SOURCE, "accuracy": note,
            "step_speedup": ratio(base.step_s, advised.step_s),
            "step_speedup_all": ratio(base.step_s, everything.step_s),
            "gemm_speedup": ratio(base.gemm_s, advised.gemm_s),
            "gemm_only_speedup": ratio(base.gemm_only_s, advised.gemm_only_s),
            "convert": convert, "keep": [{"fqn": d.layer, "reason": d.reason} for d in kept],
            "filter_fqns": advice.filter_fqns([d.layer for d in kept]),
            "layers": [{"fqn": d.layer, "speedup": d.speedup, "gemm_only_speedup": d.gemm_only_speedup,
                        "convert": d.reason is None} for d in decisions],
            "terms": advised.as_ms(), "terms_all": everything.as_ms()}


def unsupported_answer(recipe: str, reason: str, note: str) -> dict:
    return {"recipe": recipe, "unsupported": reason, "source": SOURCE, "accuracy": note, "step_speedup": None,
            "step_speedup_all": None, "gemm_speedup": None, "gemm_only_speedup": None, "convert": [], "keep": [],
            "filter_fqns": [], "layers": [], "terms": None, "terms_all": None}


def gemm_rows(step: StepWork, timed: dict, recipes: list[str]) -> list[dict]:
    """Each GEMM of the step with its bf16 time and, per recipe, its time and speedups."""
    rows = []
    for g in step.gemms:
        base = timed[(g, BASELINE)]
        per = {r: {"ms": timed[(g, r)].seconds * 1e3, "gemm_only_ms": timed[(g, r)].gemm_seconds * 1e3,
                   "speedup": ratio(base.seconds, timed[(g, r)].seconds),
                   "gemm_only_speedup": ratio(base.gemm_seconds, timed[(g, r)].gemm_seconds),
                   "source": timed[(g, r)].source} for r in recipes}
        rows.append({"layer": g.layer, "module": g.module, "pass": g.pass_, "m": g.m, "k": g.k, "n": g.n,
                     "count": g.count, "groups": g.groups, "bf16_ms": base.seconds * 1e3, "recipes": per})
    return rows


def advise(name: str, step: StepWork, parallel: Parallel, device_name: str, recipes=None,
           loss_budget: float | None = None, errors: dict[str, float] | None = None,
           measured: dict | None = None) -> dict:
    """The answer for one model's step (module docstring). `errors`: each recipe's measured loss
    gap (`advice.loss_gaps` of a run's results), None where no results were given. `measured`:
    (gemm, recipe) -> `estimate.Timed` with source "measured", from a run of the same shapes
    (`--from`: `measured.as_timed`, the run's speedup over the model's bf16 time), taking the
    prediction's place."""
    device = device_of(device_name)
    recipes = [r for r in (recipes or default_recipes()) if r != BASELINE]
    if not recipes:
        raise UserError(f"{BASELINE} is the baseline every recipe is compared with: name another recipe to advise on")
    reasons = {r: why_not(r, device) for r in recipes}
    able = [r for r in recipes if reasons[r] is None]
    timed = {**time_all(step, parallel, device, (BASELINE, *able)), **(measured or {})}
    base = step_terms(step, parallel, device, BASELINE, set(), timed)
    answers = [unsupported_answer(r, reasons[r], advice.accuracy(r, errors, loss_budget)[1]) if reasons[r] else
               recipe_answer(step, parallel, device, r, timed, base, advice.accuracy(r, errors, loss_budget))
               for r in recipes]
    return {"model": name, "device": device.label, "gpus": parallel.gpus,
            "parallel": {"gpus": parallel.gpus, "tp": parallel.tp, "ep": parallel.ep, "seq": parallel.seq,
                         "batch": parallel.batch, "ac": parallel.ac},
            "loss_budget": loss_budget, "baseline": {"recipe": BASELINE, "terms": base.as_ms()},
            "recipes": answers, "gemms": gemm_rows(step, timed, able)}


def best(answer: dict) -> dict | None:
    """The recipe with the largest advised step speedup (over 1), or None: stay on bf16."""
    ranked = [r for r in answer["recipes"] if r["step_speedup"] is not None and r["step_speedup"] > 1]
    return max(ranked, key=lambda r: r["step_speedup"]) if ranked else None
