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

from oomdoctor.workload.oom_exceptions import failure_is_oom

log = logging.getLogger("oomdoctor.fit")

BUCKET_BYTES = 25 * 1024 * 1024  # DDP's default bucket_cap_mb


class Agreement:
    """What every rank learnt from one exchange."""

    __slots__ = ("incomplete", "failed", "failed_rank", "failed_oom", "has_grad")

    def __init__(self, incomplete: bool, failed_rank: int | None, has_grad: list[bool], failed_oom: bool = True):
        self.incomplete, self.failed, self.failed_rank = incomplete, failed_rank is not None, failed_rank
        self.failed_oom = failed_oom  # the failure every rank stops for is an OOM (no rank's failure was another error)
        self.has_grad = has_grad


def unwrap(ddp: Any) -> Any:
    """The DDP module inside torch.compile's wrapper, if any."""
    return getattr(ddp, "_orig_mod", ddp)


def refusal(ddp: Any) -> str | None:
    """Why this DDP module cannot be coordinated this way, or None. Each refusal is a DDP feature that issues a
    collective, or restores state, where fit's pieces would skip it or repeat it on one rank."""
    torch = sys.modules["torch"]
    if not isinstance(ddp, torch.nn.parallel.DistributedDataParallel):
        return f"ddp= takes the DistributedDataParallel module (got {type(ddp).__name__})"
    for m in ddp.module.modules():
        if isinstance(m, torch.nn.SyncBatchNorm):
            return ("SyncBatchNorm all-reduces inside forward, so a piece retried on one rank would meet its peers "
                    "out of order; ddp= cannot be used with it")
    if getattr(ddp, "_delay_all_reduce_all_params", False) or getattr(ddp, "_use_python_reducer", False):
        return "this DDP module reduces outside its reducer (delayed all-reduce or the Python reducer); ddp= cannot use it"
    if getattr(ddp, "static_graph", False):
        return "static_graph=True makes DDP reduce in backward even under no_sync; ddp= cannot use it"
    if getattr(ddp, "mixed_precision", None) is not None:
        return ("DDP's mixed_precision restores the full-precision parameters in its communication hook, which ddp= "
                "does not run; use torch.autocast instead")
    return None


