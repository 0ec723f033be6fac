"""Which GEMM implementation a case ran: its record's `kernels` (every distinct name, in first-use
order), `kernel` (one short line of them) and `kernel_note` (why there are none, or what they cannot
tell). `suite.measure.attribution` makes the one untimed look at a case's calls that feeds this.

On a GPU the names are the CUDA kernels torch.profiler saw (`gpu_names`): cuBLAS/cuBLASLt
(`nvjet_*`, `sm90_xmma_gemm_*`, `splitKreduce`), CUTLASS, torch's own `_scaled_mm` kernels,
inductor's GEMM templates (`triton_tem_*`), or any kernel a GEMM op launched. On a CPU the profiler
names only `aten::mm`, whichever library ran it, so the names come from oneDNN's and MKL's own
verbose output, switched on at run time around the call and read back from fd 1 (`cpu_verbose`):
`onednn:brg_matmul:avx10_1_512_amx` (oneDNN's primitive and the ISA it was built for), `mkl:sgemm`,
or `aten` where neither library ran a GEMM (torch's own kernel: bf16 on a CPU without AVX512-BF16 or
AMX, or with `ONEDNN_MAX_CPU_ISA=AVX2`; `ATEN_CPU_CAPABILITY` alone changes no GEMM's library).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from typing import Iterable, Iterator

# CUDA kernels of a GEMM library, by name: cuBLAS (sm90_xmma_gemm_*, gemmSN_*, gemv kernels for
# M=1), cuBLASLt (nvjet_*, and splitKreduce_kernel: the second half of a split-K GEMM), CUTLASS
# (cutlass::*), torch's _scaled_mm rowwise kernel (f8f8bf16_rowwise), inductor's GEMM templates
# (triton_tem_*; its triton_poi_/triton_red_ epilogues are not GEMMs). Kernel names as profiled on
# H100/H200/B200 in pytorch/pytorch#161134 and #181718 and in torchao's float8 benchmarks.
GPU_GEMM = re.compile(r"gemm|gemv|nvjet|cutlass|xmma|f8f8bf16|splitKreduce|^triton_tem_", re.IGNORECASE)
# torch ops that are a GEMM: on a CPU their self time is the library call's; on a GPU a kernel they
# launched is a GEMM kernel whatever its name.
GEMM_OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_scaled_mm",
                      "aten::mkldnn_matmul", "aten::_addmm_activation", "aten::_scaled_grouped_mm"})
# oneDNN primitive kinds that are a GEMM (reorders, eltwise, ... are not).
ONEDNN_GEMM_KINDS = frozenset({"matmul", "inner_product", "convolution", "deconvolution"})
# MKL_VERBOSE SGEMM(N,N,256,...) 5.57ms ...: a BLAS call; the "MKL_VERBOSE oneMKL 2024.0 ..." header is not.
MKL_CALL = re.compile(r"^MKL_VERBOSE (\w*GEM[MV]\w*)\(")
ATEN = "aten"
# How many characters of `kernel` a record keeps (a layer step of three different GEMMs stays whole).
SUMMARY_CHARS = 300


def onednn_name(line: str) -> str | None:
    """`onednn:<implementation>` of a oneDNN verbose line that executed a GEMM primitive, else None.
    The three fields after "exec" (engine, kind, implementation) are the same in every layout:
    3.4+ `onednn_verbose,v1,primitive,exec,cpu,matmul,brg_matmul:avx10_1_512_amx,...`, 3.0-3.3
    `onednn_verbose,exec,cpu,matmul,brg:avx512_core_amx,...`, 2.x `dnnl_verbose,exec,...`."""
    if not line.startswith(("onednn_verbose,", "dnnl_verbose,")):
        return None
    fields = line.split(",")
    if "exec" not in fields:
        return None  # info, header and creation lines
    i = fields.index("exec")
    if len(fields) <= i + 3 or fields[i + 2] not in ONEDNN_GEMM_KINDS:
        return None
    return f"onednn:{fields[i + 3]}"


def cpu_names(text: str) -> list[str]:
    """The distinct GEMM implementations in oneDNN's and MKL's verbose output, in first-use order."""
    names: list[str] = []
    for line in text.splitlines():
        name = onednn_name(line)
        if name is None and (call := MKL_CALL.match(line)):
            name = f"mkl:{call.group(1).lower()}"
        if name is not None and name not in names:
            names.append(name)
    return names


def is_verbose(line: str) -> bool:
    return line.startswith(("onednn_verbose,", "dnnl_verbose,", "MKL_VERBOSE "))


@dataclass
class Found:
    """What a look at a case's calls found: the kernel names, or why there are none."""

    names: list[str] | None = None
    note: str | None = None

    def columns(self) -> dict:
        """The record's `kernels`, `kernel` and `kernel_note`."""
        return {"kernels": self.names, "kernel": summary(self.names), "kernel_note": self.note}


