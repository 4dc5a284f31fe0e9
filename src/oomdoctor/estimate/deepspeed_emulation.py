"""DeepSpeed ZeRO-2 and ZeRO-3 on rank 0, written as the tensors DeepSpeed makes.

DeepSpeed cannot run under fake tensors on the CPU (it needs a GPU, values and its own communication),
so the tracer gives the step an optimizer object that allocates, frees and streams what DeepSpeed
0.19.8 does under its most common configuration (bf16 enabled, its defaults), as read off DeepSpeed's
own allocator history on an H200 (validation/zero_alloc_trace.py; replaying that history through
estimate/allocator.py gives DeepSpeed's reserved peak to the byte). Measured against DeepSpeed on two
GPUs: docs/validation/estimate.md.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

# torch's UserWarning when a module whose inputs need no gradient (the embedding, fed token ids) has a full
# backward hook: Zero3Emulation's gather hooks, not the user's code (walkthrough, session 27)
_OWN_HOOK_WARNING = r"Full backward hook is firing when gradients are computed with respect to module outputs"


@contextlib.contextmanager
def quiet_own_hooks() -> Iterator[None]:
    """Silence that one warning while a ZeRO-3 emulation traces; the filters are restored after."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_OWN_HOOK_WARNING, category=UserWarning)
        yield

# DeepSpeed ZeRO-2 as it allocates (deepspeed/runtime/zero/stage_1_and_2.py, 0.19.8) under its most
# common configuration: bf16 enabled and DeepSpeed's defaults (contiguous_gradients, no overlap_comm,
# reduce_bucket_size 5e8 elements). Read off DeepSpeed's own allocator history on an H200
# (validation/zero_alloc_trace.py, validation/results/zero_trace_tinyllama-zero2.json.gz).
ZERO_REDUCE_BUCKET = 500_000_000
ZERO_ALIGN = 2  # nccl_start_alignment_factor: the flat buffer is padded to a multiple of 2 x ranks


