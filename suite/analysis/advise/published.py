"""The step estimate's terms and the estimate against published measurements: the tables of
docs/advise.md, which `python -m suite.analysis.advise.published < docs/advise.md` writes back
regenerated between its markers (a test fails when the page differs).

Published measurements are the precision folders' (`suite/precisions/te/anchors.py`: Transformer
Engine's GEMM profiling guide, per-layer GEMM times; `suite/precisions/fp8/anchors.py`: torchtitan's
Llama 3.1 70B tokens/s). The per-layer GEMM times are the roofline model's own anchors
(`suite.analysis.roofline.published`, where the TE folder's rows come from); the tokens/s are the
step estimate's (`estimate.step_terms` over the model's step, `answer.model_step`).
"""

from __future__ import annotations

from dataclasses import replace

from suite.analysis.advise import answer, estimate
from suite.analysis.roofline import model, published as roofline
from suite.models.step import Parallel
from suite.precisions.fp8 import anchors as fp8
from suite.precisions.te.anchors import TE_GUIDE


def torchtitan_device() -> model.Device:
    """The benchmark's H100s: the peak table's H100 SXM with the 2.4 TB/s of their HBM2e."""
    return replace(model.gpu_device("h100"), label="H100 SXM", mem_tbs=fp8.TORCHTITAN_MEMORY_TBS)


def torchtitan_tokens_per_s() -> dict[str, float]:
    """Predicted tokens/s per GPU of the torchtitan 70B run per recipe, every linear but the output
    converted (torchtitan's float8 converter skips `output`)."""
    name, gpus, tp, seq, batch, ac = fp8.TORCHTITAN_70B_RUN
    parallel = Parallel(gpus=gpus, tp=tp, seq=seq, batch=batch, ac=ac)
    step, device = answer.model_step(name, parallel), torchtitan_device()
    timed = estimate.time_all(step, parallel, device, tuple(fp8.TORCHTITAN_70B))
    linears = {g.layer for g in step.gemms if g.module != "output"}
    tokens = batch * seq / tp  # a tensor-parallel group shares its ranks' batch
    return {recipe: tokens / estimate.step_terms(step, parallel, device, recipe, linears, timed).step_s
            for recipe in fp8.TORCHTITAN_70B}


def comparisons() -> list[tuple[str, str, str, float, str, float]]:
    """(source, device, case, published, unit, predicted) per published measurement."""
    rows = [(pub.source, pub.device, pub.what, pub.measured, pub.unit, predicted)
            for pub, predicted in roofline.comparisons() if pub.source == TE_GUIDE]
    name, gpus, tp, seq, batch, ac = fp8.TORCHTITAN_70B_RUN
    run = f"Llama 3.1 70B, {gpus} GPUs, TP {tp}, FSDP {gpus // tp}, {batch} x {seq} tokens, {ac} AC"
    predicted = torchtitan_tokens_per_s()
    rows.append((fp8.TORCHTITAN, "H100 (2.4 TB/s)", f"{run}: bf16 tokens/s per GPU", fp8.TORCHTITAN_70B["bf16"],
                 "tokens/s", predicted["bf16"]))
    for recipe in [r for r in fp8.TORCHTITAN_70B if r != estimate.BASELINE]:
        rows.append((fp8.TORCHTITAN, "H100 (2.4 TB/s)", f"{run}: {recipe} step speedup over bf16",
                     fp8.TORCHTITAN_70B[recipe] / fp8.TORCHTITAN_70B["bf16"], "x", predicted[recipe] / predicted["bf16"]))
    return rows


def comparison_markdown() -> str:
    lines = ["| source | device | case | published | predicted | error |", "|---|---|---|---|---|---|"]
    for source, device, what, measured, unit, predicted in comparisons():
        fmt, shown = (".2f", "x") if unit == "x" else (".1f", f" {unit}")
        lines.append(f"| {source} | {device} | {what} | {measured:{fmt}}{shown} | {predicted:{fmt}}{shown} | "
                     f"{predicted / measured - 1:+.1%} |")
    return "\n".join(lines) + "\n"


def terms_markdown() -> str:
    lines = ["| term | how it is counted | source or assumption |", "|---|---|---|"]
    lines += [f"| {term} | {how} | {source} |" for term, how, source in estimate.TERMS]
    return "\n".join(lines) + "\n"


MARKERS = {"advise": terms_markdown, "advise-anchors": comparison_markdown}


def page(text: str) -> str:
    """docs/advise.md's text with each generated table between its markers regenerated."""
    for marker, table in MARKERS.items():
        begin, end = f"<!-- {marker}:begin -->\n", f"<!-- {marker}:end -->"
        head, _, rest = text.partition(begin)
        _, _, tail = rest.partition(end)
        text = f"{head}{begin}{table()}{end}{tail}"
    return text


if __name__ == "__main__":
    import sys

    # python -m suite.analysis.advise.published < docs/advise.md > new.md: the page regenerated
    sys.stdout.write(page(sys.stdin.read()))