def _flush_c_stdout() -> None:
    try:
        ctypes.CDLL(None).fflush(None)  # C stdio buffers: both libraries print through printf
    except (OSError, AttributeError, TypeError):  # no C library to call here
        pass


@contextlib.contextmanager
def _fd1_into(sink: list[str]) -> Iterator[None]:
    """What the process writes to fd 1 inside the block goes to a temporary file, read into `sink`
    after; fd 1 is restored whatever happens."""
    sys.stdout.flush()
    _flush_c_stdout()
    saved = os.dup(1)
    try:
        with tempfile.TemporaryFile() as tmp:
            os.dup2(tmp.fileno(), 1)
            try:
                yield
            finally:
                sys.stdout.flush()
                _flush_c_stdout()
                os.dup2(saved, 1)
                tmp.seek(0)
                sink.append(tmp.read().decode("utf-8", "replace"))
    finally:
        os.close(saved)


def _set_verbose(level: int) -> tuple[bool, bool]:
    """oneDNN's and MKL's verbose mode on (1) or off (0); whether each library took it."""
    import torch

    verbose = getattr(torch._C, "_verbose", None)
    if verbose is None:
        return False, False
    onednn = bool(torch.backends.mkldnn.is_available() and verbose.mkldnn_set_verbose(level))
    return onednn, bool(verbose.mkl_set_verbose(level))


@contextlib.contextmanager
def cpu_verbose() -> Iterator[Found]:
    """Runs the block with oneDNN's and MKL's verbose output on and captured; the yielded `Found`
    holds the GEMM implementations seen once the block ends. Lines that are not verbose output
    (something else the process printed meanwhile) go on to the real stdout."""
    found, sink = Found(), []
    try:
        with _fd1_into(sink):
            onednn, mkl = _set_verbose(1)
            try:
                yield found
            finally:
                _set_verbose(0)
    finally:
        captured = "".join(sink)
        other = [line for line in captured.splitlines(keepends=True) if not is_verbose(line)]
        if other:
            sys.stdout.write("".join(other))
            sys.stdout.flush()
    found.names, found.note = _cpu_verdict(cpu_names(captured), onednn, mkl)


def _cpu_verdict(names: list[str], onednn: bool, mkl: bool) -> tuple[list[str] | None, str | None]:
    """(the names, a note) from what the libraries printed and which of them could print at all."""
    if names:
        return names, None
    if onednn and mkl:
        return [ATEN], None  # neither library ran a GEMM: torch's own kernel did
    if not onednn and not mkl:
        return None, "this torch build has neither oneDNN nor MKL verbose output: the CPU kernel is unknown"
    missing = "MKL" if onednn else "oneDNN"
    return None, f"no GEMM seen and this torch build has no {missing} verbose output: aten or an unnamed BLAS ran it"


def _version(text: str | None) -> tuple[int, ...]:
    """'2.6.0+cu124' -> (2, 6, 0); '12.4' -> (12, 4)."""
    return tuple(int(x) for x in re.findall(r"\d+", (text or "").split("+")[0])[:3])


