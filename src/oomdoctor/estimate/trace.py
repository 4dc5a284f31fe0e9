"""Trace every device allocation of three training steps without a GPU, under fake tensors.

The workload is built and run under FakeTensorMode (shapes, dtypes and aliasing, no data) on the CPU
device, with CUDA's behaviour put back where it differs from the CPU's and changes memory:
- autocast's fp32 op list, fused dropout and fused attention kernels (estimate/cuda_semantics.py);
- optimizers: foreach implementation, PyTorch's default on CUDA;
- cuBLAS/cuBLASLt workspaces taken from the caching allocator at the first GEMM of each thread
  (knowledge.workspaces, measured), and the transient blocks of single ops: cuDNN's NCHW transform
  workspace per conv call and the CUDA reduction's staging buffer (runtime.workspace_ops).
A TorchDispatchMode on top records each new storage (with its size) when an op creates it and its death
through a weakref finalizer on the storage, so autograd's saved tensors, the autocast cast cache and
checkpointing free exactly when PyTorch frees them. Factory ops without an explicit device and the
tensors derived only from them stay off the device (e.g. Adam's CPU `step` counters).
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable
from typing import Any

from oomdoctor.errors import InputError
from oomdoctor.estimate import host_fallback, periodic, step_errors
from oomdoctor.estimate.cuda_semantics import cuda_semantics
from oomdoctor.estimate.fake_module import fake_safe_apply
from oomdoctor.estimate.memtrace import OPTIMIZER_TEMPORARIES, MemTrace
from oomdoctor.estimate.workspace_ops import conv_workspace_sizes, reduce_staging_sizes
from oomdoctor.estimate.workspaces import Workspaces
from oomdoctor.workload.load import WorkloadSpec

DECODE_TRACED = 6  # generate(): decode steps traced before the rest are written out (3 must agree)
# Write out repeated steps and decode steps instead of tracing them (estimate/periodic.py); False traces
# everything (validation/estimate_shortcut_check.py compares the two).
SHORTCUTS = True


def _one_line(exc: BaseException, limit: int = 300) -> str:
    """Errors from torch can span pages; the CLI contract is one line."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    text = lines[0] if lines else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


class OpNotTraceable(Exception):
    """`limit`: why tracing without a GPU cannot run the op, where that is known: "no_meta" (no meta kernel or fake
    implementation) or "sized_by_values" (its output's size depends on its inputs' values)."""

    def __init__(self, op: str, exc: BaseException, limit: str | None = None):
        super().__init__(f"{op}: {type(exc).__name__}: {_one_line(exc)}")
        self.op, self.exc, self.limit = op, exc, limit


class OpRejected(OpNotTraceable):
    """The op rejects its inputs outside fake tensors too (a shape or dtype mismatch): the workload's error.
    `exc` is the error as a real run raises it, where it could be run for real (estimate/step_errors.py)."""


def _classified(func: Any, args: tuple, kwargs: dict, exc: BaseException) -> OpNotTraceable:
    """An op that raised under fake tensors: OpRejected when it rejects the same inputs outside them."""
    try:
        if step_errors.sized_by_values(exc):
            return OpNotTraceable(str(func), exc, "sized_by_values")
        if step_errors.no_fake_impl(exc):
            return OpNotTraceable(str(func), exc, "no_meta")
        if step_errors.fake_tensor_limit(exc):
            return OpNotTraceable(str(func), exc)
        real = step_errors.outside_fake(func, args, kwargs)
    except step_errors.NoMetaKernel:
        # fake tensors ran the op for real on the CPU: that run's own failure (host memory for a big op) is a limit;
        # any other error is the CPU kernel's check of the inputs, worded as a real run words it
        return OpNotTraceable(str(func), exc, "no_meta") if step_errors.cpu_run_failure(exc) else \
            OpRejected(str(func), exc)
    except RuntimeError:  # no stand-ins could be made: an op's own check (not a fake tensor "cannot")
        return OpRejected(str(func), exc)
    except Exception:  # noqa: BLE001 - the second run is a courtesy: the op's first error stands
        return OpNotTraceable(str(func), exc)
    return OpNotTraceable(str(func), exc) if real is None else OpRejected(str(func), real)


