"""`advise`: from a model to every GEMM of its training step, which layers to convert for each
recipe and the step speedup to expect, predicted by the roofline model and the step terms of
docs/advise.md."""

from __future__ import annotations

import sys

from suite.cli import arguments
from suite.cli.arguments import Command, arg
from suite.cli.output import fits, print_json, say, table


ARGUMENTS = [
    *arguments.QUIET, *arguments.JSON,
    arg("model", help="a preset (gpt2, llama3-8b, llama3-70b, llama3-405b, llama4-scout, deepseek-v3, qwen3-30b-a3b) "
        "or the path of a Hugging Face config.json"),
    arg("--device", required=True, help="a GPU of the peak table: h100, h200, h200-nvl, b200, gb200, b300, a100, l40s "
        "(or a driver name such as 'NVIDIA H100 80GB HBM3')"),
    arg("--gpus", type=arguments.whole, default=1, help="GPUs in the run (FSDP over gpus / tp)"),
    arg("--tp", type=arguments.whole, default=1, help="tensor parallel degree"),
    arg("--ep", type=arguments.whole, default=1, help="expert parallel degree"),
    arg("--seq", type=arguments.whole, default=2048, help="tokens per sequence"),
    arg("--batch", type=arguments.whole, default=1, help="sequences per GPU (a data-parallel rank's micro-batch)"),
    arg("--ac", default="none", metavar="none|full", help="activation checkpointing, torchtitan's modes: full reruns "
        "each transformer block's forward in the backward (its fprop GEMMs, attention, elementwise work and TP/EP "
        "forward collectives once more); default none"),
    # the default is what the folders declare (`answer.default_recipes`), so the help names none
    arg("--recipes", metavar="R,...", help="the recipes to advise on, comma-separated (default: every recipe with a "
        "scaling kind whose casts the roofline model counts, as the precision folders declare them, e.g. torchao's "
        "FP8 and block-scaled recipes and Transformer Engine's); bf16 is the baseline"),
    arg("--loss-budget", type=arguments.nats, metavar="NATS", help="the largest loss gap to its reference (the fp32 "
        "twin) a recipe may show in the suite's measured training steps (needs measured results; without them the advice says it has no "
        "accuracy evidence)"),
    arg("--from", dest="from_results", nargs="+", metavar="RESULTS", help="results files or folders of a run of "
        "the advised scenario (or any run of the same shapes): their measured speedups replace the predicted ones, "
        "marked measured, and their training steps' loss gaps are the accuracy evidence" + arguments.URL_HELP),
    arg("--scenario", metavar="OUT.toml", help="also write the scenario of exactly these GEMMs and layers, for "
        "`python -m suite run OUT.toml` on the GPU to advise for (on a CPU it runs emulated)"),
]


def main(args) -> int:
    from suite.analysis.advise import answer
    from suite.models.step import Parallel

    parallel = Parallel(gpus=args.gpus, tp=args.tp, ep=args.ep, seq=args.seq, batch=args.batch, ac=args.ac)
    recipes = [r.strip() for r in args.recipes.split(",") if r.strip()] if args.recipes else answer.default_recipes()
    step = answer.model_step(args.model, parallel)
    errors, measured = evidence(args.from_results, step, parallel, args.device, recipes, args.quiet)
    result = answer.advise(args.model, step, parallel, args.device, recipes, args.loss_budget, errors=errors,
                           measured=measured)
    if args.scenario:
        write(args, step, parallel, recipes)
    if args.json:
        print_json(result)
        return 0
    show(result)
    return 0


def evidence(sources, step, parallel, device: str, recipes: list[str], quiet: bool = False):
    """(each recipe's measured loss gap, (gemm, recipe) -> measured time) from `--from`'s results;
    (None, None) without them."""
    if not sources:
        return None, None
    from suite.analysis.advise import advice, answer, measured
    from suite.analysis.advise.estimate import time_all
    from suite.cli.output import refuse_no_records
    from suite.results import store

    df = store.read(sources)
    refuse_no_records(df, sources)
    found = measured.measured_speedups(df, step.gemms, recipes)
    gpu = answer.device_of(device)
    predicted = time_all(step, parallel, gpu, (answer.BASELINE, *[r for r in recipes if answer.why_not(r, gpu) is None]))
    timed = measured.as_timed(found, step.gemms, predicted)
    left = found.unmatched[found.unmatched["pass"] != measured.LAYER_PASS]
    if not quiet:
        notes = ", ".join(f"{n} {note}" for note, n in left["note"].value_counts().items())
        print(f"--from: {len(timed)} GEMM x recipe measured, {len(left)} left to the model"
              + (f" ({notes})" if notes else ""), file=sys.stderr)
    return advice.loss_gaps(df), timed


