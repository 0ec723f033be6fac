"""The dry run's child process: `python -m suite.measure.dryrun.child SCENARIO [--scenarios DIR] [--only TERMS]`,
started by `launch` with the driver shim preloaded and the pretended GPU in MPSUITE_DRYRUN_GPU.

It patches torch first (`fake.pretend`, before anything imports torchao), then runs each case
(`run_case`) and writes two lines per case to the file descriptor `--out-fd` (a pipe from the
parent): `{"start": case_id, ...}` as it begins, then its `Outcome` as JSON; what a case prints goes
to stdout and stderr, a log. A case that kills the process (native code reading a fake tensor's
data) is the parent's to record; it starts a new child `--after` that case. torch.compile'd code is traced with the
`aot_eager` backend (dynamo and AOTAutograd on fake tensors): inductor's code generation needs a
driver, so such a case is `beyond` even when its trace ran."""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import signal
import sys
import time

from suite.measure.dryrun import FakeGpu, Outcome, error_outcome, skip_outcome

COMPILED = ("traced with the aot_eager backend (dynamo, AOTAutograd and every op's meta function ran); "
            "inductor's code generation (triton kernels) is beyond a fake run")


MSLK = ("mslk (torchao's NVFP4 cast kernel) is not installed here: the casts ran as torchao's registered fake "
        "of its op (ao::mslk_quantize_nvfp4: output shapes and dtypes), mslk's own checks are beyond a fake run")

RANK_ZERO = ("rank 0 of {ranks} ran on a fake process group (FSDP2's sharding and the step's ops checked on fake "
             "tensors); the collectives' communication and the other ranks are beyond a fake run")


class CaseTimeout(Exception):
    pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="suite.measure.dryrun.child")
    ap.add_argument("scenario")
    ap.add_argument("--scenarios")
    ap.add_argument("--only", action="append")
    ap.add_argument("--case-timeout", type=int, default=300)
    ap.add_argument("--out-fd", type=int, default=1)
    ap.add_argument("--after", help="start after this case id (the parent restarts a child that crashed)")
    args = ap.parse_args(argv)
    gpu = FakeGpu.parse(os.environ["MPSUITE_DRYRUN_GPU"])
    from suite.measure.dryrun import fake

    fake.pretend(gpu)  # before torchao is imported: it picks kernels by capability at import
    from suite.scenario import plan, spec

    cases = plan.only(plan.expand(spec.resolve(args.scenario, args.scenarios)), args.only)
    runner = Runner(gpu, args.case_timeout)
    if args.after:
        cases = cases[[c.case_id for c in cases].index(args.after) + 1:]
    with os.fdopen(args.out_fd, "w") as out:
        for case in cases:
            out.write(json.dumps({"start": case.case_id, "workload": case.workload, "precision": case.precision,
                                  "params": case.params, "shape": _shape(case)}) + "\n")
            out.flush()
            out.write(json.dumps(runner.run(case).row()) + "\n")
            out.flush()
    return 0


def _shape(case) -> str | None:
    return f"{case.m}x{case.k}x{case.n}" if case.m is not None else None


class Runner:
    """Runs cases on fake CUDA tensors, each case under a FakeTensorMode of its own."""

    def __init__(self, gpu: FakeGpu, case_timeout: int):
        import torch

        self.gpu, self.timeout = gpu, case_timeout
        self.device = torch.device("cuda")
        self.compiled, self.stood_in = [], []
        _stand_in_corpus()
        _stand_in_mslk(self.stood_in.append)
        _compile_with(self.compiled.append, "aot_eager")
        signal.signal(signal.SIGALRM, _alarm)

    def run(self, case) -> Outcome:
        began = time.perf_counter()
        self.compiled.clear()
        self.stood_in.clear()
        signal.alarm(self.timeout)
        try:
            status, reason = self._run(case)
        except Exception as err:  # noqa: BLE001  (the case's outcome: every error is named whole)
            status, reason = error_outcome(type(err).__name__, str(err), _causes(err))
            reason += _where(err)
        finally:
            signal.alarm(0)
            _clear_caches()
        if status == "ok" and (self.compiled or self.stood_in):
            unseen = [COMPILED] * bool(self.compiled) + [MSLK] * bool(self.stood_in)
            status, reason = "beyond", f"{'; '.join(unseen)}; output {reason}"
        return Outcome(case.case_id, case.workload, case.precision, dict(case.params), status, reason,
                       round(time.perf_counter() - began, 2), _shape(case))

    def _run(self, case) -> tuple[str, str]:
        from torch._subclasses.fake_tensor import FakeTensorMode

        from suite.core.errors import Unsupported
        from suite.scenario import registry

        launched = registry.WORKLOADS[case.workload].launched
        try:
            precision = registry.precision(case.precision).configured(case.params)
            workload = registry.workload(case.workload)
            reason = precision.unsupported(self.device)
            disagree = gate_disagreement(case.precision, reason, self.gpu.capability)
            if disagree:
                return "failed", disagree
            reason = reason or (launched and _launch_reason(workload, case, precision, self.device))
            if reason:
                return skip_outcome(reason)
            with FakeTensorMode(allow_non_fake_inputs=True), precision.active(), _rank_zero(workload, case, launched):
                prepared = workload.prepare(case, precision, self.device)
                out = describe(prepared.fn())  # one call of what would be timed
        except Unsupported as err:
            return skip_outcome(str(err))
        if launched:
            return "beyond", f"{RANK_ZERO.format(ranks=workload.launch_size(case)[0])}; output {out}"
        return "ok", out


