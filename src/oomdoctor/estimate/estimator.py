"""Predict the peak GPU memory of a training step without a GPU (docs/contracts.md §§3, 4, 6).

estimate() traces three steps under fake tensors (runtime.trace), replays the trace through the model
of the CUDA caching allocator (analysis.allocator) and adds the CUDA context (knowledge.workspaces).
`peak_reserved_bytes` is what torch.cuda.max_memory_reserved() would report; `process_total_bytes`
adds the context and library memory that NVML counts for the process.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from oomdoctor.errors import UsageError
from oomdoctor.estimate.alloc_conf import AllocConf, parse_alloc_conf
from oomdoctor.estimate.allocator import ReplayResult, replay, round_size
from oomdoctor.estimate.host_fallback import FallbackRefused
from oomdoctor.estimate.memtrace import MemTrace
from oomdoctor.estimate.reduce_staging import ReduceDevice
from oomdoctor.estimate.step_errors import host_run
from oomdoctor.estimate.workspaces import CONTEXT, Workspaces, cublas_workspace_for
from oomdoctor.knowledge.gpus import GpuSpec, get_gpu
from oomdoctor.workload.load import Workload, WorkloadSpec, load_workload

SpecSource = Union[str, Path, Workload, Callable[[int], Any]]


@dataclass(frozen=True)
class Estimate:
    batch_size: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    process_total_bytes: int
    breakdown: dict[str, int]
    memory_limit_bytes: int | None = None
    fits: bool | None = None
    gpu: str | None = None
    peak_phase: str = ""
    parameter_count: int = 0
    details: dict[str, Any] = field(default_factory=dict)


def _factory(source: SpecSource) -> tuple[Callable[[int], WorkloadSpec], str]:
    if isinstance(source, (str, Path)):
        source = load_workload(source)
    if isinstance(source, Workload):
        return source.spec, source.path
    if callable(source):
        def make(b: int) -> WorkloadSpec:
            raw = source(b)
            return raw if isinstance(raw, WorkloadSpec) else WorkloadSpec.from_dict(raw, "<python>")
        return make, getattr(source, "__name__", "<python>")
    raise UsageError(f"cannot estimate {source!r}: give a workload file, a Workload or a build(batch) callable")


def _limit(memory_limit: int | None, gpu: GpuSpec | None, context: int) -> int | None:
    if memory_limit is not None:
        return int(memory_limit)
    if gpu is not None:
        return gpu.total_memory - context
    return None


def trace_for(source: SpecSource, batch_size: int, gpu: GpuSpec | None = None,
              labeler: Callable[[Any], str | None] | None = None, parallel: Any = None,
              cpu_fallback_limit: int | None = None) -> tuple[MemTrace, dict]:
    from oomdoctor.estimate.trace import trace_spec

    if batch_size < 1:
        raise UsageError(f"batch size must be at least 1, got {batch_size}")
    make, path = _factory(source)
    # no GPU named: the H100 the workspace rules were measured on (132 SMs, 2048 threads per SM)
    ws = Workspaces(cublas=cublas_workspace_for(gpu.capability[0] if gpu else 9),
                    reduce_device=ReduceDevice(gpu.sm_count, gpu.max_threads_per_sm) if gpu else ReduceDevice())
    return trace_spec(lambda: make(batch_size), source=path, workspaces=ws, labeler=labeler, parallel=parallel,
                      cpu_fallback_limit=cpu_fallback_limit)


def estimate(workload_or_spec_factory: SpecSource, batch_size: int, *, memory_limit: int | None = None,
             gpu: str | None = None, alloc_conf: str | AllocConf | None = None, lazy_loading: bool = True,
             cpu_fallback_limit: int | None = None) -> Estimate:
    """Estimate one workload at one batch size. `memory_limit` caps reserved memory like
    torch.cuda.set_per_process_memory_fraction; `gpu` (e.g. "h100") checks the whole process fits.
    `cpu_fallback_limit`: the most host memory the real CPU run of an op without a meta kernel may take
    (default host_fallback.LIMIT_CAP, 1 GiB); over it, host_fallback.FallbackRefused (an InputError)."""
    spec_gpu = get_gpu(gpu) if gpu else None
    conf = alloc_conf if isinstance(alloc_conf, AllocConf) else parse_alloc_conf(alloc_conf)
    trace, info = trace_for(workload_or_spec_factory, batch_size, spec_gpu, cpu_fallback_limit=cpu_fallback_limit)
    return _from_trace(trace, info, batch_size, conf, memory_limit, spec_gpu, lazy_loading)


def _from_trace(trace: MemTrace, info: Mapping[str, Any], batch_size: int, conf: AllocConf,
                memory_limit: int | None, gpu: GpuSpec | None, lazy_loading: bool,
                result: ReplayResult | None = None) -> Estimate:
    """`result`: the uncapped replay of trace.events, when the caller has it already."""
    result = result or replay(trace.events, conf)
    handles = len(info.get("cublas_threads", ())) or (2 if info.get("train") else 1)
    context = CONTEXT.bytes(cublas_handles=handles if info.get("uses_gemm", True) else 0,
                            uses_cudnn=bool(info.get("uses_conv")), lazy=lazy_loading)
    breakdown = trace.breakdown_at(result.peak_index, lambda n: round_size(n, conf)) if result.peak_index >= 0 \
        else dict.fromkeys(("parameters", "gradients", "optimizer_state", "activations", "workspace"), 0)
    breakdown["allocator_cache"] = max(0, result.peak_reserved - sum(breakdown.values()))
    breakdown["context"] = context
    limit = _limit(memory_limit, gpu, context)
    fits = None
    if limit is not None:
        # a cap the uncapped replay never reaches changes nothing: no second replay then
        fits = result.peak_reserved <= limit or replay(trace.events, conf, limit=limit).oom is None
    return Estimate(
        batch_size=batch_size, peak_allocated_bytes=result.peak_allocated, peak_reserved_bytes=result.peak_reserved,
        process_total_bytes=result.peak_reserved + context, breakdown=breakdown, memory_limit_bytes=limit,
        fits=fits, gpu=gpu.key if gpu else None, peak_phase=trace.phase_at(result.peak_index),
        parameter_count=int(info.get("parameter_count", 0)),
        details={"events": len(trace.events), "torch": info.get("torch_version"), "amp": info.get("amp")},
    )


# --max-batch keeps doubling while the step fits: a tiny model fits millions of samples, and a fake-tensor trace
# at any batch costs the same (no data is made). The search stops at these bounds on its cost: a batch past
# MAX_BATCH_CAP (31 doublings, at most ~62 traces), or SEARCH_SECONDS of doubling (a large, slow model whose
# memory does not grow with the batch); the answer then says "at least N" (max_batch_size_bound "search_limit").
# The bisection that follows a batch that does not fit is not timed: it is at most 31 traces and makes the answer.
MAX_BATCH_CAP = 1 << 31
SEARCH_SECONDS = 600.0


class SearchStop(Exception):
    """Raised by a search's `fits(n)` when n cannot be judged (its trace was refused, not failed): the search ends
    with the largest n that fitted, bound "search_limit", the exception's text saying why."""