def write(args, step, parallel, recipes: list[str]) -> None:
    """`--scenario OUT.toml`: the scenario of the step's GEMMs and layers, and how to run it."""
    from suite.analysis.advise import scenario

    written = scenario.write_scenario(args.scenario, step, recipes, args.model, parallel, args.device)
    if not args.quiet:
        print(f"wrote {args.scenario} ({len(written.sweep)} sweeps): measure it with `python -m suite run "
              f"{args.scenario}`, then `python -m suite advise {args.model} --device {args.device}"
              f"{layout_flags(parallel)} --from results/{written.name}`", file=sys.stderr)


def layout_flags(parallel) -> str:
    """The layout's flags that differ from their defaults: what `--from` needs to find the same shapes."""
    from dataclasses import fields

    return "".join(f" --{spec.name} {getattr(parallel, spec.name)}" for spec in fields(parallel)
                   if getattr(parallel, spec.name) != spec.default)


def show(result: dict) -> None:
    """The GEMM table, the table of the recipes the GPU runs, the others and why not, and where the
    bf16 step's time goes: tables, not a field per line, in a terminal 100 columns wide whatever
    the model (what they leave out is in --json)."""
    from suite.analysis.advise import answer

    able = [r for r in result["recipes"] if r["unsupported"] is None]
    top = answer.best(result)
    names = layer_names(result)
    gemm_table(result, names, able, top)
    notes = {r["accuracy"] for r in result["recipes"]}
    columns = RECIPE_COLUMNS if len(notes) > 1 else RECIPE_COLUMNS[:-1]  # one note for all: said once, below
    if able:
        table([recipe_cells(r, names) for r in able], columns,
              f"Per recipe: {'best ' + top['recipe'] if top else 'stay on bf16: no recipe is predicted faster'}")
    for r in result["recipes"]:
        if r["unsupported"]:
            say(f"not on this GPU: {r['recipe']} ({r['unsupported']})")
    if len(notes) == 1:
        say(f"accuracy: {notes.pop()}")
    if any_measured(result):
        say(f"{MEASURED_MARK} measured: the run's speedup of that GEMM (--from); the others are predicted")
    say(step_line(result["baseline"]["terms"]))
    if any(name != fqn for fqn, name in names.items()):
        say("layers are named by their part after the last '*.' (torchtitan's --float8.filter_fqns)")
    say("every recipe's speedup per GEMM, the layers' full names and each reason in full: --json "
        "(docs/advise.md, 'Which layers: the advice')")


def gemm_table(result: dict, names: dict[str, str], able: list[dict], top: dict | None) -> None:
    """A GEMM per row: its speedup with every recipe where the terminal is wide enough for them side
    by side, else with the best recipe alone (or the nearest miss, where bf16 stays), and the best
    recipe's decision."""
    recipes = able
    if not fits(gemm_cells(result, names, able, top), gemm_columns(able, top)):
        recipes = [top or max(able, key=lambda r: r["step_speedup"])] if able else []
    with_ = f" with {recipes[0]['recipe']}" if len(recipes) < len(able) else ""
    table(gemm_cells(result, names, recipes, top), gemm_columns(recipes, top),
          f"{result['model']} on {result['gpus']} x {result['device']}: each GEMM's predicted speedup over "
          f"bf16{with_}, casts included (docs/advise.md)")


STEP_TERMS = [("GEMMs", "gemm_ms"), ("attention", "attention_ms"), ("elementwise", "elementwise_ms"),
              ("optimizer", "optimizer_ms"), ("exposed FSDP", "fsdp_exposed_ms"), ("TP", "tp_ms"), ("EP", "ep_ms")]
COMMUNICATION = ("fsdp_exposed_ms", "tp_ms", "ep_ms")


def step_line(terms: dict) -> str:
    """Where the bf16 step's time goes: a step bound by communication barely moves with its GEMMs."""
    step = terms["step_ms"]
    shares = ", ".join(f"{name} {terms[key] / step:.0%}" for name, key in STEP_TERMS if terms[key] > 0)
    line = f"bf16 step: {step:.0f} ms per GPU ({shares})"
    exposed = sum(terms[key] for key in COMMUNICATION) / step
    if exposed > 0.5:
        line += (f"; {exposed:.0%} of it is exposed communication, which no recipe speeds up but an FP8 "
                 "all-gather's: a larger --batch or --seq hides more of FSDP's")
    return line


RECIPE_COLUMNS = [("recipe", "recipe"), ("step", "step speedup"), ("all", "all linears converted"),
                  ("linears", "GEMMs (casts)"), ("linears_alone", "GEMMs alone"), ("convert", "layers converted"),
                  ("keep", "keep in bf16"), ("accuracy", "accuracy")]