def _mixed_dtypes(func: Any, args: tuple, kwargs: dict, tensors: list) -> OpRejected:
    """A matrix product of different dtypes, which the meta kernels let through (a float64 batch into a float32
    Linear traced as float64) and CUDA and the CPU refuse: the error of a real run, on 1x1 stand-ins."""
    try:
        real = step_errors.rerun(func, args, kwargs, "cpu", shrink=True)
    except RuntimeError:
        real = None
    if real is None:
        names = " and ".join(sorted({str(t.dtype).replace("torch.", "") for t in tensors}))
        real = RuntimeError(f"its inputs have different dtypes ({names}); a real run refuses them")
    return OpRejected(str(func), real)


def _op_name(op: str) -> str:
    """aten.addmm.default -> aten.addmm: what a user can look up."""
    return op[: -len(".default")] if op.endswith(".default") else op


def _users_error(exc: BaseException, source: str) -> bool:
    """Whether an error raised outside any op is the workload's: raised in the workload file, or a Python
    check (ValueError, TypeError, IndexError...) in the code it calls; not one raised in oomdoctor's own
    code, nor a RuntimeError (what fake tensors raise when Python asks a value of them)."""
    import os

    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return False
    where = os.path.realpath(tb.tb_frame.f_code.co_filename)
    if not source.startswith("<") and where == os.path.realpath(source):
        return True
    ours = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    return not where.startswith(ours + os.sep) and not isinstance(exc, RuntimeError)


def _local_storage(t: Any) -> Any:
    """A tensor's storage on this rank (a DTensor's local shard), or None for tensors without one."""
    try:
        return getattr(t, "_local_tensor", t).untyped_storage()
    except Exception:  # noqa: BLE001 - sparse or wrapper tensors without storage
        return None