def gate_disagreement(precision: str, reason: str | None, device_capability: tuple[int, int]) -> str | None:
    """Where a recipe's own check and the capability table (suite/precisions/gates.py) disagree on
    this GPU, what they say; else None."""
    from suite.precisions import gates

    need, cc = gates.min_cc(precision), "{}.{}".format(*device_capability)
    if gates.below(precision, device_capability) and not reason:
        return (f"the capability table (suite/precisions/gates.py) says {precision} needs compute capability "
                f"{need:.1f}, but its recipe accepts a GPU of {cc}")
    if reason and "compute capability" in reason and not gates.below(precision, device_capability):
        return (f"the recipe skips a GPU of {cc} ({reason}), but the capability table "
                f"(suite/precisions/gates.py) says {precision} needs {need:.1f}")
    return None


def _launch_reason(workload, case, precision, device) -> str | None:
    """The launched workload's own check, on a node of as many of this GPU as the case has ranks."""
    import torch

    count, ranks = torch.cuda.device_count, workload.launch_size(case)[0]
    torch.cuda.device_count = lambda: ranks
    try:
        return workload.launch_unsupported(case, precision, device)
    finally:
        torch.cuda.device_count = count


@contextlib.contextmanager
def _rank_zero(workload, case, launched: bool):
    """For a launched workload: this process as rank 0 of a fake process group (torch's "fake"
    backend: collectives return at once, moving nothing) of the case's ranks."""
    if not launched:
        yield
        return
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=workload.launch_size(case)[0])
    try:
        yield
    finally:
        dist.destroy_process_group()


def describe(out) -> str:
    """An output as dtype and shape ('torch.bfloat16 (4096, 4096)'), a few of a sequence's."""
    import torch

    if isinstance(out, torch.Tensor):
        return f"{out.dtype} {tuple(out.shape)}"
    if isinstance(out, (list, tuple)):
        return ", ".join(describe(o) for o in out[:3]) + (", ..." if len(out) > 3 else "") if out else "()"
    return type(out).__name__


def _where(err: BaseException) -> str:
    """' (at suite/...py:LINE in FUNCTION)': the suite's innermost frame the error passed through."""
    import traceback

    frames = [f for f in traceback.extract_tb(err.__traceback__) if f"{os.sep}suite{os.sep}" in f.filename]
    if not frames:
        return ""
    frame = frames[-1]
    path = frame.filename[frame.filename.rindex(f"{os.sep}suite{os.sep}") + 1:]
    return f" (at {path}:{frame.lineno} in {frame.name})"


def _causes(err: BaseException) -> tuple[str, ...]:
    found, seen = [], {id(err)}
    while (err := err.__cause__ or err.__context__) is not None and id(err) not in seen:
        seen.add(id(err))
        found.append(type(err).__name__)
    return tuple(found)


def _clear_caches() -> None:
    """Empty the suite's cached functions: what a workload caches between cases (its data) is made
    of fake tensors of the case's own FakeTensorMode, which the next case's mode cannot take."""
    for name, module in list(sys.modules.items()):
        if name.startswith("suite."):
            for value in list(vars(module).values()):
                if isinstance(value, functools._lru_cache_wrapper):
                    value.cache_clear()


def _alarm(signum, frame):
    raise CaseTimeout("no answer within the case timeout")


def _compile_with(note, backend: str) -> None:
    """torch.compile with `backend` whatever a case asks for; `note` hears of every compile."""
    import torch

    real = torch.compile

    def compile_(model=None, *args, **kwargs):
        note(kwargs.get("backend", "inductor"))
        kwargs["backend"] = backend
        return real(model, *args, **kwargs) if model is not None else real(*args, **kwargs)

    torch.compile = compile_


class _UniformTokens:
    """The corpus a dry run trains on: uniform random tokens. The suite's corpus (a Markov source
    whose entropy the accuracy check compares against) is built with data-dependent CPU code, and a
    dry run checks no accuracy."""

    def __init__(self, vocab: int):
        self.vocab = vocab

    def sample(self, batch: int, length: int, generator):
        import torch

        return torch.randint(self.vocab, (batch, length), generator=generator)


def _stand_in_corpus() -> None:
    from suite.models import corpus

    corpus.generated = lambda vocab, seed=0: _UniformTokens(vocab)


def _stand_in_mslk(note) -> None:
    """Where mslk is missing, let the NVFP4 recipe ask for its cast kernel anyway: under
    FakeTensorMode torchao's custom op runs its registered fake, which never imports mslk."""
    from suite.precisions.mx import recipes

    if not recipes.mslk_importable():
        recipes.mslk_importable = lambda: note("mslk") or True


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
