"""`oomdoctor max-batch`: real trials in child processes, steered by analysis.batch_search.

The caller's process never initialises CUDA: a first child reads the device (total and free memory,
the cap that applies), then each trial is one child with a time limit. The estimator, when it is
installed, supplies the first guess; without it two small batches are measured.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oomdoctor.collectors.context import abandon
from oomdoctor.errors import InputError, OomDoctorError, UsageError
from oomdoctor.trials.child import RESULT_PREFIX
from oomdoctor.trials.search import LinearFit, ProbeResult, SearchResult, Trial, search
from oomdoctor.workload.load import load_workload

NO_GPU_HINT = ("max-batch runs real trials on a CUDA GPU; without one, predict it with "
               "`oomdoctor estimate WORKLOAD.py --max-batch --memory-limit SIZE`")


class NoGpuError(OomDoctorError):
    exit_code = 2


@dataclass
class MaxBatchRun:
    workload: str
    device: str
    result: SearchResult
    gpu: str | None = None
    torch_version: str | None = None
    total_bytes: int | None = None
    free_bytes: int | None = None
    wall_seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    dim: str = "batch"  # "batch", or "seq": the longest sequence at a fixed batch
    fixed_batch: int | None = None


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[2])  # the directory holding the oomdoctor package
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def run_child(args: list[str], timeout: float) -> dict[str, Any]:
    """Run `python -m oomdoctor.trials.child ARGS`; a timeout or crash is a result, not an exception."""
    cmd = [sys.executable, "-m", "oomdoctor.trials.child", *args]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_child_env())
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        abandon(proc)  # a trial stuck in the driver survives SIGKILL: never wait for it without a limit
        return {"outcome": "timeout", "detail": f"no result within {timeout:g} s", "wall": time.perf_counter() - t0}
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            out = json.loads(line[len(RESULT_PREFIX):])
            out["wall"] = time.perf_counter() - t0
            return out
    tail = (stderr or stdout).strip().splitlines()[-1:] or [f"exit status {proc.returncode}"]
    return {"outcome": "error", "detail": f"trial process died: {tail[0][:300]}", "wall": time.perf_counter() - t0}


def _cap_args(memory_limit: int | None, fraction: float | None, device: str) -> list[str]:
    args = ["--device", device]
    if memory_limit is not None:
        args += ["--memory-limit", str(memory_limit)]
    elif fraction is not None:
        args += ["--fraction", repr(fraction)]
    return args


def device_info(workload: str, memory_limit: int | None, fraction: float | None, device: str,
                timeout: float = 120) -> dict[str, Any]:
    info = run_child([workload, "--info", *_cap_args(memory_limit, fraction, device)], timeout)
    if info["outcome"] == "nogpu":
        raise NoGpuError(f"no CUDA GPU ({info.get('detail')}): {NO_GPU_HINT}")
    if info["outcome"] == "badlimit":
        raise UsageError(info["detail"])
    if info["outcome"] == "error":
        raise InputError(str(info.get("detail")))
    if info["outcome"] != "ok":
        raise InputError(f"{workload}: cannot read the GPU: {info.get('detail')}")
    return info


def estimator_prior(workload_path: str, limit: int, gpu: str | None) -> tuple[LinearFit | None, str]:
    """The estimator's predicted line, or None and why (it is optional: another module owns it)."""
    try:
        from oomdoctor.estimate.estimator import estimate  # type: ignore[import-not-found]
    except ImportError:
        return None, "estimator not installed: measured two small batches instead"
    try:
        wl = load_workload(workload_path)
        lo, hi = 8, 64
        key = _gpu_key(gpu)
        e_lo = estimate(wl, lo, memory_limit=limit, gpu=key)
        e_hi = estimate(wl, hi, memory_limit=limit, gpu=key)
        slope = (e_hi.peak_reserved_bytes - e_lo.peak_reserved_bytes) / (hi - lo)
        if slope <= 0:
            return None, "estimator predicted no growth with the batch: measured instead"
        return LinearFit(e_hi.peak_reserved_bytes - slope * hi, slope, "estimator"), "started from the estimator"
    except Exception as exc:  # noqa: BLE001 - a failing estimate must not stop the measured search
        return None, f"estimator failed ({type(exc).__name__}: {exc}): measured instead"