def _modes(trace: MemTrace, workspaces: Workspaces, amp: bool, labeler: Callable[[Any], str | None] | None = None,
           stream: Callable[[], int] | None = None):
    """Build the dispatch recorder and the CUDA-semantics function mode (torch imported lazily).
    `stream()` names the stream each allocation is made on (FSDP2's communication streams), else 0."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    aten = torch.ops.aten
    gemm = {aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default,
            aten._addmm_activation.default, aten.addmv.default, aten.mv.default}
    conv = {aten.convolution.default, aten.convolution_backward.default}
    reductions = {aten.sum.dim_IntList, aten.sum.default, aten.mean.dim, aten.mean.default}
    uniform = {aten.rand.default, aten.rand.generator, aten.rand_like.default}
    is_mutable: dict[Any, bool] = {}
    Tensor = torch.Tensor

    _storage = _local_storage

    def _tensors(args: Any, kwargs: dict) -> list:
        """The tensors among an op's arguments (aten arguments nest at most a list deep; anything
        else goes through pytree)."""
        out = []
        for group in (args, kwargs.values()):
            for a in group:
                if isinstance(a, Tensor):
                    out.append(a)
                elif type(a) in (list, tuple):
                    for x in a:
                        if isinstance(x, Tensor):
                            out.append(x)
                        elif isinstance(x, (list, tuple, dict)):
                            return [x for x in tree_flatten((args, kwargs))[0] if isinstance(x, Tensor)]
                elif isinstance(a, dict):
                    return [x for x in tree_flatten((args, kwargs))[0] if isinstance(x, Tensor)]
        return out

    class Recorder(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.live: dict[int, tuple[int, int]] = {}  # id(storage) -> (sid, nbytes)
            self.emptied: dict[int, str | None] = {}  # id(storage) -> category: resized to 0, still alive
            self.next_sid = 0
            self.phase = "setup"
            self.workspace_threads: set[str] = set()
            self.lt_threads: set[str] = set()
            self.uses_conv = False
            self.scalar_stub = False  # generate(): data-dependent stop checks read as "not finished"
            self.category: str | None = None  # the label of what is created now, when nothing else names it
            # set when the traced step is over: a storage that dies later (the garbage collector freeing a
            # model's reference cycles, perhaps during the next trace) must not append to a returned trace
            self.closed = False

        def _alloc(self, nbytes: int, category: str | None = None) -> int:
            sid = self.next_sid
            self.next_sid += 1
            trace.events.append(("a", sid, nbytes, stream() if stream is not None else 0))
            # what the optimizer step makes and nothing names (foreach AdamW's temporaries, a parameter's worth)
            # is optimizer scratch, not activations (walkthrough, session 27); its state is relabelled at zero_grad
            category = category or self.category or (OPTIMIZER_TEMPORARIES if self.phase == "optimizer" else None)
            if category:
                trace.categories[sid] = category
            return sid

        def track(self, st: Any, category: str | None = None) -> int | None:
            key = id(st)
            if key in self.live:
                return self.live[key][0]
            nbytes = int(st.nbytes())
            if nbytes == 0:
                return None
            sid = self._alloc(nbytes, category)
            self.live[key] = (sid, nbytes)
            weakref.finalize(st, self._dead, key)
            return sid

        def label(self, t: Any, category: str) -> int | None:
            """Name the breakdown category of a live tensor's storage; its sid, or None if not tracked."""
            entry = self.live.get(id(_storage(t)))
            if entry is not None:
                trace.categories[entry[0]] = category
            return entry[0] if entry is not None else None

        def _dead(self, key: int) -> None:
            if self.closed:
                return
            self.emptied.pop(key, None)
            entry = self.live.pop(key, None)
            if entry is not None:
                trace.events.append(("f", entry[0], 0, 0))

        def storage_resized(self, st: Any, nbytes: int) -> None:
            """`storage.resize_(n)`, which does not dispatch: FSDP2 frees its unsharded parameters with
            resize_(0) and brings them back with resize_(size). The storage keeps its finalizer."""
            key = id(st)
            entry = self.live.get(key)
            if entry is not None:
                if nbytes == entry[1]:
                    return
                trace.events.append(("f", entry[0], 0, 0))
                category = trace.categories.get(entry[0])
                if nbytes:
                    self.live[key] = (self._alloc(nbytes, category), nbytes)
                else:
                    del self.live[key]
                    self.emptied[key] = category
            elif key in self.emptied and nbytes:
                self.live[key] = (self._alloc(nbytes, self.emptied.pop(key)), nbytes)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if self.scalar_stub and func is aten._local_scalar_dense.default and \
                    getattr(args[0], "constant", None) is None:
                # fake tensors hold no values; generation runs to max_new_tokens (its memory peak),
                # so every "are all sequences finished / any EOS" read answers no
                dtype = args[0].dtype
                return False if dtype == torch.bool else (0.0 if dtype.is_floating_point else 0)
            tensors = _tensors(args, kwargs)
            live = self.live
            on_dev = kwargs.get("device") is not None or any(id(_storage(t)) in live for t in tensors)
            if func in gemm and len({t.dtype for t in tensors}) > 1:
                raise _mixed_dtypes(func, args, kwargs, tensors)
            if on_dev and func in gemm:
                self._gemm_workspace(func, args)
            if on_dev and func in conv:
                self.uses_conv = True
            try:
                out = func(*args, **kwargs)
            except (OpNotTraceable, host_fallback.OverHostLimit):
                raise
            except Exception as exc:
                raise _classified(func, args, kwargs, exc) from exc
            if func in uniform:
                out = _draw_that_keeps(out)
            if on_dev:
                # a conv call's cuDNN workspace comes after the output it writes and is freed right
                # after (Conv_v8.cpp); backward: grad_input, its workspace, grad_weight, its workspace
                scratch = conv_workspace_sizes(func, args, out, workspaces) if func in conv else {}
                for i, t in enumerate((out,) if type(out) is FakeTensor else tree_flatten(out)[0]):
                    if isinstance(t, torch.Tensor):
                        try:
                            self.track(_storage(t), labeler(t) if labeler is not None else None)
                        except Exception:  # noqa: BLE001
                            pass
                    if i in scratch:
                        trace.events.append(("f", self._alloc(scratch[i], "workspace"), 0, 0))
                if func in reductions and args and isinstance(args[0], torch.Tensor):
                    # Reduce.cuh's global-reduction staging buffer and semaphores, after the output
                    buf, sem = reduce_staging_sizes(args[0], args[1] if len(args) > 1 else None, workspaces)
                    if buf:
                        b, m = self._alloc(buf, "workspace"), self._alloc(sem, "workspace")
                        trace.events.extend((("f", m, 0, 0), ("f", b, 0, 0)))
                mutable = is_mutable.get(func)
                if mutable is None:
                    mutable = is_mutable[func] = func._schema.is_mutable
                if mutable:
                    self._check_resized(tensors)
            return out

        def _gemm_workspace(self, func, args) -> None:
            # cuBLAS keeps one workspace per (handle, stream); autograd's backward runs on its own thread
            thread = "backward" if self.phase == "backward" else "main"
            if thread not in self.workspace_threads:
                self.workspace_threads.add(thread)
                self._alloc(workspaces.cublas, "workspace")
            lt = func in (torch.ops.aten.addmm.default, torch.ops.aten._addmm_activation.default)
            if lt and args[0].dim() == 1 and thread not in self.lt_threads:
                self.lt_threads.add(thread)
                self._alloc(workspaces.cublaslt, "workspace")

        def _check_resized(self, tensors) -> None:
            for t in tensors:
                st = t.untyped_storage()
                entry = self.live.get(id(st))
                if entry is not None and int(st.nbytes()) != entry[1]:
                    sid = self._alloc(int(st.nbytes()), trace.categories.get(entry[0]))
                    trace.events.append(("f", entry[0], 0, 0))
                    self.live[id(st)] = (sid, int(st.nbytes()))

    return Recorder(), cuda_semantics(amp)


