"""One max-batch trial, run in a fresh child process: build the workload at a batch size, apply the
memory cap, run the steps (StepRunner, docs/contracts.md §6) and report the peak as one JSON line.

Why a child: its peak statistics start clean, an OOM (or a wedged kernel) cannot poison the caller,
the cap from `torch.cuda.set_per_process_memory_fraction` dies with it, and a time limit can kill it.
`python -m oomdoctor.trials.child WORKLOAD.py --batch N ...` prints `{"outcome": ...}` on stdout.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections.abc import Mapping
from typing import Any

from oomdoctor.errors import OomDoctorError

RESULT_PREFIX = "OOMDOCTOR_TRIAL "


def _to_device(obj: Any, device: Any) -> Any:
    if hasattr(obj, "to") and hasattr(obj, "device"):
        return obj.to(device)
    if isinstance(obj, Mapping):
        return {k: _to_device(v, device) for k, v in obj.items()}
    if isinstance(obj, (tuple, list)):
        return type(obj)(_to_device(v, device) for v in obj)
    return obj


def _tensor_bytes(obj: Any) -> int:
    if hasattr(obj, "element_size") and hasattr(obj, "nelement"):
        return obj.element_size() * obj.nelement()
    if isinstance(obj, Mapping):
        return sum(_tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (tuple, list)):
        return sum(_tensor_bytes(v) for v in obj)
    return 0


class _PhasePeaks:
    """Peaks of forward+backward and of optimizer.step() apart, and overall.

    At small batches the optimizer step (foreach temporaries, state creation) often sets the peak, so
    the overall peak is flat there and only the forward+backward peak shows the slope.
    """

    def __init__(self, torch: Any, dev: Any):
        self.torch, self.dev = torch, dev
        self.reserved = self.allocated = self.fb = 0

    def mark(self, fwd_bwd: bool) -> None:
        cuda = self.torch.cuda
        allocated = int(cuda.max_memory_allocated(self.dev))
        self.reserved = max(self.reserved, int(cuda.max_memory_reserved(self.dev)))
        self.allocated = max(self.allocated, allocated)
        if fwd_bwd:
            self.fb = max(self.fb, allocated)
        cuda.reset_peak_memory_stats(self.dev)

    def wrap(self, optimizer: Any) -> None:
        real_step = optimizer.step

        def step(*args: Any, **kwargs: Any) -> Any:
            self.mark(fwd_bwd=True)
            try:
                return real_step(*args, **kwargs)
            finally:
                self.mark(fwd_bwd=False)

        optimizer.step = step


def run_trial(workload_path: str, batch: int | None, *, steps: int = 3, device: str = "cuda:0",
              memory_limit: int | None = None, fraction: float | None = None,
              seq_len: int | None = None) -> dict[str, Any]:
    """Run `steps` training steps at `batch` under the cap; never raises for OOM.

    With batch None, only report the device: total and free memory and the cap that would apply.
    """
    from oomdoctor.workload.load import load_workload

    workload = load_workload(workload_path)  # a broken file is reported before the GPU is looked at
    try:
        import torch
    except ImportError:
        return {"outcome": "nogpu", "detail": "torch is not installed"}
    if not torch.cuda.is_available():
        return {"outcome": "nogpu", "detail": "torch.cuda.is_available() is False"}
    from dataclasses import replace

    from oomdoctor.workload.oom_exceptions import first_line, is_oom
    from oomdoctor.workload.step import StepRunner

    dev = torch.device(device)
    torch.cuda.set_device(dev)
    props = torch.cuda.get_device_properties(dev)
    total = int(props.total_memory)
    if memory_limit is not None:
        if memory_limit > total:
            return {"outcome": "badlimit", "detail": f"memory limit {memory_limit} exceeds the GPU's {total} bytes",
                    "total_bytes": total}
        fraction = memory_limit / total
    fraction = 1.0 if fraction is None else fraction
    torch.cuda.set_per_process_memory_fraction(fraction, dev)
    limit = int(fraction * total)
    info = {"total_bytes": total, "limit_bytes": limit, "gpu": props.name, "batch": batch, "seq_len": seq_len,
            "torch": torch.__version__}
    if batch is None:
        free, _ = torch.cuda.mem_get_info(dev)
        return {**info, "free_bytes": int(free), "outcome": "ok"}
    t0 = time.perf_counter()
    outcome, detail = "ok", ""
    try:
        with torch.device(dev):  # build on the GPU directly: faster, and what the step will hold
            spec = workload.spec(batch, seq_len)
        spec = replace(spec, model=spec.model.to(dev), inputs=_to_device(spec.inputs, dev),
                       target=_to_device(spec.target, dev))
        input_bytes = _tensor_bytes(spec.inputs) + _tensor_bytes(spec.target)
        grad_bytes = sum(p.element_size() * p.nelement() for p in spec.model.parameters() if p.requires_grad)
        runner = StepRunner(spec, device_type="cuda")
        peaks = _PhasePeaks(torch, dev)
        if runner.optimizer is not None:
            peaks.wrap(runner.optimizer)
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        stats0 = torch.cuda.memory_stats(dev)
        timed = 0.0
        for i in range(steps):
            t_step = time.perf_counter()
            runner.step()
            if i > 0 or steps == 1:  # the first step pays for autotuning and the optimizer state
                torch.cuda.synchronize(dev)
                timed += time.perf_counter() - t_step
            elif steps > 1:
                torch.cuda.synchronize(dev)
        torch.cuda.synchronize(dev)
        peaks.mark(fwd_bwd=runner.optimizer is None)
        stats1 = torch.cuda.memory_stats(dev)
        timed_steps = steps - 1 if steps > 1 else 1
        # num_alloc_retries: cudaMalloc failed and the cache was flushed to retry; num_ooms: failed
        # allocations the job survived (cuDNN catches them and falls back to a smaller workspace)
        info.update(samples_per_s=round(batch * timed_steps / timed, 3) if timed > 0 else None,
                    tokens_per_s=(round(batch * seq_len * timed_steps / timed, 3)
                                  if timed > 0 and seq_len else None),
                    step_seconds=round(timed / timed_steps, 5),
                    alloc_retries=int(stats1.get("num_alloc_retries", 0) - stats0.get("num_alloc_retries", 0)),
                    survived_ooms=int(stats1.get("num_ooms", 0) - stats0.get("num_ooms", 0)))
        info.update(peak_reserved_bytes=peaks.reserved, peak_allocated_bytes=peaks.allocated,
                    fb_peak_bytes=peaks.fb,
                    static_bytes=max(0, int(torch.cuda.memory_allocated(dev)) - input_bytes),
                    grad_bytes=int(grad_bytes) if spec.train else 0)
    except Exception as exc:
        if not is_oom(exc):
            raise
        outcome, detail = "oom", first_line(exc, 300)
        info["reserved_at_oom_bytes"] = int(torch.cuda.memory_reserved(dev))
    info.update(outcome=outcome, detail=detail, seconds=round(time.perf_counter() - t0, 3))
    gc.collect()
    return info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m oomdoctor.trials.child")
    ap.add_argument("workload")
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--seq", type=int, default=None, help="sequence length: build(batch, seq_len=SEQ)")
    ap.add_argument("--info", action="store_true", help="only report the device and the cap")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--memory-limit", type=int, default=None)
    ap.add_argument("--fraction", type=float, default=None)
    args = ap.parse_args(argv)
    try:
        result = run_trial(args.workload, None if args.info else args.batch, steps=args.steps, device=args.device,
                           memory_limit=args.memory_limit, fraction=args.fraction, seq_len=args.seq)
    except OomDoctorError as exc:  # the workload file is broken: its own one-line message
        result = {"outcome": "error", "detail": exc.message[:500]}
    except Exception as exc:  # the user's workload failed for another reason: report it, one line
        from oomdoctor.workload.load import line_in

        result = {"outcome": "error", "detail": f"{type(exc).__name__}: {exc}".splitlines()[0][:500],
                  "line": line_in(exc, args.workload)}  # ":N" where the workload's own code raised it
    sys.stdout.write(RESULT_PREFIX + json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