def _gpu_key(device_name: str | None) -> str | None:
    """The estimator's GPU key for a CUDA device name ("NVIDIA H100 80GB HBM3" -> "h100"), or None."""
    if not device_name:
        return None
    from oomdoctor.errors import UsageError
    from oomdoctor.knowledge.gpus import get_gpu

    try:  # the name CUDA gives is NVML's ("NVIDIA A100 80GB PCIe"), which get_gpu reads
        return get_gpu(device_name).key
    except UsageError:  # a GPU the table lacks, or a MIG slice: the search measures from scratch
        return None


def find_max_batch(workload: str, *, memory_limit: int | None = None, fraction: float | None = None,
                   margin: float = 0.05, min_batch: int = 1, max_batch: int = 8192, device: str = "cuda:0",
                   trial_timeout: float = 300, use_estimator: bool = True, steps: int = 3,
                   on_trial: Callable[[Trial], None] | None = None,
                   on_info: Callable[[dict[str, Any]], None] | None = None,
                   dim: str = "batch", batch: int = 1, max_trials: int = 8) -> MaxBatchRun:
    """The largest batch (dim "batch"), or the longest sequence at batch `batch` (dim "seq"), that runs.

    For "seq", `min_batch`/`max_batch` bound the sequence length and the workload's build() must take
    `seq_len` (docs/contracts.md §6).
    """
    if not Path(workload).is_file():
        from oomdoctor.workload.load import workload_missing

        raise InputError(workload_missing(workload))
    if dim not in ("batch", "seq"):
        raise UsageError(f"--dim must be batch or seq, not {dim!r}")
    if dim == "seq":
        if batch < 1:
            raise UsageError("--batch must be >= 1")
        if not load_workload(workload).accepts_seq_len():
            raise InputError(f"{workload}: build() takes no seq_len argument: define build(batch_size, "
                             "seq_len=DEFAULT) to search the sequence length (docs/contracts.md §6)")
        use_estimator = False
    t0 = time.perf_counter()
    info = device_info(workload, memory_limit, fraction, device)
    if on_info:
        on_info(info)
    # Without a cap the usable memory is what was free once the context existed, not the total.
    limit = int(info["limit_bytes"])
    notes = []
    if memory_limit is None and fraction is None and info.get("free_bytes"):
        limit = min(limit, int(info["free_bytes"]))
        notes.append("no cap given: the limit is the memory free after the CUDA context was created")
    prior, why = (None, "estimator not used") if not use_estimator else estimator_prior(workload, limit, info.get("gpu"))
    notes.append(why)
    cap = _cap_args(memory_limit if memory_limit is not None else (limit if fraction is None else None),
                    fraction, device)

    def probe(size: int) -> ProbeResult:
        args = ["--batch", str(size)] if dim == "batch" else ["--batch", str(batch), "--seq", str(size)]
        out = run_child([workload, *args, "--steps", str(steps), *cap], trial_timeout)
        what = f"batch {size}" if dim == "batch" else f"sequence length {size}"
        if out["outcome"] == "error":
            raise InputError(f"{workload}{out.get('line') or ''}: the trial at {what} failed: {out.get('detail')}")
        if out["outcome"] == "nogpu":
            raise NoGpuError(f"no CUDA GPU ({out.get('detail')}): {NO_GPU_HINT}")
        return probe_result(out, dim)

    result = search(probe, limit, margin=margin, min_batch=min_batch, max_batch=max_batch, prior=prior,
                    on_trial=on_trial, max_trials=max_trials)
    return MaxBatchRun(workload, device, result, info.get("gpu"), info.get("torch"), info.get("total_bytes"),
                       info.get("free_bytes"), time.perf_counter() - t0, notes, dim,
                       batch if dim == "seq" else None)


def probe_result(out: dict[str, Any], dim: str = "batch") -> ProbeResult:
    """A trial child's JSON line as the search's ProbeResult (throughput in samples/s, tokens/s for seq)."""
    return ProbeResult(outcome=out["outcome"], peak_bytes=out.get("peak_reserved_bytes"),
                       static_bytes=out.get("static_bytes"), grad_bytes=out.get("grad_bytes"),
                       seconds=float(out.get("wall", 0.0)), detail=out.get("detail", ""),
                       fb_peak_bytes=out.get("fb_peak_bytes"),
                       allocated_peak_bytes=out.get("peak_allocated_bytes"),
                       throughput=out.get("tokens_per_s" if dim == "seq" else "samples_per_s"),
                       alloc_retries=out.get("alloc_retries"), survived_ooms=out.get("survived_ooms"))