@contextlib.contextmanager
def _unpacked_positions(spec: WorkloadSpec):
    """transformers (masking_utils) looks for packed sequences in the position ids when there is no
    cache (training with gradient checkpointing sets use_cache=False): with real values it finds none
    and lets SDPA run causal without a mask; with fake tensors it cannot read them and builds a full
    4-D mask, which changes the attention kernel CUDA picks (with fp32 inputs and grouped keys, the
    math path and its L x L matrix). Without position ids in the inputs the model makes consecutive
    ones, so the answer is "not packed" as on the GPU."""
    import sys

    mu = sys.modules.get("transformers.masking_utils")
    inputs = spec.inputs if isinstance(spec.inputs, dict) else {}
    if mu is None or "position_ids" in inputs or not hasattr(mu, "find_packed_sequence_indices"):
        yield
        return
    orig = mu.find_packed_sequence_indices
    mu.find_packed_sequence_indices = lambda position_ids: None
    try:
        yield
    finally:
        mu.find_packed_sequence_indices = orig


@contextlib.contextmanager
def _storage_resizes(rec: Any):
    """Route UntypedStorage.resize_ through the recorder for the trace's duration (restored after)."""
    import torch

    orig = torch.UntypedStorage.resize_

    def resize_(self: Any, size: int) -> Any:
        out = orig(self, size)
        rec.storage_resized(self, int(self.nbytes()))
        return out

    torch.UntypedStorage.resize_ = resize_
    try:
        yield
    finally:
        torch.UntypedStorage.resize_ = orig


def _draw_that_keeps(out: Any) -> Any:
    """A uniform draw of at most one element (torch.rand([]), rand_like of a scalar) becomes a fake
    tensor that holds a value, so Python control flow on it resolves: stochastic depth (LayerDrop in
    BART, Whisper, wav2vec2...: `if torch.rand([]) < layerdrop: skip the layer`) cannot run on fake
    tensors, which hold no values. The value is the top of [0, 1) (1 - eps/2), so every such skip is
    not taken: the step traced is one in which every layer runs, the highest a real run reaches, and
    the only one with layerdrop 0. The storage is the same size and device as the draw's (on the
    device, one 512-byte block)."""
    import torch
    from torch.utils._mode_utils import no_dispatch

    mode = getattr(out, "fake_mode", None)
    if mode is None or out.numel() > 1 or not out.dtype.is_floating_point or out.requires_grad or \
            out.device.type != "cpu":
        return out
    with no_dispatch():
        real = torch.full(tuple(out.shape), 1 - torch.finfo(out.dtype).eps / 2, dtype=out.dtype)
    return mode.fake_tensor_converter.from_real_tensor(mode, real, make_constant=True)


# transformers 5 logs this (once per process) when a model's class name maps to no loss type (GPT2LMHeadModel) and
# labels are passed: it falls back to the causal-LM loss, as before; the line says nothing about memory
_LOSS_TYPE_LOGGER = "transformers.modeling_utils"
_LOSS_TYPE_WARNING = "`loss_type="


class _DropLossType:
    def filter(self, record: Any) -> bool:
        return not str(record.msg).startswith(_LOSS_TYPE_WARNING)


@contextlib.contextmanager
def _quiet_loss_type():
    """Within the trace, transformers' `loss_type=None` warning is dropped (the filter is removed after)."""
    import logging

    logger = logging.getLogger(_LOSS_TYPE_LOGGER)
    f = _DropLossType()
    logger.addFilter(f)
    try:
        yield
    finally:
        logger.removeFilter(f)