class Coordinator:
    """The exchange, the buffers' broadcast and the gradients' average for one DDP module."""

    def __init__(self, ddp: Any):
        torch = sys.modules["torch"]
        ddp = unwrap(ddp)
        why = refusal(ddp)
        if why:
            raise ValueError(f"fit: {why}")
        self.ddp = ddp
        self.dist = torch.distributed
        self.group = getattr(ddp, "process_group", None)
        self.world = self.dist.get_world_size(self.group)
        ignored = set(getattr(ddp, "parameters_to_ignore", ()) or ())  # DDP leaves these to the user: so does fit
        self.params = [p for n, p in ddp.module.named_parameters() if p.requires_grad and n not in ignored]
        if any(p.is_sparse for p in self.params):
            raise ValueError("fit: ddp= averages dense gradients only")
        backend = str(self.dist.get_backend(self.group)).lower()
        # NCCL needs the tensor on this rank's GPU: DDP's own device (set_device may never have been called)
        first = self.params[0].device if self.params else torch.device("cpu")
        self.device = getattr(ddp, "device", None) or first if "nccl" in backend else torch.device("cpu")
        self.rank = self.dist.get_rank(self.group)
        self._status = torch.zeros(2 + len(self.params), dtype=torch.int32, device=self.device)
        self._buckets: dict[tuple[Any, Any], Any] = {}
        if getattr(ddp, "_comm_hooks", None):
            log.warning("oomdoctor.fit: ddp= averages gradients itself; the communication hook registered on this "
                        "DDP module is not used")
        if getattr(ddp, "gradient_as_bucket_view", False):
            log.warning("oomdoctor.fit: with ddp=, gradients are not views of DDP's buckets "
                        "(gradient_as_bucket_view=True): they take their own memory, one more gradient-sized copy")

    # -- at the step's start ------------------------------------------------------------------------------------
    def start_step(self) -> None:
        """DDP broadcasts rank 0's buffers before a synchronised forward: done here, once, outside the pieces."""
        ddp = self.ddp
        if getattr(getattr(ddp, "_join_config", None), "enable", False):
            raise RuntimeError("fit: ddp= cannot run inside DDP's join() context (it all-reduces in every forward, and "
                               "a split rank runs more forwards)")
        # forward_sync_buffers from torch 2.13; broadcast_buffers before it
        sync_buffers = getattr(ddp, "forward_sync_buffers", None)
        if sync_buffers is None:
            sync_buffers = getattr(ddp, "broadcast_buffers", False)
        if sync_buffers and len(getattr(ddp, "modules_buffers", ()) or ()) > 0:
            sync = getattr(ddp, "_sync_buffers", None)
            torch = sys.modules["torch"]
            if sync is not None:
                sync()
            else:  # an older or newer DDP without the method: the plain broadcast
                with torch.no_grad():
                    for b in ddp.module.buffers():
                        self.dist.broadcast(b, 0, group=self.group)
        ddp.require_forward_param_sync = False  # and DDP itself must not repeat it in a piece's forward

    def quiet(self) -> None:
        """Before each attempt: DDP must not broadcast buffers in a piece's forward (a retry would repeat it alone)."""
        self.ddp.require_forward_param_sync = False

    def end_step(self) -> None:
        """After the update DDP would broadcast buffers again at the next forward (an evaluation, say): as it would."""
        self.ddp.require_forward_param_sync = True

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

    def agree(self, incomplete: bool, failure: BaseException | None, has_grad: list[bool] | None) -> Agreement:
        torch = sys.modules["torch"]
        s = self._status
        # slot 1: 1 + the failing rank (the highest one when several fail), so that all know whose words to hear;
        # + world when its error is not an OOM, so that such an error wins: no rank then raises an OOM that a
        # batch-size finder (auto_find_batch_size) would retry while another rank has stopped
        code = 0
        if failure is not None:
            code = self.rank + 1 + (0 if failure_is_oom(failure) else self.world)
        values = [int(incomplete), code] + [int(h) for h in (has_grad or [False] * len(self.params))]
        s.copy_(torch.tensor(values, dtype=torch.int32))
        self.dist.all_reduce(s, op=self.dist.ReduceOp.MAX, group=self.group)
        got = s.tolist()
        code = got[1]
        return Agreement(bool(got[0]), (code - 1) % self.world if code else None, [bool(v) for v in got[2:]],
                         failed_oom=code <= self.world)

    def global_rank(self, rank: int) -> int:
        """A rank of DDP's process group as torchrun numbers it (its RANK, its log file), for messages."""
        if self.group is None:
            return rank
        try:
            return int(self.dist.get_global_rank(self.group, rank))
        except Exception:  # noqa: BLE001 - the default group, or an older torch: the same number
            return rank

    def hear_failure(self, failed_rank: int, own: BaseException | None) -> tuple[bool, str, str]:
        """Every rank, once the exchange said a rank failed: that rank's (was it an OOM, in which phase, its message),
        broadcast from it, so that each rank's own log names the cause (and explain can read it there)."""
        got: list[Any] = [None]
        if self.rank == failed_rank:
            try:  # the failing rank must send something whatever its error is like, or the others wait in vain
                inner = getattr(own, "oom_message", None)
                got = [(failure_is_oom(own), str(getattr(own, "phase", "") or ""),
                        (inner or f"{type(own).__name__}: {own}")[:4000])]
            except Exception:  # noqa: BLE001 - an exception whose text cannot be made
                got = [(False, "", f"{type(own).__name__} (its message could not be read)")]
        self.dist.broadcast_object_list(got, src=self.global_rank(failed_rank), group=self.group, device=self.device)
        return got[0] if isinstance(got[0], tuple) else (False, "", "")

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
                g.copy_(view[at:at + g.numel()].view(g.shape))
                at += g.numel()
            packed, used = [], 0

        for g in grads:
            n = g.numel()
            if n > cap:  # on its own, in place (chosen by size only, so every rank makes the same collectives)
                flush()
                t = _dense_view(g)  # g itself, or a permutation of it (channels_last) that is contiguous
                alone = t if t is not None else g.contiguous()  # otherwise a copy (an unusual layout)
                alone.div_(self.world)
                self.dist.all_reduce(alone, group=self.group)
                if t is None:
                    g.copy_(alone)
                continue
            if used + n > cap:
                flush()
            bucket[used:used + n].view(g.shape).copy_(g)  # any strides (channels_last): no allocation
            packed.append(g)
            used += n
        flush()


def _dense_view(g: Any) -> Any:
    """A contiguous view of the same memory as g (g, or its dims ordered by stride), or None."""
    if g.is_contiguous():
        return g
    order = sorted(range(g.dim()), key=lambda d: (-g.stride(d), d))
    t = g.permute(*order)
    return t if t.is_contiguous() else None
