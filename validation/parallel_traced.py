"""Per-rank memory of DDP and FSDP2, traced over a fake process group, against two (and, HELDOUT4, four) real GPUs.

Written on 2026-11-26 after the tracer (estimate/parallel_trace.py) was written and tuned on the four
configurations of validation/parallel_per_rank.py (measured on 2026-11-25; those are `dev` here). The
HELDOUT list below was written before any of it was measured, and the estimator was frozen (commit
named in docs/validation/estimate.md) before the one run that measured it.

Measure: every configuration in a fresh process pair (`torchrun --nproc_per_node 2 ... --one NAME`), so
nothing of an earlier one is left in the allocator: built as estimate/hf.make_build writes it on the
GPU, wrapped (DDP with PyTorch's defaults; FSDP2 `fully_shard` on every module whose class is in the
model's `_no_split_modules`, then the root; HSDP: a (replicate, shard) mesh), build leftovers emptied,
three StepRunner steps; the peak reserved of each step after reset_peak_memory_stats() on each rank
(docs/contracts.md section 6); the memory allocated before the build is recorded (0 expected).
Estimate (CPU): hf.estimate_model(parallel=Plan(...)) as `estimate --model --parallel` does.

    python validation/parallel_traced.py --measure --out $OUT      # on a 2-GPU machine (runs torchrun)
    (the HELDOUT4 configurations run on four ranks: `--only r4-...` on a 4-GPU machine)
    PYTHONPATH=src python validation/parallel_traced.py --estimate --out $OUT
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))

RANKS = 2
# (name, shape of estimate_llm_zoo.SHAPES, strategy, per-rank batch, recipe fields, shard size)
DEV = [
    ("tinyllama-train-ddp", "tinyllama-1.1b", "ddp", 4, {"task": "train", "seq_len": 1024}, None),
    ("tinyllama-train-fsdp", "tinyllama-1.1b", "fsdp", 4, {"task": "train", "seq_len": 1024}, None),
    ("qwen1.5b-train-fsdp", "qwen2.5-1.5b", "fsdp", 4, {"task": "train", "seq_len": 1024}, None),
    ("llama1b-lora-ddp", "llama3.2-1b", "ddp", 8, {"task": "lora", "seq_len": 1024}, None),
]
HELDOUT = [
    ("smollm2-train-ddp", "smollm2-1.7b", "ddp", 4, {"task": "train", "seq_len": 1024}, None),
    ("smollm2-train-fsdp", "smollm2-1.7b", "fsdp", 4, {"task": "train", "seq_len": 1024}, None),
    ("qwen3-1.7b-fsdp-ckpt", "qwen3-1.7b", "fsdp", 8,
     {"task": "train", "seq_len": 2048, "gradient_checkpointing": True}, None),
    ("llama3b-train-fsdp", "llama3.2-3b", "fsdp", 2, {"task": "train", "seq_len": 1024}, None),
    ("gemma2-2b-train-fsdp", "gemma2-2b", "fsdp", 2, {"task": "train", "seq_len": 1024}, None),
    ("qwen1.5b-lora-ddp", "qwen2.5-1.5b", "ddp", 8, {"task": "lora", "seq_len": 1024}, None),
    ("llama1b-lora-fsdp", "llama3.2-1b", "fsdp", 8, {"task": "lora", "seq_len": 1024}, None),
    ("pythia-train-hsdp", "pythia-1.4b", "fsdp-hybrid", 4, {"task": "train", "seq_len": 1024}, 1),
    ("phi1.5-train-ddp-ckpt", "phi-1.5", "ddp", 8,
     {"task": "train", "seq_len": 2048, "gradient_checkpointing": True}, None),
]
# Four ranks (session 22, 2026-11-28): written before any four-rank run, the estimator frozen at the commit that adds
# them (docs/validation/estimate.md); HSDP here shards over 2 of the 4 ranks (2 replicas x 2 shards).
HELDOUT4 = [
    ("r4-qwen2.5-3b-train-fsdp", "qwen2.5-3b", "fsdp", 4, {"task": "train", "seq_len": 1024}, None),
    ("r4-llama3-8b-train-fsdp", "llama3-8b", "fsdp", 1, {"task": "train", "seq_len": 1024}, None),
    ("r4-stablelm-train-ddp", "stablelm-2-1.6b", "ddp", 4, {"task": "train", "seq_len": 1024}, None),
    ("r4-qwen3-4b-fsdp-ckpt", "qwen3-4b", "fsdp", 4,
     {"task": "train", "seq_len": 2048, "gradient_checkpointing": True}, None),
    ("r4-tinyllama-train-hsdp2", "tinyllama-1.1b", "fsdp-hybrid", 4, {"task": "train", "seq_len": 1024}, 2),
    ("r4-llama3b-lora-fsdp", "llama3.2-3b", "fsdp", 8, {"task": "lora", "seq_len": 1024}, None),
    ("r4-opt1.3b-train-ddp", "opt-1.3b", "ddp", 8, {"task": "train", "seq_len": 1024}, None),
]
# DDP's worst rank (session 22, after the HELDOUT4 run and ddp_transient_probe.py, which are dev for it): new DDP
# configurations, written before a worst-rank figure (traced peak + one gradient copy) was measured on any of them. It
# failed its check (docs/validation/estimate.md) and was taken out; its estimates file keeps the figure it gave.
HELDOUT4B = [
    ("r4b-qwen1.5b-train-ddp", "qwen2.5-1.5b", "ddp", 4, {"task": "train", "seq_len": 1024}, None),
    ("r4b-gpt2large-train-ddp", "gpt2-large", "ddp", 8, {"task": "train", "seq_len": 1024}, None),
    ("r4b-llama1b-train-ddp-2k", "llama3.2-1b", "ddp", 4, {"task": "train", "seq_len": 2048}, None),
    ("r4b-pythia-train-ddp-ckpt", "pythia-1.4b", "ddp", 8,
     {"task": "train", "seq_len": 2048, "gradient_checkpointing": True}, None),
    ("r4b-smollm2-lora-ddp", "smollm2-1.7b", "ddp", 8, {"task": "lora", "seq_len": 1024}, None),
]
# DDP's rank that holds its old buckets (session 22, estimate/parallel_trace._NoRebuild(held); every DDP run above and the
# probe are dev for it: on the three that had the transient it gave 28.80 / 35.47 / 39.73 GiB against 28.81 / 35.47 /
# 39.73 measured). New configurations, written and estimated before any run; each measured twice (the race).
HELDOUT4C = [
    ("r4c-qwen3-1.7b-train-ddp", "qwen3-1.7b", "ddp", 4, {"task": "train", "seq_len": 1024}, None),
    ("r4c-tinyllama-train-ddp-2k", "tinyllama-1.1b", "ddp", 4, {"task": "train", "seq_len": 2048}, None),
    ("r4c-phi1.5-train-ddp", "phi-1.5", "ddp", 8, {"task": "train", "seq_len": 1024}, None),
    ("r4c-gpt2medium-train-ddp", "gpt2-medium", "ddp", 16, {"task": "train", "seq_len": 1024}, None),
    ("r4c-llama1b-train-ddp-ckpt", "llama3.2-1b", "ddp", 8,
     {"task": "train", "seq_len": 2048, "gradient_checkpointing": True}, None),
]
ALL = DEV + HELDOUT + HELDOUT4 + HELDOUT4B + HELDOUT4C


def ranks_of(cfg: tuple) -> int:
    return 4 if cfg in HELDOUT4 + HELDOUT4B + HELDOUT4C else RANKS


def _find(name: str) -> tuple:
    return next(c for c in ALL if c[0] == name)


def measure_one(name: str, out: Path) -> None:
    """One configuration on this torchrun's ranks; rank 0 appends a JSON line to out/parallel_traced.jsonl."""
    import estimate_llm_zoo as zoo
    import torch
    import torch.distributed as dist

    from oomdoctor.estimate.hf import make_build
    from oomdoctor.workload.load import WorkloadSpec
    from oomdoctor.workload.step import StepRunner

    _, shape, strategy, batch, fields, shard = _find(name)
    ranks = ranks_of(_find(name))
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(rank)
    torch.manual_seed(0)
    before = torch.cuda.memory_allocated()
    build = make_build(zoo._config(shape), zoo._recipe(fields))
    with torch.device("cuda"):
        raw = build(batch)
    model = raw["model"]
    if strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        raw["model"] = DDP(model, device_ids=[rank])
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        if strategy == "fsdp-hybrid":
            mesh = init_device_mesh("cuda", (ranks // shard, shard), mesh_dim_names=("replicate", "shard"))
        else:
            mesh = init_device_mesh("cuda", (ranks,))
        blocks = set(getattr(model, "_no_split_modules", None) or ())
        for m in list(model.modules()):
            if m is not model and type(m).__name__ in blocks:
                fully_shard(m, mesh=mesh)
        fully_shard(model, mesh=mesh)
    torch.cuda.empty_cache()
    spec = WorkloadSpec.from_dict(raw, name)
    runner = StepRunner(spec, "cuda")
    steps = zoo.measure_steps(torch, runner)
    row = {"name": name, "rank": rank, "allocated_before_build": before, "steps": steps,
           "measured_reserved": max(s["peak_reserved"] for s in steps)}
    gathered: list = [None] * ranks
    dist.all_gather_object(gathered, row)
    if rank == 0:
        with (out / "parallel_traced.jsonl").open("a") as f:
            f.write(json.dumps({"name": name, "torch": torch.__version__, "ranks": gathered}) + "\n")
    dist.destroy_process_group()


def measure_all(out: Path, names: list[str], deadline: float) -> None:
    t0 = time.time()
    for name in names:
        if time.time() - t0 > deadline:
            print(f"deadline: {name} and later not run", flush=True)
            break
        cmd = ["torchrun", "--nproc_per_node", str(ranks_of(_find(name))), str(Path(__file__).resolve()), "--one", name,
               "--out", str(out)]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=dict(os.environ))
        print(name, "rc", r.returncode, f"{time.time() - t0:.0f}s", flush=True)
        if r.returncode:
            print(r.stdout[-1500:], r.stderr[-3000:], flush=True)


def estimate_one(cfg: tuple) -> dict:
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    import torch

    torch.set_num_threads(2)
    import estimate_llm_zoo as zoo

    from oomdoctor.estimate.hf import estimate_model, estimate_per_rank
    from oomdoctor.estimate.parallel_trace import Plan

    name, shape, strategy, batch, fields, shard = cfg
    t = time.time()
    est = estimate_model(zoo._config(shape), zoo._recipe(fields), batch, gpu="h100",
                         parallel=Plan(strategy, ranks_of(cfg), shard))
    worst = None
    if strategy == "ddp" and cfg in HELDOUT4C:  # the rank on which the bucket rebuild holds the old buckets
        worst = estimate_per_rank(zoo._config(shape), zoo._recipe(fields), batch, Plan(strategy, ranks_of(cfg), shard),
                                  gpu="h100")["worst_rank_reserved_bytes"]
    return {"name": name, "set": "dev" if cfg in DEV else "heldout", "ranks": ranks_of(cfg), "per_rank_reserved": est.peak_reserved_bytes,
            "worst_rank_reserved": worst,
            "peak_phase": est.peak_phase, "breakdown": est.breakdown, "seconds": round(time.time() - t, 1)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--estimate", action="store_true")
    ap.add_argument("--measure", action="store_true")
    ap.add_argument("--one")
    ap.add_argument("--only", help="comma-separated names")
    ap.add_argument("--deadline", type=float, default=540)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    # without --only: the two-rank sets (the four-rank ones need a 4-GPU machine and their own estimates file)
    names = a.only.split(",") if a.only else [c[0] for c in DEV + HELDOUT]
    if a.one:
        measure_one(a.one, out)
    elif a.estimate:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=2) as pool:
            rows = list(pool.map(estimate_one, [_find(n) for n in names]))
        (out / "parallel_traced_estimated.json").write_text(json.dumps(rows, indent=1))
        for r in rows:
            print(r["name"], r["per_rank_reserved"], r["peak_phase"], r["seconds"], flush=True)
    elif a.measure:
        measure_all(out, names, a.deadline)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