def trace_spec(make_spec: Callable[[], WorkloadSpec], *, steps: int = 3, source: str = "<workload>",
               workspaces: Workspaces | None = None,
               labeler: Callable[[Any], str | None] | None = None,
               decode_traced: int | None = -1, parallel: Any = None,
               cpu_fallback_limit: int | None = None) -> tuple[MemTrace, dict]:
    """Build the workload under fake tensors and trace `steps` steps. Returns (trace, info).
    `labeler(tensor)` may name the breakdown category of each new storage (e.g. "logits").
    generate(): the first `decode_traced` decode steps are traced and the rest written out when they
    repeat (estimate/periodic.py); None traces every one; default DECODE_TRACED (None without SHORTCUTS).
    `parallel` (an estimate.parallel_trace.Plan): trace rank 0 of a DDP / FSDP2 job over a fake process
    group; the model is wrapped after it is loaded, as a training script does. `cpu_fallback_limit`: the most host
    memory fake tensors' real CPU run of an op without a meta kernel may take (estimate/host_fallback.py; default
    LIMIT_CAP); a run over it is refused with FallbackRefused."""
    limit = host_fallback.LIMIT_CAP if cpu_fallback_limit is None else cpu_fallback_limit
    with step_errors.quiet_fake_tensor_log(), _quiet_loss_type():  # an op's error: one line, not logged too
        if parallel is not None:
            from oomdoctor.estimate import parallel_trace
            from oomdoctor.estimate.deepspeed_emulation import quiet_own_hooks

            quiet = quiet_own_hooks() if parallel.strategy == "zero3" else contextlib.nullcontext()
            with parallel_trace.fake_world(parallel) as mesh, quiet:
                return _trace_spec(make_spec, steps=steps, source=source, workspaces=workspaces, labeler=labeler,
                                   decode_traced=decode_traced, parallel=parallel, mesh=mesh, limit=limit)
        return _trace_spec(make_spec, steps=steps, source=source, workspaces=workspaces, labeler=labeler,
                           decode_traced=decode_traced, limit=limit)


def _refused(exc: host_fallback.OverHostLimit, source: str) -> host_fallback.FallbackRefused:
    """An op's real CPU run refused for its size: the limit of an op without a meta kernel, with that size."""
    import torch

    message = step_errors.limit_message(source, _op_name(exc.op), torch.__version__, no_meta=True,
                                        host=(exc.needed, exc.limit))
    return host_fallback.FallbackRefused(message, _op_name(exc.op), exc.needed, exc.limit, torch.__version__)


def _trace_spec(make_spec: Callable[[], WorkloadSpec], *, steps: int, source: str, workspaces: Workspaces | None,
                labeler: Callable[[Any], str | None] | None, decode_traced: int | None,
                parallel: Any = None, mesh: Any = None, limit: int) -> tuple[MemTrace, dict]:
    from torch._subclasses.fake_tensor import FakeTensorMode

    fake = FakeTensorMode(allow_non_fake_inputs=True)
    # build() too: its ops run under the same fake tensors
    with host_fallback.bounded(fake, limit):
        return _trace_in(make_spec, fake, steps=steps, source=source, workspaces=workspaces, labeler=labeler,
                         decode_traced=decode_traced, parallel=parallel, mesh=mesh, limit=limit)