@dataclass(frozen=True)
class Found:
    """What a search for the largest n that fits found: `best` (0: not even 1 fits), what bounds it (`bound`:
    "memory" when best + 1 was seen not to fit, "search_limit" when the search stopped first) and, then, why
    (`stopped`, a phrase for the text) and the smallest n seen not to fit, if any (`first_no`)."""
    best: int
    bound: str = "memory"
    stopped: str = ""
    first_no: int | None = None


@dataclass(frozen=True)
class MaxBatch:
    """estimate --max-batch's answer; unpacks as (max_batch_size, tried), as max_batch() returned before."""
    max_batch_size: int
    tried: dict[int, bool]
    bound: str = "memory"
    stopped: str = ""

    def __iter__(self):
        return iter((self.max_batch_size, self.tried))


def max_batch(workload_or_spec_factory: SpecSource, *, memory_limit: int | None = None, gpu: str | None = None,
              alloc_conf: str | AllocConf | None = None, upper: int = MAX_BATCH_CAP,
              seconds: float | None = SEARCH_SECONDS, progress: Callable[[str], None] | None = None,
              cpu_fallback_limit: int | None = None) -> MaxBatch:
    """Largest batch whose traced step fits: doubling from 1 until one does not fit (or `upper`, or `seconds` of
    doubling), then bisection. 0 if even 1 does not fit. A batch whose op without a meta kernel would take more
    host memory than `cpu_fallback_limit` to run on the CPU ends the search at the largest batch traced (bound
    "search_limit"); at batch 1, FallbackRefused."""
    if memory_limit is None and gpu is None:
        raise UsageError("--max-batch needs --memory-limit SIZE or --gpu NAME")
    conf = alloc_conf if isinstance(alloc_conf, AllocConf) else parse_alloc_conf(alloc_conf)
    spec_gpu = get_gpu(gpu) if gpu else None
    tried: dict[int, bool] = {}
    peaks: dict[int, int] = {}
    refused: list[int] = []

    def fits(b: int) -> bool:
        if b not in tried:
            if progress:
                ok = [k for k, v in tried.items() if v]
                progress(f"tracing batch size {b}" + (f" ({max(ok)} fits)" if ok else ""))
            try:
                trace, info = trace_for(workload_or_spec_factory, b, spec_gpu, cpu_fallback_limit=cpu_fallback_limit)
            except FallbackRefused as exc:
                if b == 1:  # nothing traced: the refusal is the answer
                    raise
                refused.append(b)
                raise SearchStop(f"batch size {b}: {exc.op} has no meta (fake tensor) implementation in torch "
                                 f"{exc.torch_version} ({host_run(exc.needed, exc.limit)}); measure larger batches "
                                 f"on a GPU (`oomdoctor max-batch`)") from exc
            est = _from_trace(trace, info, b, conf, memory_limit, spec_gpu, True)
            tried[b], peaks[b] = bool(est.fits), est.peak_reserved_bytes
        return tried[b]

    found = search_largest(fits, upper, seconds=seconds)
    stopped = found.stopped
    if found.bound == "search_limit" and not refused and found.best > 1 and peaks.get(found.best) == peaks.get(1):
        stopped += "; the step's memory does not grow with the batch size: does build() use batch_size?"
    return MaxBatch(found.best, tried, found.bound, stopped)