class Zero2Emulation:
    """The optimizer side of DeepSpeed ZeRO-2 on rank 0, written as the tensors DeepSpeed makes (not
    DeepSpeed's code, which needs a GPU and values). At start: the bf16 parameters moved into one flat
    buffer, this rank's fp32 master partition. In backward: a bf16 reduce bucket (setup_buckets) that
    each gradient is copied into and then freed; when it fills and at the end, its gradients are
    flattened into a new tensor and all-reduced (allreduce_bucket), and this rank's share is copied into
    a bf16 partition buffer (copy_grads_in_partition, whole parameters); the bucket is freed when
    backward ends. At the step: that share flattened again (bf16), cast to fp32, the wrapped optimizer
    (AdamW: fp32 state) run over the master partition, the bf16 partition updated in place. Used as the
    step's optimizer (step() then zero_grad())."""

    def __init__(self, model: Any, ranks: int, make_inner: Any, label: Any = None) -> None:
        import torch

        label = label or (lambda t, category: None)
        params = [p for p in model.parameters() if p.requires_grad]
        if not params:
            raise ValueError("ZeRO-2 needs trainable parameters")
        dtype, dev = params[0].dtype, params[0].device
        total = sum(p.numel() for p in params)
        align = ZERO_ALIGN * ranks
        padded = -(-total // align) * align
        self.part = padded // ranks
        with torch.no_grad():
            flat = torch.empty(padded, dtype=dtype, device=dev)
            self.ranges = []
            off = 0
            for p in params:
                n = p.numel()
                flat[off:off + n].copy_(p.data.view(-1))
                p.data = flat[off:off + n].view_as(p)
                self.ranges.append((p, off, n))
                off += n
            self.flat = flat
            self.master = flat[: self.part].detach().clone().to(torch.float32)
            label(flat, "parameters")
            label(self.master, "optimizer_state")
            torch.zeros(self.part, dtype=torch.float32, device=dev)  # initialize_optimizer_states' grad, freed
        self.master.requires_grad_(True)
        self.inner = make_inner([self.master])
        self.dtype, self.dev, self.label = dtype, dev, label
        # this rank's parameters, whole (copy_grads_in_partition sizes its buffer so)
        self.mine = {id(p): (start, n) for p, o, n in self.ranges if o < self.part
                     for start in [sum(m for q, oo, m in self.ranges if oo < o and oo < self.part)]}
        self.mine_numel = sum(n for _, o, n in self.ranges if o < self.part)
        self.bucket: Any = None
        self.bucket_params: list[tuple[Any, int, int]] = []
        self.bucket_used = 0
        self.grads_in_partition: Any = None
        self.averaged: Any = None
        self.state = self.inner.state
        self.stand_ins: list[Any] = []  # every tensor here is DeepSpeed's own
        self.param_groups = self.inner.param_groups
        for p, o, n in self.ranges:
            p.register_post_accumulate_grad_hook(lambda p, o=o, n=n: self._grad_ready(p, o, n))

    def _grad_ready(self, p: Any, off: int, n: int) -> None:
        import torch

        with torch.no_grad():
            if self.bucket is None:  # setup_buckets, once per backward; the epilogue at its end
                self.bucket = torch.empty(ZERO_REDUCE_BUCKET, dtype=self.dtype, device=self.dev)
                self.label(self.bucket, "gradients")
                torch.autograd.Variable._execution_engine.queue_callback(self._epilogue)
            if self.bucket_used + n > ZERO_REDUCE_BUCKET:
                self._flush()
            if n > ZERO_REDUCE_BUCKET:  # an oversized gradient bypasses the bucket, reduced on its own
                self.bucket_params.append((p, off, n))
                self._flush()
                return
            view = self.bucket[self.bucket_used:self.bucket_used + n]
            view.copy_(p.grad.view(-1))
            p.grad = view.view_as(p)
            self.bucket_params.append((p, off, n))
            self.bucket_used += n

    def _flush(self) -> None:
        """reduce_ipg_grads: flatten the bucket's gradients, all-reduce, keep this rank's share."""
        import torch

        if not self.bucket_params:
            return
        flat = torch.cat([p.grad.view(-1) for p, _, _ in self.bucket_params])  # allreduce_bucket's flatten
        for p, _, _ in self.bucket_params:
            where = self.mine.get(id(p))
            if where is not None:
                if self.grads_in_partition is None:
                    self.grads_in_partition = torch.empty(self.mine_numel, dtype=self.dtype, device=self.dev)
                    self.label(self.grads_in_partition, "gradients")
                start, n = where
                dst = self.grads_in_partition[start:start + n]
                dst.copy_(p.grad.view(-1))
                p.grad = dst.view_as(p)
            else:
                p.grad = None
        del flat
        self.bucket_params, self.bucket_used = [], 0

    def _epilogue(self) -> None:
        import torch

        with torch.no_grad():
            self._flush()
            self.averaged, self.grads_in_partition = self.grads_in_partition, None
            self.bucket = None  # _release_ipg_buffers

    def step(self) -> None:
        import torch

        with torch.no_grad():
            if self.averaged is None:
                self.averaged = torch.zeros(self.mine_numel, dtype=self.dtype, device=self.dev)
            for start, n in self.mine.values():  # get_grad_norm_direct: each gradient's norm in fp32
                torch.linalg.vector_norm(self.averaged[start:start + n].to(torch.float32))
            flat_grad = self.averaged[: self.part].clone()  # step: flatten the averaged gradients
            grad32 = flat_grad.to(torch.float32)
            del flat_grad
            for p, _, _ in self.ranges:  # free_grad_in_param_list: the partition buffer goes
                p.grad = None
            self.averaged = None
            self.master.grad = grad32
            del grad32
            self.inner.step()
            self.master.grad = None
            self.flat[: self.part].copy_(self.master)  # then all-gathered in place

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p, _, _ in self.ranges:
            p.grad = None


ZERO3_PERSISTENCE = 100_000  # stage3_param_persistence_threshold: smaller parameters stay whole
ZERO3_MAX_LIVE = 1_000_000_000  # stage3_max_live_parameters: gathered elements kept before any is released
ZERO3_SUB_GROUP = 1_000_000_000  # sub_group_size: the optimizer steps this many partition elements at a time


class Zero3Emulation:
    """DeepSpeed ZeRO-3 on rank 0 as its allocation history shows it (validation/zero_alloc_trace.py,
    tinyllama-zero3; DeepSpeed 0.19.8, bf16, defaults): every parameter partitioned (a bf16 flat buffer
    of this rank's shards, parameters under 1e5 elements kept whole), an fp32 master partition, a bf16
    gradient partition buffer and a 5e8-element bf16 reduce bucket held from the start; each module's
    parameters gathered whole on a side stream before its forward and kept for its backward while no
    more than stage3_max_live_parameters (1e9) elements are gathered (beyond it the first gathered go),
    released once its gradients are in the bucket;
    each gradient copied into the bucket and freed; a full bucket flattened on a third stream for the
    reduce-scatter; at the step, one sub-group (sub_group_size, 1e9 elements) at a time, the gradient
    partition flattened, cast to fp32 and AdamW run over that part of the master partition. The model's own parameters stay as they are for autograd and are not counted
    (the tracer drops them): only the emulated tensors are."""

    def __init__(self, model: Any, ranks: int, make_inner: Any, label: Any = None) -> None:
        import torch

        label = label or (lambda t, category: None)
        params = list(model.parameters())
        if not any(p.requires_grad for p in params):
            raise ValueError("ZeRO-3 needs trainable parameters")
        self.dtype = dtype = params[0].dtype
        self.dev = dev = params[0].device
        self.ranks = ranks
        self.ag_stream, self.rs_stream = torch.cpu.Stream(), torch.cpu.Stream()
        shard = {id(p): -(-p.numel() // ranks) for p in params}
        self.persistent = {id(p) for p in params if p.numel() < ZERO3_PERSISTENCE}
        part = sum(shard[id(p)] for p in params)
        self.trainable_part = sum(shard[id(p)] for p in params if p.requires_grad)
        # _create_fp16_sub_groups: parameters in order, a group closed once it reaches sub_group_size
        self.groups: list[int] = []
        acc = 0
        for p in params:
            if p.requires_grad:
                acc += shard[id(p)]
                if acc >= ZERO3_SUB_GROUP:
                    self.groups.append(acc)
                    acc = 0
        if acc or not self.groups:
            self.groups.append(acc)
        with torch.no_grad():
            self.part16 = torch.empty(part, dtype=dtype, device=dev)
            self.whole = torch.empty(sum(p.numel() for p in params if id(p) in self.persistent) or 1,
                                     dtype=dtype, device=dev)
            self.masters = [torch.empty(n, dtype=torch.float32, device=dev) for n in self.groups]
            self.grad_part = torch.zeros(self.trainable_part, dtype=dtype, device=dev)
            self.bucket = torch.empty(ZERO_REDUCE_BUCKET, dtype=dtype, device=dev)
        for t, cat in ((self.part16, "parameters"), (self.whole, "parameters"), (self.grad_part, "gradients"),
                       (self.bucket, "gradients"), *((m, "optimizer_state") for m in self.masters)):
            label(t, cat)
        for m in self.masters:
            m.requires_grad_(True)
        self.inner = make_inner(self.masters)
        self.state = self.inner.state
        # autograd runs on the model's whole parameters; DeepSpeed holds shards and gathers: not counted
        self.stand_ins = params
        self.param_groups = self.inner.param_groups
        self.label = label
        self.gathered: dict[int, list[Any]] = {}  # in the order gathered
        self.live_elems = 0
        self.waiting: dict[int, int] = {}  # module -> gradients still to come in this backward
        self.owner: dict[int, Any] = {}
        self.bucket_used = 0
        self.in_backward = False
        for m in model.modules():
            own = [p for p in m._parameters.values() if p is not None]
            if not own:
                continue
            for p in own:
                self.owner[id(p)] = m
                if p.requires_grad:
                    p.register_post_accumulate_grad_hook(self._grad_ready)
            if all(id(p) in self.persistent for p in own):
                continue
            m.register_forward_pre_hook(lambda mod, args: self._gather(mod))
            m.register_full_backward_pre_hook(lambda mod, grad_out: self._gather(mod))

    def _gather(self, m: Any) -> None:
        """Gather a module's parameters; with more than stage3_max_live_parameters elements gathered, the
        ones gathered first are released (DeepSpeed keeps them for their reuse in backward otherwise)."""
        import torch

        if id(m) in self.gathered:
            return
        with torch.no_grad(), torch.cpu.stream(self.ag_stream):
            bufs = [torch.empty(p.numel(), dtype=self.dtype, device=self.dev)
                    for p in m._parameters.values() if p is not None and id(p) not in self.persistent]
        for b in bufs:
            self.label(b, "parameters")
        self.gathered[id(m)] = bufs
        self.live_elems += sum(b.numel() for b in bufs)
        self.waiting[id(m)] = sum(1 for p in m._parameters.values() if p is not None and p.requires_grad)
        while self.live_elems > ZERO3_MAX_LIVE and len(self.gathered) > 1:
            oldest = next(iter(self.gathered))
            if oldest == id(m):
                break
            self._release_id(oldest)

    def _release(self, m: Any) -> None:
        self._release_id(id(m))

    def _release_id(self, key: int) -> None:
        bufs = self.gathered.pop(key, None)
        if bufs:
            self.live_elems -= sum(b.numel() for b in bufs)

    def _grad_ready(self, p: Any) -> None:
        import torch

        if not self.in_backward:
            self.in_backward = True
            torch.autograd.Variable._execution_engine.queue_callback(self._epilogue)
        n = p.numel()
        with torch.no_grad():
            if self.bucket_used + n > ZERO_REDUCE_BUCKET:
                self._flush()
            if n <= ZERO_REDUCE_BUCKET and p.grad is not None:
                self.bucket[self.bucket_used:self.bucket_used + n].copy_(p.grad.reshape(-1))
            p.grad = None
            self.bucket_used += min(n, ZERO_REDUCE_BUCKET)
        m = self.owner.get(id(p))
        if m is not None and id(m) in self.waiting:
            self.waiting[id(m)] -= 1
            if self.waiting[id(m)] <= 0:
                self._release(m)

    def _flush(self) -> None:
        """reduce_scatter_coalesced: the bucket flattened on the reduce stream, this rank's share kept."""
        import torch

        if self.bucket_used:
            with torch.cpu.stream(self.rs_stream):
                flat = torch.empty(self.bucket_used, dtype=self.dtype, device=self.dev)
            del flat
        self.bucket_used = 0

    def _epilogue(self) -> None:
        import torch

        with torch.no_grad():
            self._flush()
        self.gathered.clear()
        self.live_elems = 0
        self.in_backward = False

    def step(self) -> None:
        import torch

        with torch.no_grad():
            off = 0
            for master, n in zip(self.masters, self.groups):  # one sub-group at a time
                flat = self.grad_part[off:off + n].clone()  # _prepare_fp32_grad_for_sub_group
                grad32 = flat.to(torch.float32)
                del flat
                master.grad = grad32
                del grad32
                self.inner.step()  # only this sub-group has a gradient
                master.grad = None
                self.part16[off:off + n].copy_(master)
                off += n

    def zero_grad(self, set_to_none: bool = True) -> None:
        return None