def _trace_in(make_spec: Callable[[], WorkloadSpec], fake: Any, *, steps: int, source: str,
              workspaces: Workspaces | None, labeler: Callable[[Any], str | None] | None, decode_traced: int | None,
              parallel: Any, mesh: Any, limit: int) -> tuple[MemTrace, dict]:
    if decode_traced == -1:
        decode_traced = DECODE_TRACED if SHORTCUTS else None
    import torch

    from oomdoctor.workload.step import StepRunner

    workspaces = workspaces or Workspaces()
    trace = MemTrace()
    try:
        spec = _build(make_spec, fake, source)
    except host_fallback.OverHostLimit as exc:
        raise _refused(exc, source) from exc
    streams = None
    if parallel is not None:
        from oomdoctor.estimate.parallel_trace import StreamIds

        streams = StreamIds()
    rec, semantics = _modes(trace, workspaces, spec.amp is not None, labeler, streams)
    info: dict[str, Any] = {"parameter_bytes": 0, "parameter_count": 0}
    rec.scalar_stub = spec.generate is not None
    if spec.generate is not None:
        steps = 1  # nothing carries over between generate() calls; each decode step is a forward
    try:
        with fake, rec, semantics, fake_safe_apply(), _storage_resizes(rec), _unpacked_positions(spec), \
                _generation_runs_to_the_end(spec, lambda: len(trace.events), decode_traced) as (new_call, decode):
            _load_to_device(spec, rec, info)
            if parallel is not None:
                spec = _wrap(spec, parallel, mesh, rec, trace)
            runner = StepRunner(spec, "cpu", optimizer_kwargs={"foreach": True} if spec.train else None,
                                on_phase=None)
            starts: list[int] = []
            for i in range(1, steps + 1):
                if i >= 3 and SHORTCUTS and periodic.self_contained(trace.events, starts[-1], len(trace.events)):
                    # step i-1 ended with the storages it began with: step i starts from the same state
                    # and runs the same ops; its events are step i-1's (the allocator replays them anew)
                    start, end = starts[-1], len(trace.events)
                    starts.append(end)
                    rec.next_sid = periodic.repeat_step(trace, start, end, rec.next_sid,
                                                        (f"step{i - 1}/", f"step{i}/"))
                    info["repeated_steps"] = info.get("repeated_steps", 0) + 1
                    continue
                starts.append(len(trace.events))
                def mark(name: str, i: int = i) -> None:
                    rec.phase = name
                    if name == "forward":
                        new_call()
                    trace.marks.append((len(trace.events), f"step{i}/{name}"))
                    if name == "optimizer":
                        _label_grads(spec, rec, trace)
                    if name == "zero_grad":
                        _label_state(runner, rec, trace)
                runner.on_phase = mark
                runner.step()
    except host_fallback.OverHostLimit as exc:
        raise _refused(exc, source) from exc
    except OpRejected as exc:
        at, module = step_errors.where(exc, spec.model, source)
        at, made = _or_build(at, source)
        raise InputError(f"{source}{f':{at}' if at else ''}: the step fails at {_op_name(exc.op)}"
                         f"{f' (in {module})' if module else ''}: {_one_line(exc.exc)}{made}") from exc
    except OpNotTraceable as exc:
        if exc.limit:
            cpu = _one_line(exc.exc, 200) if step_errors.cpu_run_failure(exc.exc) else ""
            raise InputError(step_errors.limit_message(source, _op_name(exc.op), torch.__version__,
                                                       no_meta=exc.limit == "no_meta", cpu_error=cpu)) from exc
        raise InputError(f"{source}: the model uses {exc.op}, which fake tensors cannot run "
                         f"({type(exc.exc).__name__})") from exc
    except InputError:
        raise
    except Exception as exc:
        at, module = step_errors.where(exc, spec.model, source)
        if step_errors.autograd_error(exc):
            raise _autograd_refusal(exc, spec, source, rec.phase, at, module) from exc
        if _users_error(exc, source):  # a check in the workload's forward, or in torch's Python
            at, made = _or_build(at, source)
            raise InputError(f"{source}{f':{at}' if at else ''}: the step raised {type(exc).__name__}"
                             f"{f' (in {module})' if module else ''}: {_one_line(exc)}{made}") from exc
        raise InputError(f"{source}: the step failed under fake tensors: {type(exc).__name__}: "
                         f"{_one_line(exc)}") from exc
    finally:
        rec.closed = True
    if decode["cut"]:  # the decode loop was stopped after `decode_traced` tokens
        nxt = periodic.extend_periods(trace, decode["bounds"], decode["total"], rec.next_sid)
        if nxt is None:  # the traced decode steps do not repeat: trace them all
            return _trace_spec(make_spec, steps=steps, source=source, workspaces=workspaces, labeler=labeler,
                               decode_traced=None, parallel=parallel, mesh=mesh, limit=limit)
        rec.next_sid = nxt
        info["decode_steps_traced"] = len(decode["bounds"]) - 1
    info["cublas_threads"] = sorted(rec.workspace_threads)
    info["uses_gemm"] = bool(rec.workspace_threads)
    info["uses_conv"] = rec.uses_conv
    info["amp"] = spec.amp
    info["train"] = spec.train
    info["torch_version"] = torch.__version__
    return trace, info


