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
from oomdoctor.estimate.memtrace import MemTrace
from oomdoctor.estimate.reduce_staging import ReduceDevice
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
              labeler: Callable[[Any], str | None] | None = None, parallel: Any = None) -> tuple[MemTrace, dict]:
    from oomdoctor.estimate.trace import trace_spec

    if batch_size < 1:
        raise UsageError(f"batch size must be at least 1, got {batch_size}")
    make, path = _factory(source)
    # no GPU named: the H100 the workspace rules were measured on (132 SMs, 2048 threads per SM)
    ws = Workspaces(cublas=cublas_workspace_for(gpu.capability[0] if gpu else 9),
                    reduce_device=ReduceDevice(gpu.sm_count, gpu.max_threads_per_sm) if gpu else ReduceDevice())
    return trace_spec(lambda: make(batch_size), source=path, workspaces=ws, labeler=labeler, parallel=parallel)


def estimate(workload_or_spec_factory: SpecSource, batch_size: int, *, memory_limit: int | None = None,
             gpu: str | None = None, alloc_conf: str | AllocConf | None = None, lazy_loading: bool = True) -> Estimate:
    """Estimate one workload at one batch size. `memory_limit` caps reserved memory like
    torch.cuda.set_per_process_memory_fraction; `gpu` (e.g. "h100") checks the whole process fits."""
    spec_gpu = get_gpu(gpu) if gpu else None
    conf = alloc_conf if isinstance(alloc_conf, AllocConf) else parse_alloc_conf(alloc_conf)
    trace, info = trace_for(workload_or_spec_factory, batch_size, spec_gpu)
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


def max_batch(workload_or_spec_factory: SpecSource, *, memory_limit: int | None = None, gpu: str | None = None,
              alloc_conf: str | AllocConf | None = None, upper: int = 1 << 16,
              progress: Callable[[str], None] | None = None) -> tuple[int, dict[int, bool]]:
    """Largest batch whose traced step fits: exponential search from 1, then bisection. 0 if even 1 does not."""
    if memory_limit is None and gpu is None:
        raise UsageError("--max-batch needs --memory-limit SIZE or --gpu NAME")
    conf = alloc_conf if isinstance(alloc_conf, AllocConf) else parse_alloc_conf(alloc_conf)
    spec_gpu = get_gpu(gpu) if gpu else None
    tried: dict[int, bool] = {}

    def fits(b: int) -> bool:
        if b not in tried:
            if progress:
                progress(f"tracing batch size {b}")
            trace, info = trace_for(workload_or_spec_factory, b, spec_gpu)
            tried[b] = bool(_from_trace(trace, info, b, conf, memory_limit, spec_gpu, True).fits)
        return tried[b]

    return largest_that_fits(fits, upper), tried


def largest_that_fits(fits: Callable[[int], bool], upper: int) -> int:
    """The largest n in 1..upper with fits(n), for a monotone `fits`: doubling from 1 (capped at
    upper), then bisection. 0 if even 1 does not fit. Shared by --max-batch and `estimate --model`."""
    if not fits(1):
        return 0
    lo, hi = 1, None
    while hi is None:
        nxt = min(lo * 2, upper)
        if nxt == lo:
            return lo
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
    return lo


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
