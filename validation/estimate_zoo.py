"""Ground truth for `oomdoctor estimate`: measure the zoo for real on a GPU.

Every configuration runs in a FRESH child process (clean peaks, clean context): build the workload on
the CPU exactly as a user script would, move model and batch to the GPU, run three steps with the
shared StepRunner (the same step the estimator traces), then record torch.cuda.max_memory_reserved /
max_memory_allocated, memory_stats, NVML's per-process figure and the allocator's own trace (sizes
only) for offline comparison. Also: the CUDA context (lazy and eager module loading), the cuBLAS and
cuDNN workspaces, and the true max batch under set_per_process_memory_fraction by bisection.

    PYTHONPATH=src python3 validation/estimate_zoo.py --out results/ [--deadline 330]
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WL = HERE / "workloads"

ZOO = [  # (workload file stem, batch size)
    ("mlp_sgd_fp32", 256), ("mlp_sgd_fp32", 4096), ("mlp_adam_fp32", 512), ("mlp_adamw_bf16", 2048),
    ("mlp_sgd_fp16", 4096),
    ("resnet18_sgd_fp32", 64), ("resnet18_sgd_fp32", 256), ("resnet18_adam_fp16", 128),
    ("resnet50_sgdm_fp32", 32), ("resnet50_sgdm_fp32", 96), ("resnet50_adam_bf16", 64), ("resnet50_infer", 128),
    ("mobilenetv3_adam_fp32", 64), ("efficientnet_b0_adamw_bf16", 32),
    ("vit_b16_adamw_fp32", 16), ("vit_b16_sgd_bf16", 32), ("vit_b16_infer", 64),
    ("bert_adamw_fp32", 16), ("bert_adamw_fp32", 64), ("bert_adamw_bf16", 32), ("bert_ckpt_fp32", 32),
    ("gpt2_adamw_fp32", 4), ("gpt2_adamw_bf16", 8), ("gpt2_ckpt_bf16", 8), ("gpt2_infer", 16),
]
EXTRA = [  # measured and traced for diagnosis, reported apart from the zoo (the MLP's max-batch miss)
    ("mlp_adam_fp32", 14208), ("mlp_adam_fp32", 16384),
]
MAXBATCH = [  # (workload, memory limit in GiB, first guess)
    ("resnet18_sgd_fp32", 4, 128), ("resnet50_adam_bf16", 8, 128), ("bert_adamw_fp32", 8, 128),
    ("gpt2_adamw_bf16", 12, 16), ("mlp_adam_fp32", 2, 8192),
    ("resnet18_adam_fp16", 4, 256), ("resnet50_sgdm_fp32", 8, 64),
]
ACTIONS = {"alloc": 0, "free_requested": 1, "free_completed": 2, "segment_alloc": 3, "segment_free": 4,
           "oom": 5, "segment_map": 6, "segment_unmap": 7, "snapshot": 8}


# ----------------------------------------------------------------------------------------- child side
def _nvml_process_used() -> dict:
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        used = None
        for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
            if p.pid == os.getpid():
                used = int(p.usedGpuMemory) if p.usedGpuMemory is not None else None
        info = pynvml.nvmlDeviceGetMemoryInfo(h)
        return {"nvml_process_used": used, "nvml_device_used": int(info.used), "nvml_device_total": int(info.total)}
    except Exception as exc:  # noqa: BLE001
        return {"nvml_error": repr(exc)}


def _to_cuda(obj):
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.to("cuda")
    if isinstance(obj, dict):
        return {k: _to_cuda(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_cuda(v) for v in obj)
    return obj


def _load_spec(stem: str, batch: int):
    import dataclasses

    from oomdoctor.workload.load import load_workload

    spec = load_workload(WL / f"{stem}.py").spec(batch)
    spec.model.to("cuda")
    return dataclasses.replace(spec, inputs=_to_cuda(spec.inputs), target=_to_cuda(spec.target))


def child_measure(stem: str, batch: int, record: bool) -> dict:
    import torch

    from oomdoctor.workload.step import StepRunner

    torch.cuda.init()
    if record:
        torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                                 max_entries=400_000)
    t0 = time.time()
    spec = _load_spec(stem, batch)
    after_load = {"allocated": torch.cuda.memory_allocated(), "reserved": torch.cuda.memory_reserved()}
    runner = StepRunner(spec, "cuda")
    per_step = []
    for _ in range(3):
        torch.cuda.reset_peak_memory_stats()
        runner.step()
        torch.cuda.synchronize()
        per_step.append({"peak_allocated": torch.cuda.max_memory_allocated(),
                         "peak_reserved": torch.cuda.max_memory_reserved()})
    stats = torch.cuda.memory_stats()
    out = {
        "workload": stem, "batch_size": batch, "seconds": round(time.time() - t0, 2),
        "after_load": after_load, "per_step": per_step,
        "peak_reserved": max([after_load["reserved"]] + [s["peak_reserved"] for s in per_step]),
        "peak_allocated": max([after_load["allocated"]] + [s["peak_allocated"] for s in per_step]),
        "end_allocated": torch.cuda.memory_allocated(), "end_reserved": torch.cuda.memory_reserved(),
        "stats": {k: v for k, v in stats.items() if k.startswith(("num_", "segment.all", "oversize"))
                  or k in ("requested_bytes.all.peak", "active_bytes.all.peak")},
    }
    out.update(_nvml_process_used())
    if record:
        snap = torch.cuda.memory._snapshot()
        trace = []
        for dev in snap.get("device_traces", [])[:1]:
            for e in dev:
                trace.append([ACTIONS.get(e["action"], 9), int(e["size"]), int(e["addr"]), int(e.get("stream", 0))])
        torch.cuda.memory._record_memory_history(enabled=None)
        out["trace"] = trace
    return out


def child_context() -> dict:
    """Context size (NVML per process) and the workspaces the first GEMM / conv take from the allocator."""
    import torch

    out = {"CUDA_MODULE_LOADING": os.environ.get("CUDA_MODULE_LOADING", "<unset>")}
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    out["after_init"] = {**_nvml_process_used(), "allocated": torch.cuda.memory_allocated(),
                         "reserved": torch.cuda.memory_reserved()}
    a = torch.randn(1024, 1024, device="cuda")
    before = torch.cuda.memory_allocated()
    c = a @ a
    torch.cuda.synchronize()
    out["cublas_workspace_bytes"] = torch.cuda.memory_allocated() - before - c.untyped_storage().nbytes()
    out["after_matmul"] = {**_nvml_process_used(), "allocated": torch.cuda.memory_allocated(),
                           "reserved": torch.cuda.memory_reserved()}
    w = torch.randn(1024, 1024, device="cuda", requires_grad=True)
    b = torch.randn(1024, device="cuda", requires_grad=True)
    before = torch.cuda.memory_allocated()
    y = torch.nn.functional.linear(a, w, b)
    torch.cuda.synchronize()
    out["addmm_extra_bytes"] = torch.cuda.memory_allocated() - before - y.untyped_storage().nbytes()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        before = torch.cuda.memory_allocated()
        z = torch.nn.functional.linear(a, w, b)
        torch.cuda.synchronize()
        out["bf16_linear_extra_bytes"] = torch.cuda.memory_allocated() - before - z.untyped_storage().nbytes()
    del z
    conv = torch.nn.Conv2d(64, 64, 3, padding=1).cuda()
    x = torch.randn(32, 64, 56, 56, device="cuda")
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    yc = conv(x)
    torch.cuda.synchronize()
    out["conv_fwd_peak_extra"] = torch.cuda.max_memory_allocated() - before - yc.untyped_storage().nbytes()
    out["conv_persistent_extra"] = torch.cuda.memory_allocated() - before - yc.untyped_storage().nbytes()
    yc.sum().backward()
    torch.cuda.synchronize()
    out["after_conv"] = {**_nvml_process_used(), "allocated": torch.cuda.memory_allocated(),
                         "reserved": torch.cuda.memory_reserved()}
    out["versions"] = {"torch": torch.__version__, "cuda": torch.version.cuda,
                       "cudnn": torch.backends.cudnn.version(), "gpu": torch.cuda.get_device_name(0),
                       "total_memory": torch.cuda.get_device_properties(0).total_memory,
                       "capability": list(torch.cuda.get_device_capability(0))}
    try:
        import pynvml

        pynvml.nvmlInit()
        out["versions"]["driver"] = pynvml.nvmlSystemGetDriverVersion()
    except Exception as exc:  # noqa: BLE001
        out["versions"]["driver_error"] = repr(exc)
    return out


def _trial(stem: str, batch: int) -> bool:
    import torch

    from oomdoctor.workload.step import StepRunner

    ok = True
    try:
        spec = _load_spec(stem, batch)
        runner = StepRunner(spec, "cuda")
        for _ in range(3):
            runner.step()
        torch.cuda.synchronize()
    except torch.OutOfMemoryError:
        ok = False
    spec = runner = None  # noqa: F841 - drop every reference before clearing the cache
    gc.collect()
    torch.cuda.empty_cache()
    return ok


def child_maxbatch(stem: str, limit_gib: float, guess: int) -> dict:
    import torch

    total = torch.cuda.get_device_properties(0).total_memory
    limit = int(limit_gib * 2**30)
    torch.cuda.set_per_process_memory_fraction(limit / total)
    trials = {}

    def fits(b: int) -> bool:
        if b not in trials:
            trials[b] = _trial(stem, b)
        return trials[b]

    if fits(guess):  # exponential phase: double until the first failure
        lo, hi = guess, None
        while hi is None:
            if fits(lo * 2):
                lo *= 2
            else:
                hi = lo * 2
    else:  # halve until the first success
        lo, hi = 0, guess
        while hi > 1:
            if fits(hi // 2):
                lo = hi // 2
                break
            hi //= 2
    while hi - lo > 1:  # bisection
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return {"workload": stem, "memory_limit_bytes": limit, "fraction": limit / total, "max_batch_size": lo,
            "trials": {str(k): v for k, v in sorted(trials.items())}}


# ---------------------------------------------------------------------------------------- parent side
def _spawn(args: list[str], env: dict | None = None, timeout: float = 120) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", *args]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout}s", "args": args}
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {"error": f"rc={p.returncode}", "stderr": p.stderr[-3000:], "args": args}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", nargs="*")
    ap.add_argument("--out", default="validation/results")
    ap.add_argument("--deadline", type=float, default=330.0)
    ap.add_argument("--no-trace", action="store_true")
    ap.add_argument("--only", default="", help="comma-separated workload@batch / workload keys to run")
    ap.add_argument("--jobs", type=int, default=1, help="zoo children run this many at a time")
    ap.add_argument("--skip-context", action="store_true")
    a = ap.parse_args()
    if a.child is not None:
        kind, *rest = a.child
        if kind == "measure":
            res = child_measure(rest[0], int(rest[1]), rest[2] == "1")
        elif kind == "context":
            res = child_context()
        else:
            res = child_maxbatch(rest[0], float(rest[1]), int(rest[2]))
        print(json.dumps(res))
        return 0

    start = time.time()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict = {"machine": {}, "context": [], "zoo": [], "max_batch": []}
    traces: dict = {}

    def save() -> None:
        (out / "estimate_zoo.json").write_text(json.dumps(results, indent=1))
        with gzip.open(out / "estimate_zoo_traces.json.gz", "wt") as f:
            json.dump(traces, f)

    only = {x for x in a.only.split(",") if x}
    zoo = [(s, b) for s, b in ZOO if not only or f"{s}@{b}" in only]
    extra = [(s, b) for s, b in EXTRA if not only or f"{s}@{b}" in only or "extra" in only]
    maxb = [m for m in MAXBATCH if not only or f"max:{m[0]}" in only]
    results["machine"]["baseline"] = _spawn_free_baseline()
    results["extra"] = []
    from concurrent.futures import ThreadPoolExecutor

    # one pool for everything: each child is its own process with its own allocator, so peaks and
    # NVML per-process figures do not depend on what runs beside it (only the seconds do)
    def ctx(loading):
        return _spawn(["context"], {"CUDA_MODULE_LOADING": loading}, 120)

    def mb(m):
        stem, gib, guess = m
        left = a.deadline - (time.time() - start)
        if left < 25:
            return {"workload": stem, "error": "skipped: deadline"}
        return _spawn(["maxbatch", stem, str(gib), str(guess)], timeout=min(300, left))

    def one(cfg):
        stem, batch = cfg
        if time.time() - start > a.deadline * 0.8:
            return {"workload": stem, "batch_size": batch, "error": "skipped: deadline"}
        return _spawn(["measure", stem, str(batch), "0" if a.no_trace else "1"], timeout=180)

    with ThreadPoolExecutor(max(1, a.jobs)) as pool:
        f_mb = [pool.submit(mb, m) for m in maxb]
        f_ctx = [pool.submit(ctx, x) for x in (() if a.skip_context else ("LAZY", "EAGER"))]
        f_zoo = [pool.submit(one, c) for c in zoo + extra]
        for f in f_ctx:
            results["context"].append(f.result())
        for (stem, batch), f in zip(zoo + extra, f_zoo):
            r = f.result()
            trace = r.pop("trace", None)
            if trace is not None:
                traces[f"{stem}@{batch}"] = trace
            results["extra" if (stem, batch) in extra else "zoo"].append(r)
            print(f"{stem}@{batch}: reserved {r.get('peak_reserved')} allocated {r.get('peak_allocated')} "
                  f"nvml {r.get('nvml_process_used')} {r.get('error', '')} t={time.time() - start:.0f}s", flush=True)
            save()
        for f in f_mb:
            r = f.result()
            results["max_batch"].append(r)
            print("maxbatch", r.get("workload"), r.get("max_batch_size"), r.get("error", ""),
                  f"t={time.time() - start:.0f}s", flush=True)
            save()
    save()
    return 0


def _spawn_free_baseline() -> dict:
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        info = pynvml.nvmlDeviceGetMemoryInfo(h)
        return {"nvml_device_used_idle": int(info.used), "nvml_device_total": int(info.total),
                "name": pynvml.nvmlDeviceGetName(h), "driver": pynvml.nvmlSystemGetDriverVersion()}
    except Exception as exc:  # noqa: BLE001
        return {"error": repr(exc)}


if __name__ == "__main__":
    raise SystemExit(main())