_MADE_BY_BUILD = "build(), which made the model and its inputs"


def _or_build(at: int | None, source: str, what: str = _MADE_BY_BUILD) -> tuple[int | None, str]:
    """The file's line on the stack; with none there (the error rose in torch's code, from what build() made),
    build()'s line, and a note saying whose line it is."""
    if at is not None:
        return at, ""
    line = step_errors.build_line(source)
    return (line, f" (line {line}: {what})") if line else (None, "")


def _autograd_refusal(exc: BaseException, spec: WorkloadSpec, source: str, phase: str, at: int | None,
                      module: str) -> InputError:
    """One of autograd's refusals: the workload's step fails so on a GPU too. Without a line of the file on the
    stack, the line of what made the failing tensor: the loss function (at backward), the model's forward, or
    build() (its batch, when that is the leaf changed in place)."""
    when = {"backward": "at loss.backward()", "optimizer": "at optimizer.step()"}.get(phase, "in the forward")
    made = ""
    if at is None:
        leaf = step_errors.in_place_on_leaf(exc) and step_errors.leaf_input((spec.inputs, spec.target))
        loss = step_errors.defined_at(spec.loss, source) if phase == "backward" and spec.loss is not None else None
        forward = None if leaf else step_errors.defined_at(spec.model, source)
        if loss:
            at, made = loss, f" (line {loss}: the loss function)"
        elif forward:
            at, made = forward, f" (line {forward}: the model's forward)"
        else:
            at, made = _or_build(None, source, "build(), whose inputs include a leaf tensor that requires grad"
                                 if leaf else _MADE_BY_BUILD)
    return InputError(f"{source}{f':{at}' if at else ''}: the workload's own step fails {when}, as it would on a "
                      f"GPU{f' (in {module})' if module else ''}: {type(exc).__name__}: {_one_line(exc)}{made}")


@contextlib.contextmanager
def _generation_runs_to_the_end(spec: WorkloadSpec, now: Callable[[], int], traced: int | None = None):
    """For a generate() step: its loop stops when max_new_tokens tokens are made, whatever the (fake)
    tokens are; transformers' own check reads tensor values, which fake tensors do not have. With
    `traced`, the loop stops after that many tokens; decode["bounds"] holds the event index at each
    check (where each token's step begins, then where the loop ends) and decode["total"] the tokens
    a real run makes."""
    decode: dict[str, Any] = {"bounds": [], "total": 0, "cut": False}
    if spec.generate is None:
        yield (lambda: None), decode
        return
    steps = spec.generate.get("max_new_tokens")
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise InputError(f"{spec.source}: generate needs max_new_tokens (an integer >= 1) to be estimated")
    try:
        from transformers.generation.utils import GenerationMixin
    except ImportError as exc:
        raise InputError(f"{spec.source}: generate needs transformers") from exc
    calls = [0]
    stop = steps if traced is None else min(steps, traced)
    decode["total"] = steps
    orig = GenerationMixin._has_unfinished_sequences

    def unfinished(self, this_peer_finished, synced_gpus, device=None, **kw):
        calls[0] += 1
        decode["bounds"].append(now())
        decode["cut"] = calls[0] > stop and stop < steps
        return calls[0] <= stop

    def new_call() -> None:
        calls[0] = 0
        decode["bounds"].clear()
        decode["cut"] = False

    GenerationMixin._has_unfinished_sequences = unfinished
    try:
        yield new_call, decode
    finally:
        GenerationMixin._has_unfinished_sequences = orig


def _build(make_spec: Callable[[], WorkloadSpec], fake: Any, source: str) -> WorkloadSpec:
    """build() under fake tensors; if its initialisation needs real values (e.g. .item() in an init
    function), build it for real on the CPU and convert model and batch to fake tensors."""
    import copy
    import dataclasses

    import torch
    from torch._subclasses.fake_tensor import DataDependentOutputException, FakeCopyMode

    try:
        with fake, fake_safe_apply():
            return make_spec()
    except InputError as exc:
        if isinstance(exc.__cause__, host_fallback.OverHostLimit):  # build() ran an op over the limit
            raise exc.__cause__ from None
        if not isinstance(exc.__cause__, DataDependentOutputException):
            raise
    spec = make_spec()
    with FakeCopyMode(fake):
        model = copy.deepcopy(spec.model)
    conv = torch.utils._pytree.tree_map_only(torch.Tensor, fake.from_tensor, (spec.inputs, spec.target))
    return dataclasses.replace(spec, model=model, inputs=conv[0], target=conv[1])


