"""The dry run's child process pretends to have one GPU: torch.cuda's Python-level queries, CUDA
autocast's availability guard, FakeTensorMode's device initialisation and `nn.Module._apply` for
fake parameters. `pretend` must run before torchao is imported (torchao picks its kernels by the
device's capability at import), so only the dry run's own child process calls it (`child`)."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from torch import nn

from suite.measure.dryrun import FakeGpu

_TORCH_APPLY = nn.Module._apply


def pretend(gpu: FakeGpu) -> None:
    """Patch torch for the rest of this process: torch.cuda answers as `gpu`, and fake tensors on
    "cuda" never reach for a device."""
    _queries(gpu)
    _properties(gpu)
    import torch.cuda.amp.common as amp_common  # autocast's own guard (torch.amp.autocast_mode) reads it
    amp_common.amp_definitely_not_available = lambda: False
    from torch._subclasses.fake_tensor import FakeTensorMode
    # With torch.cuda.is_available() True, FakeTensorMode would initialise the device; keep it off.
    FakeTensorMode.avoid_device_init = property(lambda self: True)
    nn.Module._apply = _apply_fake


def _queries(gpu: FakeGpu) -> None:
    cuda = torch.cuda
    cuda.is_available = lambda: True
    cuda.device_count = lambda: 1
    cuda.current_device = lambda: 0
    cuda.get_device_capability = lambda device=None: gpu.capability
    cuda.get_device_name = lambda device=None: gpu.props.name
    cuda.is_bf16_supported = lambda including_emulation=True: gpu.capability >= (8, 0)
    memory = gpu.props.mem_gb << 30
    cuda.mem_get_info = lambda device=None: (memory, memory)
    cuda.synchronize = lambda device=None: None
    cuda.empty_cache = lambda: None
    cuda.get_rng_state = lambda device="cuda": torch.zeros(16, dtype=torch.uint8)
    cuda.set_rng_state = lambda state, device="cuda": None
    cuda.is_current_stream_capturing = lambda: False
    import torch.cuda.graphs as graphs
    graphs.is_current_stream_capturing = lambda: False


def _properties(gpu: FakeGpu) -> None:
    p, (major, minor) = gpu.props, gpu.capability
    props = SimpleNamespace(name=p.name, major=major, minor=minor, total_memory=p.mem_gb << 30,
                            multi_processor_count=p.sms, L2_cache_size=p.l2_mb << 20, gcnArchName="",
                            warp_size=32, max_threads_per_multi_processor=2048, regs_per_multiprocessor=65536,
                            shared_memory_per_block_optin=232448 if major >= 9 else 166912,
                            clock_rate=1980000, uuid="mpsuite-dry-run")
    torch.cuda.get_device_properties = lambda device=None: props


def _apply_fake(self, fn, recurse=True):
    """`nn.Module._apply` where parameters are fake: new Parameter objects instead of torch's
    swap_tensors (a fake tensor made inside the mode holds a weakref, and swapping it fails); a
    module of real parameters takes torch's own path."""
    from torch._subclasses.fake_tensor import FakeTensor

    if recurse:
        for child in self.children():
            child._apply(fn)
    for key, param in list(self._parameters.items()):
        if param is None:
            continue
        with torch.no_grad():
            new = fn(param)
        if not (isinstance(new, FakeTensor) or isinstance(param, FakeTensor)):
            return _TORCH_APPLY(self, fn, recurse=False)
        self._parameters[key] = nn.Parameter(new, requires_grad=param.requires_grad)
    for key, buf in list(self._buffers.items()):
        if buf is not None:
            self._buffers[key] = fn(buf)
    return self