def largest_that_fits(fits: Callable[[int], bool], upper: int) -> int:
    """The largest n in 1..upper with fits(n), for a monotone `fits` (search_largest without a time limit).
    Shared by --max-batch and `estimate --model`."""
    return search_largest(fits, upper).best


def search_largest(fits: Callable[[int], bool], upper: int, *, seconds: float | None = None,
                   clock: Callable[[], float] | None = None) -> Found:
    """The largest n in 1..upper with fits(n), for a monotone `fits`: doubling from 1 (capped at upper), then
    bisection. Doubling for more than `seconds`: the n that fits so far, bound "search_limit"; so too when
    fits(n) raises SearchStop (but not for n = 1: it propagates then)."""
    import time

    now = clock or time.monotonic
    start = now()

    def out_of_time() -> bool:
        return seconds is not None and now() - start > seconds

    if not fits(1):
        return Found(0)
    lo, hi = 1, None
    try:
        while hi is None:
            nxt = min(lo * 2, upper)
            if nxt == lo:
                return Found(lo, "search_limit", "the largest batch it traces; memory was not reached")
            if out_of_time():
                return Found(lo, "search_limit", f"{seconds:.0f} s of doubling the batch, each one fitting")
            if fits(nxt):
                lo = nxt
            else:
                hi = nxt
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if fits(mid):
                lo = mid
            else:
                hi = mid
    except SearchStop as stop:
        return Found(lo, "search_limit", str(stop), first_no=hi)
    return Found(lo, first_no=hi)


def estimate_module(model: Any, make_inputs: Callable[[int], Any], batch_size: int, *,
                    make_target: Callable[[int], Any] | None = None, loss: Any = None, optimizer: Any = "adam",
                    amp: str | None = None, train: bool = True, gradient_checkpointing: bool = False,
                    **kwargs: Any) -> Estimate:
    """estimate() for a model you already hold: it is copied into fake tensors (never touched, no GPU).
    `make_inputs(batch_size)` builds the batch (a tensor, tuple or dict); kwargs as for estimate()."""
    import copy

    from torch._subclasses.fake_tensor import FakeCopyMode
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    def build(b: int) -> dict:
        mode = _get_current_dispatch_mode()
        with FakeCopyMode(mode):
            fake_model = copy.deepcopy(model)
        return {"model": fake_model, "inputs": make_inputs(b), "target": make_target(b) if make_target else None,
                "loss": loss, "optimizer": optimizer, "amp": amp, "train": train,
                "gradient_checkpointing": gradient_checkpointing}

    return estimate(build, batch_size, **kwargs)
