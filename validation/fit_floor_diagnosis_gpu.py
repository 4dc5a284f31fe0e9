"""Validate `fit`'s floor diagnosis on a GPU with REAL out-of-memory errors (written for validation).

`fit.AutoMicroBatch` raises `FitOutOfMemoryError` when even the floor micro-batch runs out of memory; its
`.diagnosis` is explain's reading of the real message (the most likely cause, evidence, fixes, and since
session 7 a close runner-up). Two real floor OOMs, neither seen while writing explain's rules:

- capped: `set_per_process_memory_fraction` below what one floor micro-batch needs (the message then
  carries PyTorch's "X allowed" cap);
- ballast: no cap, the process itself holds most of the GPU in a tensor (a job at its own edge).

For each: the real message, the diagnosis, whether it names a runner-up, and the memory this process
still holds after the error is handled (must be back to what it held before the step: fit keeps nothing).

    python validation/fit_floor_diagnosis_gpu.py --out fit_floor.json
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

import torch  # noqa: E402

from oomdoctor import fit  # noqa: E402

WIDTH, TOKENS, BATCH = 4096, 512, 64


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(WIDTH, 4 * WIDTH), torch.nn.GELU(),
                               torch.nn.Linear(4 * WIDTH, WIDTH)).cuda()


def _step(model: torch.nn.Module, opt: torch.optim.Optimizer, floor: int) -> dict:
    batch = torch.randn(BATCH, TOKENS, WIDTH, device="cuda")
    held_before = torch.cuda.memory_allocated()
    out: dict = {"held_before_step_bytes": held_before}
    try:
        fit.AutoMicroBatch(opt, micro_batch=floor, min_micro_batch=floor).step(
            lambda mb: model(mb).float().pow(2).mean(), batch)
        out["raised"] = False
    except fit.FitOutOfMemoryError as exc:
        out.update(raised=True, phase=exc.phase, micro_batch=exc.micro_batch, oom_message=exc.oom_message,
                   diagnosis=exc.diagnosis, names_runner_up=bool(exc.diagnosis and "; or: " in exc.diagnosis))
    del batch
    opt.zero_grad(set_to_none=True)
    gc.collect()
    torch.cuda.empty_cache()
    out["held_after_bytes"] = torch.cuda.memory_allocated()
    # cuBLAS keeps its per-handle workspace in the caching allocator once a matmul ran (PyTorch's own
    # cache, freed by torch._C._cuda_clearCublasWorkspaces); what remains after clearing it is what the
    # step kept
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        clear()
        torch.cuda.empty_cache()
    out["held_after_cublas_cleared_bytes"] = torch.cuda.memory_allocated()
    out["kept_by_step_bytes"] = out["held_after_cublas_cleared_bytes"] - (held_before - BATCH * TOKENS * WIDTH * 4)
    return out


def control() -> dict:
    """The same forward and backward at the floor micro-batch without fit and without an OOM: what a
    plain step leaves in the allocator (the cuBLAS workspace), to compare with."""
    model = _model()
    batch = torch.randn(BATCH, TOKENS, WIDTH, device="cuda")
    held_before = torch.cuda.memory_allocated()
    model(batch[:8]).float().pow(2).mean().backward()
    for p in model.parameters():
        p.grad = None
    del batch
    gc.collect()
    torch.cuda.empty_cache()
    after = torch.cuda.memory_allocated()
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        clear()
        torch.cuda.empty_cache()
    return {"scenario": "control (no fit, no OOM)", "held_before_step_bytes": held_before, "held_after_bytes": after,
            "held_after_cublas_cleared_bytes": torch.cuda.memory_allocated(),
            "kept_by_step_bytes": torch.cuda.memory_allocated() - (held_before - BATCH * TOKENS * WIDTH * 4)}


def capped() -> dict:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    total = torch.cuda.get_device_properties(0).total_memory
    base = torch.cuda.memory_allocated()
    # the model plus the batch plus ~1 GiB: one micro-batch of 8 x 512 x 16384 activations does not fit
    frac = (base + BATCH * TOKENS * WIDTH * 4 + (1 << 30)) / total
    torch.cuda.set_per_process_memory_fraction(frac)
    try:
        return {"scenario": "capped", "fraction": round(frac, 4), **_step(model, opt, floor=8)}
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)


def ballast() -> dict:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    free, _ = torch.cuda.mem_get_info()
    keep = free - BATCH * TOKENS * WIDTH * 4 - (1 << 30)
    hold = torch.empty(keep, dtype=torch.uint8, device="cuda")  # this job's own memory, most of the GPU
    try:
        return {"scenario": "ballast", "ballast_bytes": keep, **_step(model, opt, floor=8)}
    finally:
        del hold


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    res = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0), "runs": []}
    for run in (control, capped, ballast):
        r = run()
        gc.collect()
        torch.cuda.empty_cache()
        res["runs"].append(r)
        print(json.dumps({k: v for k, v in r.items() if k != "oom_message"}, indent=1))
        print("message:", r.get("oom_message", "")[:400])
    Path(a.out).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
