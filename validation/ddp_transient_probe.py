"""Where DDP's step-2 transient comes from (session 22, written after the four-rank run found it; not a held-out check).

validation/parallel_traced.py measured StableLM-2-1.6B under DDP on four H200s: in step 2, ranks 1 and 3 allocated one
gradient copy more than ranks 0 and 2 (and than step 3); a 2-rank Phi-1.5 run had the same on its rank 1. The
estimator traces rank 0 and skips DDP's bucket rebuild (it reads values), so it misses this. Before any fix, this
probe asks what the transient is, on the same configuration, each variant in a fresh `torchrun`:
- default (twice: is it the same ranks each time?);
- `gradient_as_bucket_view=True` (gradients are views of the buckets: no separate copy);
- `static_graph=True` (DDP never rebuilds its buckets);
- one rank per step timeline: the allocated memory at the start of step 2's forward, after it, and at its peak.

    python3 validation/ddp_transient_probe.py --out $OUT            # on a machine of 4 GPUs (runs torchrun)
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

SHAPE, BATCH, FIELDS = "stablelm-2-1.6b", 4, {"task": "train", "seq_len": 1024}
VARIANTS = {"default": {}, "default-again": {}, "bucket-view": {"gradient_as_bucket_view": True},
            "static-graph": {"static_graph": True}}


def one(variant: str, out: Path) -> None:
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
    torch.manual_seed(0)
    build = make_build(zoo._config(SHAPE), zoo._recipe(FIELDS))
    with torch.device("cuda"):
        raw = build(BATCH)
    raw["model"] = DDP(raw["model"], device_ids=[rank], **VARIANTS[variant])
    torch.cuda.empty_cache()
    runner = StepRunner(WorkloadSpec.from_dict(raw, variant), "cuda")
    g = 2 ** 30
    steps = []
    for _ in range(3):
        torch.cuda.synchronize()
        start = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        runner.step()
        torch.cuda.synchronize()
        steps.append({"start_gib": round(start / g, 3), "end_gib": round(torch.cuda.memory_allocated() / g, 3),
                      "peak_alloc_gib": round(torch.cuda.max_memory_allocated() / g, 3),
                      "peak_reserved_gib": round(torch.cuda.max_memory_reserved() / g, 3)})
    grads = sum(p.numel() * p.element_size() for p in raw["model"].parameters() if p.requires_grad)
    row = {"variant": variant, "rank": rank, "grad_gib": round(grads / g, 3), "steps": steps}
    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, row)
    if rank == 0:
        with (out / "ddp_transient_probe.jsonl").open("a") as f:
            f.write(json.dumps({"variant": variant, "torch": torch.__version__, "ranks": gathered}) + "\n")
    dist.destroy_process_group()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--one")
    ap.add_argument("--nproc", type=int, default=4)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.one:
        one(a.one, out)
        return 0
    t0 = time.time()
    for variant in VARIANTS:
        cmd = ["torchrun", "--nproc_per_node", str(a.nproc), str(Path(__file__).resolve()), "--one", variant,
               "--out", str(out)]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=dict(os.environ))
        print(variant, "rc", r.returncode, f"{time.time() - t0:.0f}s", flush=True)
        if r.returncode:
            print(r.stdout[-1500:], r.stderr[-3000:], flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
