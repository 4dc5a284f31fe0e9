"""Trace data-parallel training as rank 0 of N: the real DDP / FSDP2 code over a fake process group.

torch's fake backend (`init_process_group("fake")`) makes every collective return at once without
data, so DistributedDataParallel and `fully_shard` run their own code on the CPU under fake tensors:
DDP's gradient buckets, FSDP2's sharded parameters, all-gather and reduce-scatter buffers, unsharded
parameters and gradients, freed and re-allocated exactly where torch does it. FSDP2 allocates its
communication buffers on its own streams (all-gather copy-in, all-gather, reduce-scatter); the
caching allocator keeps a pool per stream, so each allocation is recorded with the stream that was
current (torch.cpu.stream keeps that state on the CPU, one object per stream) and the allocator model
replays them in separate pools.

Left as they are: DDP's start-up checks and broadcast of the initial weights (verification only,
before training; skipped because they read values) and NCCL's own buffers (outside PyTorch's
allocator). DeepSpeed ZeRO cannot run here (it needs a GPU and values): estimate/deepspeed_emulation.py
writes its tensors instead.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Plan:
    strategy: str  # ddp | fsdp | fsdp-hybrid | zero2 | zero3
    ranks: int
    shard_size: int | None = None  # fsdp-hybrid: ranks per shard group
    blocks: tuple[str, ...] = ()  # FSDP2: class names of the modules sharded one by one (default:
    # the model's _no_split_modules, as transformers' and accelerate's FSDP wrapping use)
    rebuild_held: bool = False  # DDP: trace the rank on which the bucket rebuild holds the old buckets (_NoRebuild)

    def mesh_shape(self) -> tuple[int, ...]:
        if self.strategy == "fsdp-hybrid":
            m = self.shard_size or self.ranks
            return (self.ranks // m, m)
        return (self.ranks,)


class StreamIds:
    """Small integer per stream object (0 = the default stream), for the allocator's per-stream pools."""

    def __init__(self) -> None:
        import torch

        self._cpu = torch.cpu
        self._ids: dict[int, int] = {id(torch.cpu.current_stream()): 0}
        self._keep: list[Any] = []  # stream objects stay alive so their ids are not reused

    def __call__(self) -> int:
        s = self._cpu.current_stream()
        sid = self._ids.get(id(s))
        if sid is None:
            sid = self._ids[id(s)] = len(self._ids)
            self._keep.append(s)
        return sid


@contextlib.contextmanager
def fake_world(plan: Plan) -> Iterator[Any]:
    """A fake process group of plan.ranks ranks, this process rank 0; yields the device mesh."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        from oomdoctor.errors import UsageError

        raise UsageError("--parallel traces over a fake process group of its own: run it in a process that "
                         "has not initialised torch.distributed")
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=plan.ranks)
    try:
        shape = plan.mesh_shape()
        names = ("replicate", "shard") if len(shape) == 2 else ("shard",)
        yield init_device_mesh("cpu", shape, mesh_dim_names=names)
    finally:
        dist.destroy_process_group()


def _ddp_hook(state, bucket):  # type: ignore[no-untyped-def]  # DDP checks the annotations: none
    """DDP's built-in allreduce hook (in place: divide, all-reduce) with a future the fake group fills."""
    import torch

    buf = bucket.buffer()
    buf.div_(state)
    fut: Any = torch.futures.Future()
    fut.set_result(buf)
    return fut


class _NoRebuild:
    """DDP's reducer, except that its buckets are not rebuilt before the second forward: the rebuild
    broadcasts bucket indices (values fake tensors do not have). The rebuilt buckets hold the same
    gradients in the order they became ready. On 4 H200s some ranks, different from run to run, held one
    bucket set more through the second step (the old buckets' release races the rebuild;
    docs/validation/estimate.md): with `held`, that rank is traced, a second set of buckets (DDP's sizes: 1 MiB
    first, then 25 MiB, in reverse parameter order) made at the second forward and kept until the third."""

    FIRST_BUCKET = 1 << 20
    BUCKET = 25 << 20

    def __init__(self, reducer: Any, params: list[Any] | None = None) -> None:
        self._reducer = reducer
        self._params = params
        self._calls = 0
        self._held: list[Any] | None = None

    def _rebuild_buckets(self) -> bool:
        # DDP calls this at every forward under grad mode; the --model recipes run one forward per step, so the
        # second call is the second step's (a workload with several forwards per step would move it earlier)
        self._calls += 1
        if self._params is not None and self._calls == 2:
            self._held = self._buckets()
        elif self._calls == 3:
            self._held = None
        return False

    def _buckets(self) -> list[Any]:
        import torch

        out: list[Any] = []
        open_: dict[tuple[Any, Any], list[int]] = {}  # one running bucket per (dtype, device), as DDP keeps: [size, cap]
        for p in reversed(self._params or []):
            key = (p.dtype, p.device)
            b = open_.setdefault(key, [0, self.FIRST_BUCKET])
            b[0] += p.numel()
            if b[0] * p.element_size() >= b[1]:
                out.append(torch.empty(b[0], dtype=p.dtype, device=p.device))
                b[0], b[1] = 0, self.BUCKET
        out += [torch.empty(n, dtype=k[0], device=k[1]) for k, (n, _) in open_.items() if n]
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reducer, name)


@contextlib.contextmanager
def _ddp_without_value_checks() -> Iterator[None]:
    import torch.nn.parallel.distributed as ddp_mod

    saved = ddp_mod._verify_param_shape_across_processes, ddp_mod._sync_module_states
    ddp_mod._verify_param_shape_across_processes = lambda *a, **k: None
    ddp_mod._sync_module_states = lambda *a, **k: None
    try:
        yield
    finally:
        ddp_mod._verify_param_shape_across_processes, ddp_mod._sync_module_states = saved


def wrap(model: Any, plan: Plan, mesh: Any) -> Any:
    """DDP with PyTorch's defaults, or fully_shard on every block, then the root (ZeRO-2: the model
    as it is; the optimizer is Zero2Emulation, made by the tracer)."""
    if plan.strategy in ("zero2", "zero3"):
        return model
    if plan.strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        with _ddp_without_value_checks():
            wrapped = DDP(model)
        wrapped.register_comm_hook(plan.ranks, _ddp_hook)
        params = [p for p in model.parameters() if p.requires_grad] if plan.rebuild_held else None
        wrapped.reducer = _NoRebuild(wrapped.reducer, params)
        return wrapped
    from torch.distributed.fsdp import fully_shard

    names = set(plan.blocks or getattr(model, "_no_split_modules", None) or ())
    for m in list(model.modules()):
        if m is not model and type(m).__name__ in names:
            fully_shard(m, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model