def profiler_lingers(torch_version: str, cuda_version: str | None, environ: dict, inductor_graphs: bool) -> str | None:
    """Why a CUDA profile here would slow the cases after it in the same process, or None. Where
    torch.profiler does not tear CUPTI down after a CUDA profile (TEARDOWN_CUPTI=0), kernel launches
    stay 10-20% slower for the rest of the process (pytorch/pytorch#144455): torch before 2.7 always
    left it attached (the fix, pytorch/pytorch#146604, tears it down); later torch still does where
    inductor's CUDA graphs are on and CUDA is older than 12.6, whose CUPTI crashed on re-init after a
    teardown with CUDA graphs (the suite captures graphs itself for timing_mode cuda_graph)."""
    if _version(torch_version) < (2, 7):
        return f"torch {torch_version} leaves CUPTI attached after a CUDA profile (pytorch/pytorch#144455)"
    if cuda_version and _version(cuda_version) < (12, 6):
        return f"CUDA {cuda_version}: CUPTI re-init after its teardown crashes with CUDA graphs before 12.6"
    if environ.get("TEARDOWN_CUPTI") == "0" or inductor_graphs:
        return "CUPTI stays attached after a profile here (TEARDOWN_CUPTI=0, or inductor's CUDA graphs)"
    return None


def is_gpu_kernel(event) -> bool:
    """A profiler event that is a CUDA kernel (not the host op or runtime call that launched it)."""
    kind = getattr(event, "device_type", None)
    return kind is not None and str(kind).endswith("CUDA")


def gpu_names(events: Iterable) -> list[str]:
    """The distinct GEMM kernels among torch.profiler's events (`prof.events()`), in launch order:
    a CUDA kernel whose name is a GEMM library's (`GPU_GEMM`), or one launched inside a GEMM op
    (`GEMM_OPS`: a kernel family the pattern does not know yet)."""
    events = list(events)
    by_op: set[str] = set()
    for event in events:
        kernels = getattr(event, "kernels", None) or ()
        parent = event
        while parent is not None and getattr(parent, "name", None) not in GEMM_OPS:
            parent = getattr(parent, "cpu_parent", None)
        if parent is not None:
            by_op.update(k.name for k in kernels)
    names: list[str] = []
    for event in events:
        if not is_gpu_kernel(event):
            continue
        name = event.name
        if (GPU_GEMM.search(name) or name in by_op) and name not in names:
            names.append(name)
    return names


def _argument_list_start(name: str) -> int:
    """Where a demangled name's argument list starts: the first "(" outside template brackets."""
    depth = 0
    for i, ch in enumerate(name):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            return i
    return len(name)


def short(name: str) -> str:
    """A kernel's name for the summary: a CPU name, a C name (`nvjet_tst_...`) and a template of one
    identifier (`cutlass::Kernel2<cutlass_80_tensorop_...>`) whole; a longer template as its head
    and a hash of the whole name (`cutlass::device_kernel<...>#6155ac58`), so two instantiations
    still read differently."""
    if name.startswith(("onednn:", "mkl:")) or name == ATEN:
        return name
    name = name.removeprefix("void ")
    name = name[:_argument_list_start(name)].strip()
    head, bracket, rest = name.partition("<")
    if not bracket or re.fullmatch(r"[\w:]+>", rest):
        return f"cuda:{name}"
    return f"cuda:{head}<...>#{hashlib.sha1(name.encode()).hexdigest()[:8]}"


def summary(names: list[str] | None) -> str | None:
    """The record's `kernel`: the short names joined by "+" (None where nothing was found)."""
    if not names:
        return None
    text = "+".join(dict.fromkeys(short(n) for n in names))
    return text if len(text) <= SUMMARY_CHARS else text[:SUMMARY_CHARS - 3] + "..."