def _load_to_device(spec: WorkloadSpec, rec: Any, info: dict) -> None:
    """Model.to('cuda') order (children first, then own parameters and buffers), then the batch."""
    import torch
    from torch.utils._pytree import tree_flatten

    def visit(module):
        for child in module.children():
            visit(child)
        for p in module._parameters.values():
            if p is not None:
                seen = id(p.untyped_storage()) in rec.live  # a tied weight counts once
                sid = rec.track(p.untyped_storage(), "parameters")
                if sid is not None:
                    info.setdefault("parameter_sids", {})[id(p)] = sid
                if sid is not None and not seen:
                    info["parameter_count"] += p.numel()
                    info["parameter_bytes"] += p.untyped_storage().nbytes()
        for b in module._buffers.values():
            if b is not None:
                rec.track(b.untyped_storage(), "parameters")

    visit(spec.model)
    for t in tree_flatten((spec.inputs, spec.target))[0]:
        if isinstance(t, torch.Tensor):
            rec.track(t.untyped_storage(), "activations")


def _wrap(spec: WorkloadSpec, plan: Any, mesh: Any, rec: Any, trace: MemTrace) -> WorkloadSpec:
    """Wrap the loaded model for data parallelism; what the wrapper allocates is labelled: DDP's
    gradient buckets as gradients, FSDP2's shards as parameters."""
    import dataclasses

    from oomdoctor.estimate.parallel_trace import wrap

    start = len(trace.events)
    rec.category = "gradients" if plan.strategy == "ddp" else "parameters"
    try:
        model = wrap(spec.model, plan, mesh)
    finally:
        rec.category = None
    if plan.strategy in ("zero2", "zero3"):
        from oomdoctor.estimate.deepspeed_emulation import Zero2Emulation, Zero3Emulation
        from oomdoctor.workload.step import make_optimizer

        kind = Zero2Emulation if plan.strategy == "zero2" else Zero3Emulation
        emu = kind(model, plan.ranks, lambda ps: make_optimizer(spec, ps, foreach=True), rec.label)
        _drop_replaced_parameters(trace, start, transients=True)
        # tensors that only stand in for DeepSpeed's own (ZeRO-3: the model's whole parameters)
        stand_ins = {rec.live[id(_local_storage(t))][0] for t in emu.stand_ins if id(_local_storage(t)) in rec.live}
        if stand_ins:
            trace.events[:] = [e for e in trace.events if e[1] not in stand_ins]
        return dataclasses.replace(spec, model=model, optimizer=lambda params: emu)
    _drop_replaced_parameters(trace, start)
    return dataclasses.replace(spec, model=model)


def _drop_replaced_parameters(trace: MemTrace, start: int, transients: bool = False) -> None:
    """Parameters loaded whole and freed by sharding leave the trace: FSDP2 recipes build on the meta
    device or the CPU and shard before anything reaches the GPU (and a script that loads whole empties
    the cache after sharding), so the whole model never sits on a rank at once. `transients`: what the
    wrapper itself made and freed goes too (DeepSpeed's start-up copies; its engine and training
    scripts empty the cache after initialize)."""
    freed = {sid for op, sid, _, _ in trace.events[start:] if op == "f"}
    gone = {sid for op, sid, _, _ in trace.events[:start]
            if op == "a" and sid in freed and trace.categories.get(sid) == "parameters"}
    if transients:
        gone |= {sid for op, sid, _, _ in trace.events[start:] if op == "a" and sid in freed}
    if gone:
        trace.events[:] = [e for e in trace.events if e[1] not in gone]


def _label_grads(spec: WorkloadSpec, rec: Any, trace: MemTrace) -> None:
    for p in spec.model.parameters():
        if p.grad is not None:
            rec.label(p.grad, "gradients")


def _label_state(runner: Any, rec: Any, trace: MemTrace) -> None:
    import torch

    for state in runner.optimizer.state.values():
        for v in state.values():
            if isinstance(v, torch.Tensor):
                sid = rec.label(v, "optimizer_state")
                if sid is not None:
                    trace.numels[sid] = getattr(v, "_local_tensor", v).numel()