def speed(value) -> str:
    return "" if value is None else f"{value:.2f}x"


MEASURED_MARK = "*"  # a GEMM's speedup from `--from`'s run, not the model's


def cell(timed: dict) -> str:
    """A GEMM's speedup under a recipe, marked where a run measured it."""
    return speed(timed["speedup"]) + (MEASURED_MARK if timed["source"] == "measured" else "")


def any_measured(result: dict) -> bool:
    return any(t["source"] == "measured" for g in result["gemms"] for t in g["recipes"].values())


def layer_names(result: dict) -> dict[str, str]:
    """Each layer pattern's name in the tables: its part after the last '*.' ("attention.wq", as
    torchtitan's filter_fqns takes it), or every full name where two would read the same."""
    fqns = list(dict.fromkeys(g["layer"] for g in result["gemms"]))
    short = {fqn: fqn.rpartition("*.")[2] for fqn in fqns}
    return short if len(set(short.values())) == len(short) else {fqn: fqn for fqn in fqns}


def reason_label(reason: str) -> str:
    """A keep reason's first words, what the tables group by ("predicted slower", "output
    projection", "K or N not a multiple of 16"); the whole reason is in --json."""
    head, colon, _ = reason.partition(":")
    return head if colon else reason.partition(" (")[0]


def keep_cell(r: dict, names: dict[str, str] | None = None) -> str:
    """The layers a recipe keeps in bf16, grouped by reason; those kept for their speed with it."""
    speedups = {layer["fqn"]: layer["speedup"] for layer in r["layers"]}
    groups: dict[str, list[str]] = {}
    for kept in r["keep"]:
        label, fqn = reason_label(kept["reason"]), kept["fqn"]
        name = (names or {}).get(fqn, fqn)
        timed = label.endswith("slower") or label == "too small"
        groups.setdefault(label, []).append(f"{name} {speedups[fqn]:.2f}x" if timed else name)
    return "; ".join(f"{label}: {', '.join(layers)}" for label, layers in groups.items())


def gemm_columns(recipes: list[dict], top: dict | None) -> list[tuple[str, str]]:
    """The GEMM table's columns: a speedup per recipe given, and the best recipe's decision."""
    decision = [("decision", f"decision ({top['recipe']})")] if top else []
    return [("layer", "layer"), ("pass", "pass"), ("shape", "MxKxN"), ("count", "count"),
            *[(r["recipe"], r["recipe"]) for r in recipes], *decision]


def gemm_cells(result: dict, names: dict[str, str], recipes: list[dict], top: dict | None) -> list[dict]:
    kept = {k["fqn"]: reason_label(k["reason"]) for k in top["keep"]} if top else {}
    rows = []
    for g in result["gemms"]:
        groups = f" x{g['groups']}" if g["groups"] > 1 else ""
        cells = {"layer": names[g["layer"]], "pass": g["pass"], "shape": f"{g['m']}x{g['k']}x{g['n']}{groups}",
                 "count": str(g["count"]), **{r["recipe"]: cell(g["recipes"][r["recipe"]]) for r in recipes}}
        if top:
            cells["decision"] = f"keep: {kept[g['layer']]}" if g["layer"] in kept else "convert"
        rows.append(cells)
    return rows


def recipe_cells(r: dict, names: dict[str, str] | None = None) -> dict:
    """A recipe's row: its speedups, how many layers it converts and those it keeps, and why."""
    return {"recipe": r["recipe"], "step": speed(r["step_speedup"]), "all": speed(r["step_speedup_all"]),
            "linears": speed(r["gemm_speedup"]), "linears_alone": speed(r["gemm_only_speedup"]),
            "convert": f"{len(r['convert'])} of {len(r['layers'])}", "keep": keep_cell(r, names) or "none",
            "accuracy": r["accuracy"]}


COMMAND = Command("advise", main, "which layers to convert per recipe and the step speedup to expect, for a model on a GPU",
                  ARGUMENTS, description="Every GEMM of one training step per GPU (each linear's fprop, dgrad and wgrad "
                  "after tensor and expert parallel sharding), its predicted speedup per recipe with the casts its "
                  "pass runs and alone; the step's time per recipe (GEMMs, attention, elementwise work, the optimizer, "
                  "exposed communication: docs/advise.md); which layers to convert (torchtitan/torchao fully qualified "
                  "names) and which to keep in bf16, and why. Runs on any machine in seconds. Example: "
                  "python -m suite advise llama3-8b --device h100 --gpus 8 --seq 8192 --batch 2")
