"""Per-rank memory of DDP and FSDP2 on two GPUs against `estimate --model --parallel` (issue 18).

Measure (torchrun, 2 ranks): each configuration is built as estimate/hf.make_build writes it, on the
GPU (build leftovers emptied, as in estimate_llm_zoo.py), wrapped (DDP with PyTorch's defaults; FSDP2
`fully_shard` on every decoder layer, then the root), and run for three StepRunner steps; the peak
reserved of each step after reset_peak_memory_stats(), per rank (docs/contracts.md section 6).
Estimate (CPU, no GPU): hf.estimate_model + parallel.per_rank for the same configurations, as the CLI
does. DeepSpeed ZeRO is not on the machine image, so zero2/zero3 are not measured here.

    torchrun --nproc_per_node 2 validation/parallel_per_rank.py --out $OUT          # measure
    PYTHONPATH=src python validation/parallel_per_rank.py --estimate --out $OUT     # estimate
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))

# (name, shape, strategy, batch per rank, recipe fields)
CONFIGS = [
    ("tinyllama-train-ddp", "tinyllama-1.1b", "ddp", 4, {"task": "train", "seq_len": 1024}),
    ("tinyllama-train-fsdp", "tinyllama-1.1b", "fsdp", 4, {"task": "train", "seq_len": 1024}),
    ("qwen1.5b-train-fsdp", "qwen2.5-1.5b", "fsdp", 4, {"task": "train", "seq_len": 1024}),
    ("llama1b-lora-ddp", "llama3.2-1b", "ddp", 8, {"task": "lora", "seq_len": 1024}),
]
RANKS = 2


def measure(out: Path) -> None:
    import estimate_llm_zoo as zoo
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from oomdoctor.estimate.hf import make_build
    from oomdoctor.workload.load import WorkloadSpec
    from oomdoctor.workload.step import StepRunner

    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(rank)
    rows = []
    for name, shape, strategy, batch, fields in CONFIGS:
        torch.manual_seed(0)
        torch.cuda.empty_cache()
        build = make_build(zoo._config(shape), zoo._recipe(fields))
        with torch.device("cuda"):
            raw = build(batch)
        model = raw["model"]
        if strategy == "ddp":
            raw["model"] = DDP(model, device_ids=[rank])
        else:
            from torch.distributed.fsdp import fully_shard
            for layer in model.model.layers:
                fully_shard(layer)
            fully_shard(model)
        torch.cuda.empty_cache()
        spec = WorkloadSpec.from_dict(raw, name)
        runner = StepRunner(spec, "cuda")
        steps = zoo.measure_steps(torch, runner)
        row = {"name": name, "rank": rank, "steps": steps, "measured_reserved": max(s["peak_reserved"] for s in steps)}
        gathered = [None] * RANKS
        dist.all_gather_object(gathered, row)
        if rank == 0:
            rows.append({"name": name, "ranks": gathered})
            print(name, [g["measured_reserved"] for g in gathered], flush=True)
        del runner, spec, raw, model
        import gc
        gc.collect()
        dist.barrier()
    if rank == 0:
        (out / "parallel_measured.json").write_text(json.dumps({"torch": torch.__version__, "rows": rows}, indent=1))
    dist.destroy_process_group()


def estimate_one(cfg: tuple) -> dict:
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    import torch

    torch.set_num_threads(2)
    import estimate_llm_zoo as zoo

    from oomdoctor.estimate.hf import estimate_model
    from oomdoctor.estimate.parallel import per_rank

    name, shape, strategy, batch, fields = cfg
    est = estimate_model(zoo._config(shape), zoo._recipe(fields), batch, gpu="h100")
    r = per_rank(est.breakdown, est.peak_reserved_bytes, strategy, RANKS,
                 block_bytes=int(est.details.get("block_bytes", 0)), phases=est.details.get("phases"))
    return {"name": name, "single_gpu_reserved": est.peak_reserved_bytes, "per_rank_reserved": r["peak_reserved_bytes"],
            "breakdown": r["breakdown"], "peak_phase": r.get("peak_phase")}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--estimate", action="store_true")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.estimate:
        with ProcessPoolExecutor(max_workers=len(CONFIGS)) as pool:
            rows = list(pool.map(estimate_one, CONFIGS))
        (out / "parallel_estimated.json").write_text(json.dumps(rows, indent=1))
        for r in rows:
            print(r["name"], r["per_rank_reserved"], flush=True)
        return 0
    measure(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
