"""Record DeepSpeed ZeRO's own allocation trace on the GPU (diagnosis for issue 18, dev configuration).

The ZeRO-2 emulation (estimate/parallel_trace.py) matches DeepSpeed's peak *allocated* memory but not
its peak *reserved* memory. This records what DeepSpeed really allocates (torch's allocator history:
every malloc and free with size, stream and the top source frames) over the three steps of one dev
configuration of validation/parallel_zero.py, so that the trace can be replayed offline through the
allocator model and compared with the emulation's, allocation by allocation.

    torchrun --nproc_per_node 2 validation/zero_alloc_trace.py --name tinyllama-zero2 --out $OUT
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))


def _frames(entry: dict, keep: int = 4) -> list[str]:
    out = []
    for f in entry.get("frames") or []:
        name = f.get("filename", "")
        if "deepspeed" in name or "torch/optim" in name or "transformers" in name or "oomdoctor" in name:
            out.append(f"{name.split('site-packages/')[-1]}:{f.get('line')}:{f.get('name')}")
        if len(out) >= keep:
            break
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", default="tinyllama-zero2")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    import deepspeed
    import estimate_llm_zoo as zoo
    import parallel_zero as PZ
    import torch
    import torch.distributed as dist

    from oomdoctor.estimate.hf import make_build

    _, shape, stage, batch, fields = next(c for c in PZ.ALL if c[0] == a.name)
    deepspeed.init_distributed("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(rank)
    torch.manual_seed(0)
    with torch.device("cuda"):
        raw = make_build(zoo._config(shape), zoo._recipe(fields))(batch)
    model, inputs = raw["model"], raw["inputs"]
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=[p for p in model.parameters()
                                                                          if p.requires_grad],
                                           config=PZ.ds_config(stage, batch))
    torch.cuda.empty_cache()
    torch.cuda.memory._record_memory_history(max_entries=2_000_000)
    start = torch.cuda.memory_snapshot()
    marks, peaks = [], []
    for step in range(3):
        torch.cuda.reset_peak_memory_stats()
        out = engine(**inputs)
        engine.backward(out.loss)
        engine.step()
        del out
        torch.cuda.synchronize()
        peaks.append({"peak_reserved": torch.cuda.max_memory_reserved(),
                      "peak_allocated": torch.cuda.max_memory_allocated()})
        marks.append(step)
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    if rank == 0:
        trace = snap["device_traces"][rank]
        events = [{"a": e["action"], "addr": e["addr"], "size": e["size"], "stream": e.get("stream", 0),
                   "frames": _frames(e)} for e in trace]
        segs = [{"addr": s["address"], "size": s["total_size"], "allocated": s["allocated_size"],
                 "stream": s["stream"], "pool": str(s.get("segment_pool_id"))} for s in snap["segments"]]
        start_segs = [{"addr": s["address"], "size": s["total_size"], "allocated": s["allocated_size"],
                       "stream": s["stream"],
                       "blocks": [(b["size"], b["state"]) for b in s["blocks"]]} for s in start]
        Path(a.out).mkdir(parents=True, exist_ok=True)
        with gzip.open(Path(a.out) / f"zero_trace_{a.name}.json.gz", "wt") as f:
            json.dump({"name": a.name, "torch": torch.__version__, "deepspeed": deepspeed.__version__,
                       "peaks": peaks, "start_segments": start_segs, "end_segments": segs, "events": events}, f)
        by_stream: dict = {}
        for s in segs:
            d = by_stream.setdefault(s["stream"], [0, 0, 0])
            d[0] += 1
            d[1] += s["size"]
            d[2] += s["allocated"]
        print("peaks", peaks, flush=True)
        print("end segments by stream (count, reserved, allocated):", by_stream, flush=True)
        print("events", len(events), "actions", sorted({e["a"] for e in events}), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
