"""A bound on the real CPU run that fake tensors make of an op without a meta kernel.

FakeTensorMode runs a torch op that has no meta kernel (MultiMarginLoss's backward,
aten.multi_margin_loss_backward) for real instead: its inputs are made as zero-filled CPU tensors of their
full size (torch/_subclasses/fake_tensor.py, run_fallback_kernel). At batch 1M that run took 8 GB of host
memory and 45 s on 2 CPU cores; a --max-batch search doubles the batch past any size, and the host's OOM
killer then ends the estimate (or the user's job beside it) with no message. Before each such run the bytes
it would make are counted from the fake inputs, and a run over the limit is refused instead: the op is named
as a limit of estimating without a GPU, with the size it would have taken.

The count: the fake inputs made real, plus outputs taken as large as all the inputs together (a backward's
gradient is the size of its input; the op has no meta kernel, so its outputs' sizes are not known before it
runs). The limit is a parameter: the CLI gives `limit_for(available)`, the Python API LIMIT_CAP.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from oomdoctor.errors import InputError
from oomdoctor.facts import FactSet

LIMIT_CAP = 1 << 30  # the most host memory one such run may take, whatever the host has free
AVAILABLE_SHARE = 4  # else a quarter of the memory the host has available, leaving the rest to the user's jobs
LIMIT_FLOOR = 64 << 20  # but this much always: a small op's run (step_errors reruns ops this size too)


def limit_for(available: int | None) -> int:
    """The limit for a host with `available` bytes free for new allocations (None: unknown): a quarter of it,
    between LIMIT_FLOOR and LIMIT_CAP (LIMIT_CAP when unknown)."""
    if available is None:
        return LIMIT_CAP
    return min(LIMIT_CAP, max(LIMIT_FLOOR, available // AVAILABLE_SHARE))


def available_from(facts: FactSet) -> int | None:
    """Bytes this process may still take: the host's MemAvailable, less where its cgroup's limit leaves less
    (limit - usage); None when neither is known."""
    sizes = []
    host = facts.value("host.mem_available_bytes")
    if isinstance(host, int):
        sizes.append(host)
    limit, usage = facts.value("cgroup.memory_limit_bytes"), facts.value("cgroup.memory_usage_bytes")
    if isinstance(limit, int) and isinstance(usage, int):
        sizes.append(max(0, limit - usage))
    return min(sizes) if sizes else None


class OverHostLimit(Exception):
    """Raised in place of the real CPU run of `op`: it would have taken about `needed` bytes, over `limit`."""

    def __init__(self, op: str, needed: int, limit: int):
        super().__init__(f"{op}: its CPU run would take about {needed} bytes, over the limit of {limit}")
        self.op, self.needed, self.limit = op, needed, limit


class FallbackRefused(InputError):
    """The one-line refusal of a traced step whose op's CPU run was over the limit (exit 2); what it holds lets a
    search stop with the largest batch it traced, and say why."""

    def __init__(self, message: str, op: str, needed: int, limit: int, torch_version: str):
        super().__init__(message)
        self.op, self.needed, self.limit, self.torch_version = op, needed, limit, torch_version


def _dense_bytes(t: Any) -> int:
    """What zeros_like(t) makes: numel x itemsize for a strided tensor (a view or an expanded tensor is made
    whole), nothing for a sparse one (zeros_like gives an empty one)."""
    import torch

    if t.layout != torch.strided:
        return 0
    return int(t.numel()) * int(t.element_size())


def run_bytes(fake_mode: Any, flat_args: Sequence[object]) -> int:
    """Host bytes the fallback would make for these arguments: the fake ones made real, plus outputs as large
    as every tensor input together."""
    import torch

    made = kept = 0
    for a in flat_args:
        if isinstance(a, torch.Tensor):
            n = _dense_bytes(a)
            kept += n
            if fake_mode.is_our_fake(a):
                made += n
    return made + kept


@contextlib.contextmanager
def bounded(fake_mode: Any, limit: int) -> Iterator[None]:
    """Within the block, `fake_mode`'s real CPU run of an op without a meta kernel raises OverHostLimit instead of
    running when it would take more than `limit` bytes. Other fake modes run theirs unchanged. With a torch that
    has no run_fallback_kernel to bound, `fake_mode` makes no such run at all (the op is then refused as having
    no meta implementation, whatever its size)."""
    from torch._subclasses import fake_tensor

    inner = getattr(fake_tensor, "run_fallback_kernel", None)
    if inner is None:
        saved = fake_mode.allow_fallback_kernels
        fake_mode.allow_fallback_kernels = False
        try:
            yield
        finally:
            fake_mode.allow_fallback_kernels = saved
        return

    with _LOCK:
        if not _BOUNDS:
            _INNER[:] = [inner]
            fake_tensor.run_fallback_kernel = _guarded
        _BOUNDS[id(fake_mode)] = (fake_mode, limit)
    try:
        yield
    finally:
        with _LOCK:
            _BOUNDS.pop(id(fake_mode), None)
            if not _BOUNDS:
                fake_tensor.run_fallback_kernel = _INNER[0]


# One wrapper for the whole process, installed while any trace is bounded: two traces at once (threads) each
# swapping the torch global in and out would restore in the wrong order and could leave a guard for good.
_LOCK = threading.Lock()
_BOUNDS: dict[int, tuple[Any, int]] = {}  # id(fake mode) -> (the mode, its limit in bytes)
_INNER: list[Any] = []  # torch's own run_fallback_kernel while the wrapper is installed


def _guarded(mode: Any, func: Any, flat_args: Sequence[object], *rest: Any, **kw: Any) -> Any:
    bound = _BOUNDS.get(id(mode))
    if bound is not None and bound[0] is mode:
        needed = run_bytes(mode, flat_args)
        if needed > bound[1]:
            raise OverHostLimit(str(func), needed, bound[1])
    return _INNER[0](mode, func, flat_args, *rest, **kw)
