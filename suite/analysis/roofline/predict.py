"""`python -m suite predict SCENARIO --device h100`: the roofline model's table for a scenario,
without running it (planning a GPU lease): each case's predicted time, throughput, speedup over
its baseline and bound, FP8's split into GEMMs and casts, and where each recipe starts to pay."""

from __future__ import annotations

from suite.analysis.roofline import crossover, model
from suite.core.errors import UserError
from suite.core import peaks
from suite.scenario import plan, registry
from suite.scenario.spec import Scenario


def device(name: str) -> model.Device:
    """A GPU of the peak table by its driver name or a short one ('h100', 'a100-pcie', 'gb200')."""
    found = model.gpu_device(name)
    if found is None:
        known = ", ".join(g.label.lower().replace(" ", "-") for g in peaks.PEAKS)
        raise UserError(f"--device {name!r}: not in the peak table (suite/core/peaks.py); known: {known}")
    return found


def _row(case, dev: model.Device) -> dict:
    pred = model.predict_case(case.workload, case.precision, case.m, case.k, case.n, case.params, dev)
    row = {"case_id": case.case_id, "workload": case.workload, "precision": case.precision,
           "baseline": case.baseline, "m": case.m, "k": case.k, "n": case.n, "params": case.params}
    if isinstance(pred, str):
        return {**row, "note": pred}
    base = model.predict_case(case.workload, case.baseline, case.m, case.k, case.n, case.params, dev) \
        if case.baseline else None
    return {**row, "predicted_ms": pred.seconds * 1e3, "roofline_ms": pred.roofline_s * 1e3,
            "tflops": pred.compute_flops / pred.seconds / 1e12,
            "speedup": base.seconds / pred.seconds if isinstance(base, model.Prediction) else None,
            "bound": pred.bound, "gemm_ms": pred.gemm_s * 1e3,
            "cast_ms": pred.cast_s * 1e3 if registry.PRECISIONS[case.precision].scaling is not None else None,
            "note": ""}


def predict_scenario(scenario: Scenario, device_name: str, only: list[str] | None = None) -> dict:
    """The model's view of a scenario on a device: a row per case and the predicted crossovers."""
    dev = device(device_name)
    plan.check_size(scenario)
    cases = plan.only(plan.expand(scenario), only)
    return {"scenario": scenario.name, "device": {"label": dev.label, "peaks_tflops": dev.peaks,
                                                  "memory_tbs": dev.mem_tbs},
            "cases": [_row(case, dev) for case in cases],
            "crossovers": crossover.scenario_crossovers(cases, dev)}
