"""Recovering an OOM on every rank of a DDP job: the ranks agree once per step, then average gradients by hand.

DDP all-reduces gradients inside backward, so a rank that retries a piece alone answers its peers' collectives out
of order and the job hangs. Here every piece runs under `no_sync()` (no collective inside forward or backward);
after each round of pieces the ranks exchange one small tensor (is any rank still short of its batch? did any hit
its floor? which parameters have a gradient anywhere?); only when every rank is done are the gradients averaged, as
DDP's default hook does (divided by the world size, then summed), and the update taken. A rank that ran out retries
with its own smaller pieces while the others wait in that exchange. The price is DDP's overlap of the all-reduce
with backward. DDP's pre-forward broadcast of buffers (BatchNorm statistics) is done here once at the step's start,
outside the pieces, so that a retried forward cannot repeat it on one rank only.

torch is imported lazily, by the caller's process only.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

log = logging.getLogger("oomdoctor.fit")

BUCKET_BYTES = 25 * 1024 * 1024  # DDP's default bucket_cap_mb


class Agreement:
    """What every rank learnt from one exchange."""

    __slots__ = ("incomplete", "failed", "has_grad")

    def __init__(self, incomplete: bool, failed: bool, has_grad: list[bool]):
        self.incomplete, self.failed, self.has_grad = incomplete, failed, has_grad


def refusal(ddp: Any) -> str | None:
    """Why this DDP module cannot be coordinated this way, or None."""
    torch = sys.modules["torch"]
    if not isinstance(ddp, torch.nn.parallel.DistributedDataParallel):
        return f"ddp= takes the DistributedDataParallel module (got {type(ddp).__name__})"
    for m in ddp.module.modules():
        if isinstance(m, torch.nn.SyncBatchNorm):
            return ("SyncBatchNorm all-reduces inside forward, so a piece retried on one rank would meet its peers "
                    "out of order; ddp= cannot be used with it")
    if getattr(ddp, "_delay_all_reduce_all_params", False) or getattr(ddp, "_use_python_reducer", False):
        return "this DDP module reduces outside its reducer (delayed all-reduce or the Python reducer); ddp= cannot use it"
    return None


class Coordinator:
    """The exchange, the buffers' broadcast and the gradients' average for one DDP module."""

    def __init__(self, ddp: Any):
        torch = sys.modules["torch"]
        why = refusal(ddp)
        if why:
            raise ValueError(f"fit: {why}")
        self.ddp = ddp
        self.dist = torch.distributed
        self.group = getattr(ddp, "process_group", None)
        self.world = self.dist.get_world_size(self.group)
        self.params = [p for p in ddp.module.parameters() if p.requires_grad]
        if any(p.is_sparse for p in self.params):
            raise ValueError("fit: ddp= averages dense gradients only")
        backend = str(self.dist.get_backend(self.group)).lower()
        self.device = (torch.device("cuda", torch.cuda.current_device()) if "nccl" in backend
                       else torch.device("cpu"))
        self._status = None  # the exchange's tensor, made once
        self._buckets: dict[tuple[Any, Any], Any] = {}
        if getattr(ddp, "_comm_hooks", None):
            log.warning("oomdoctor.fit: ddp= averages gradients itself; the communication hook registered on this "
                        "DDP module is not used")

    # -- at the step's start ------------------------------------------------------------------------------------
    def start_step(self) -> None:
        """DDP broadcasts rank 0's buffers before a synchronised forward: done here, once, outside the pieces."""
        ddp = self.ddp
        if getattr(ddp, "forward_sync_buffers", False) and len(getattr(ddp, "modules_buffers", ()) or ()) > 0:
            sync = getattr(ddp, "_sync_buffers", None)
            torch = sys.modules["torch"]
            if sync is not None:
                sync()
            else:  # an older or newer DDP without the method: the plain broadcast
                with torch.no_grad():
                    for b in ddp.module.buffers():
                        self.dist.broadcast(b, 0, group=self.group)
        ddp.require_forward_param_sync = False  # and DDP itself must not repeat it in a piece's forward

    def no_sync(self) -> Any:
        return self.ddp.no_sync()

    # -- after each round of pieces -----------------------------------------------------------------------------
    def complete_grads(self) -> list[bool]:
        """Which parameters have a gradient here; the others get zeros, so every rank reduces the same layout.
        Run inside the caller's OOM guard: it may allocate."""
        torch = sys.modules["torch"]
        had = [p.grad is not None for p in self.params]
        for p, h in zip(self.params, had):
            if not h:
                p.grad = torch.zeros_like(p)
        groups: dict[tuple[Any, Any], list[Any]] = {}
        for p in self.params:
            groups.setdefault((p.grad.dtype, p.grad.device), []).append(p.grad)
        for key, grads in groups.items():  # the buckets too: nothing is allocated once the ranks have agreed
            self._bucket(key, grads)
        return had

    def agree(self, incomplete: bool, failed: bool, has_grad: list[bool] | None) -> Agreement:
        torch = sys.modules["torch"]
        if self._status is None:
            self._status = torch.zeros(2 + len(self.params), dtype=torch.int32, device=self.device)
        s = self._status
        values = [int(incomplete), int(failed)] + [int(h) for h in (has_grad or [False] * len(self.params))]
        s.copy_(torch.tensor(values, dtype=torch.int32))
        self.dist.all_reduce(s, op=self.dist.ReduceOp.MAX, group=self.group)
        got = s.tolist()
        return Agreement(bool(got[0]), bool(got[1]), [bool(v) for v in got[2:]])

    # -- once every rank is done ---------------------------------------------------------------------------------
    def average(self, has_grad: list[bool]) -> None:
        """Gradients averaged over the ranks as DDP's default hook does; those no rank produced become None again."""
        torch = sys.modules["torch"]
        with torch.no_grad():
            groups: dict[tuple[Any, Any], list[Any]] = {}
            for p, h in zip(self.params, has_grad):
                if not h:
                    p.grad = None
                    continue
                groups.setdefault((p.grad.dtype, p.grad.device), []).append(p.grad)
            for key, grads in groups.items():
                self._reduce_group(key, grads)

    def _bucket(self, key: tuple[Any, Any], grads: list[Any]) -> Any:
        torch = sys.modules["torch"]
        b = self._buckets.get(key)
        if b is None:
            dtype, device = key
            size = BUCKET_BYTES // torch.empty((), dtype=dtype).element_size()
            b = self._buckets[key] = torch.empty(min(size, sum(g.numel() for g in grads)), dtype=dtype, device=device)
        return b

    def _reduce_group(self, key: tuple[Any, Any], grads: list[Any]) -> None:
        bucket = self._bucket(key, grads)
        cap, packed, used = bucket.numel(), [], 0

        def flush() -> None:
            nonlocal packed, used
            if not packed:
                return
            view = bucket[:used]
            view.div_(self.world)
            self.dist.all_reduce(view, group=self.group)
            at = 0
            for g in packed:
                g.copy_(view[at:at + g.numel()].view_as(g))
                at += g.numel()
            packed, used = [], 0

        for g in grads:
            n = g.numel()
            if n > cap or not g.is_contiguous():  # on its own, in place
                flush()
                t = g if g.is_contiguous() else g.contiguous()
                t.div_(self.world)
                self.dist.all_reduce(t, group=self.group)
                if t is not g:
                    g.copy_(t)
                continue
            if used + n > cap:
                flush()
            bucket[used:used + n].copy_(g.reshape(-1))
            packed.append(g)
            used += n
        flush()
