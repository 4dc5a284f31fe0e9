"""DeepSpeed ZeRO-2/3 per rank on two GPUs: ground truth for `estimate --parallel zero2|zero3` (issue 18).

Written 2026-11-26, before any DeepSpeed run on this project. DeepSpeed 0.19.8 is not on the device
image: a wheel built here (DS_BUILD_OPS=0, pure Python) travels in .wheels with its dependencies.
DEV configurations are for modelling DeepSpeed's layout; HELDOUT ones are measured in the same run
and their rows are written to a separate file that is not read until the model is frozen.

Each configuration runs in a fresh process pair (torchrun --nproc_per_node 2): built as
estimate/hf.make_build writes it on the GPU (bf16 model), `deepspeed.initialize` with the config users
write most (bf16 enabled, ZeRO stage 2 or 3 with DeepSpeed's defaults, torch AdamW through
`torch_adam`), build leftovers emptied, then three steps of forward, `engine.backward`, `engine.step`;
peak reserved of each step after reset_peak_memory_stats() per rank (docs/contracts.md section 6).

    python validation/parallel_zero.py --measure --out $OUT        # on a 2-GPU machine
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
# (name, shape of estimate_llm_zoo.SHAPES, stage, per-rank batch, recipe fields)
DEV = [
    ("tinyllama-zero2", "tinyllama-1.1b", 2, 4, {"task": "train", "seq_len": 1024}),
    ("tinyllama-zero3", "tinyllama-1.1b", 3, 4, {"task": "train", "seq_len": 1024}),
    ("qwen1.5b-zero2", "qwen2.5-1.5b", 2, 4, {"task": "train", "seq_len": 1024}),
    ("qwen1.5b-zero3", "qwen2.5-1.5b", 3, 4, {"task": "train", "seq_len": 1024}),
]
HELDOUT = [
    ("smollm2-zero2", "smollm2-1.7b", 2, 4, {"task": "train", "seq_len": 1024}),
    ("smollm2-zero3", "smollm2-1.7b", 3, 4, {"task": "train", "seq_len": 1024}),
    ("llama3b-zero3", "llama3.2-3b", 3, 2, {"task": "train", "seq_len": 1024}),
    ("phi1.5-zero2-ckpt", "phi-1.5", 2, 8, {"task": "train", "seq_len": 2048, "gradient_checkpointing": True}),
    ("llama1b-zero2", "llama3.2-1b", 2, 4, {"task": "train", "seq_len": 1024}),
]
# Written 2026-11-26 after the ZeRO-2 emulation was rewritten from DeepSpeed's own allocation trace of
# tinyllama-zero2 (validation/zero_alloc_trace.py): the HELDOUT rows above had been read by then, so a
# second held-out set for ZeRO-2, estimated and committed before its one run.
HELDOUT2 = [
    ("smollm2-zero2-b8", "smollm2-1.7b", 2, 8, {"task": "train", "seq_len": 512}),
    ("qwen3-1.7b-zero2", "qwen3-1.7b", 2, 4, {"task": "train", "seq_len": 1024}),
    ("gemma2b-zero2-ckpt", "gemma-2b", 2, 4, {"task": "train", "seq_len": 1024, "gradient_checkpointing": True}),
    ("pythia-zero2", "pythia-1.4b", 2, 4, {"task": "train", "seq_len": 2048}),
    ("llama3b-zero2-ckpt", "llama3.2-3b", 2, 4, {"task": "train", "seq_len": 2048, "gradient_checkpointing": True}),
]
# Written 2026-11-26 after the ZeRO-3 emulation was written from DeepSpeed's allocation history of
# tinyllama-zero3 (the ZeRO-3 rows of HELDOUT had been read): a held-out set for ZeRO-3, estimated and
# committed before its one run.
HELDOUT3 = [
    ("qwen3-1.7b-zero3", "qwen3-1.7b", 3, 4, {"task": "train", "seq_len": 1024}),
    ("llama1b-zero3", "llama3.2-1b", 3, 4, {"task": "train", "seq_len": 1024}),
    ("pythia-zero3", "pythia-1.4b", 3, 4, {"task": "train", "seq_len": 2048}),
    ("gemma2b-zero3-ckpt", "gemma-2b", 3, 4, {"task": "train", "seq_len": 1024, "gradient_checkpointing": True}),
    ("phi1.5-zero3-ckpt", "phi-1.5", 3, 8, {"task": "train", "seq_len": 2048, "gradient_checkpointing": True}),
]
# Written 2026-11-26 after the ZeRO-3 emulation learned DeepSpeed's sub_group_size (1e9 elements per
# optimizer step; HELDOUT3 had been read): models with more than 1e9 partition elements per rank, so
# that the sub-groups matter; estimated and committed before their one run.
HELDOUT4 = [
    ("qwen3b-zero3", "qwen2.5-3b", 3, 4, {"task": "train", "seq_len": 1024}),
    ("phi3-mini-zero3-ckpt", "phi3-mini", 3, 4, {"task": "train", "seq_len": 2048, "gradient_checkpointing": True}),
    ("gemma2-2b-zero3", "gemma2-2b", 3, 2, {"task": "train", "seq_len": 1024}),
    ("qwen3-4b-zero3-ckpt", "qwen3-4b", 3, 4, {"task": "train", "seq_len": 1024, "gradient_checkpointing": True}),
]
ALL = DEV + HELDOUT + HELDOUT2 + HELDOUT3 + HELDOUT4


def ds_config(stage: int, batch: int) -> dict:
    return {"train_micro_batch_size_per_gpu": batch, "gradient_accumulation_steps": 1,
            "bf16": {"enabled": True}, "zero_optimization": {"stage": stage},
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True, "adam_w_mode": True}}}


def measure_one(name: str, out: Path) -> None:
    import deepspeed
    import estimate_llm_zoo as zoo
    import torch
    import torch.distributed as dist

    from oomdoctor.estimate.hf import make_build

    _, shape, stage, batch, fields = next(c for c in ALL if c[0] == name)
    deepspeed.init_distributed("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(rank)
    torch.manual_seed(0)
    before = torch.cuda.memory_allocated()
    raw = None
    with torch.device("cuda"):
        raw = make_build(zoo._config(shape), zoo._recipe(fields))(batch)
    model, inputs = raw["model"], raw["inputs"]
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=[p for p in model.parameters()
                                                                          if p.requires_grad],
                                           config=ds_config(stage, batch))
    torch.cuda.empty_cache()
    steps = []
    for _ in range(3):
        torch.cuda.reset_peak_memory_stats()
        out_ = engine(**inputs) if isinstance(inputs, dict) else engine(inputs)
        loss = out_.loss if hasattr(out_, "loss") else out_
        engine.backward(loss)
        engine.step()
        del out_, loss
        torch.cuda.synchronize()
        steps.append({"peak_allocated": torch.cuda.max_memory_allocated(),
                      "peak_reserved": torch.cuda.max_memory_reserved()})
    row = {"name": name, "rank": rank, "allocated_before_build": before, "steps": steps,
           "measured_reserved": max(s["peak_reserved"] for s in steps)}
    gathered: list = [None] * RANKS
    dist.all_gather_object(gathered, row)
    if rank == 0:
        kind = "dev" if any(c[0] == name for c in DEV) else \
            ("heldout2" if any(c[0] == name for c in HELDOUT2) else
             "heldout3" if any(c[0] == name for c in HELDOUT3) else
             "heldout4" if any(c[0] == name for c in HELDOUT4) else "heldout")
        with (out / f"parallel_zero_{kind}.jsonl").open("a") as f:
            f.write(json.dumps({"name": name, "torch": torch.__version__, "deepspeed": deepspeed.__version__,
                                "ranks": gathered}) + "\n")
    dist.destroy_process_group()


def measure_all(out: Path, names: list[str], deadline: float) -> None:
    t0 = time.time()
    for name in names:
        if time.time() - t0 > deadline:
            print(f"deadline: {name} and later not run", flush=True)
            break
        cmd = ["torchrun", "--nproc_per_node", str(RANKS), str(Path(__file__).resolve()), "--one", name,
               "--out", str(out)]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=dict(os.environ))
        print(name, "rc", r.returncode, f"{time.time() - t0:.0f}s", flush=True)
        if r.returncode:
            print(r.stdout[-1500:], r.stderr[-3000:], flush=True)


def estimate_one(cfg: tuple) -> dict:
    """What `estimate --model --parallel zeroN --ranks 2` prints (estimate/parallel.py per_rank)."""
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    import torch

    torch.set_num_threads(2)
    import estimate_llm_zoo as zoo

    from oomdoctor.estimate.hf import estimate_model
    from oomdoctor.estimate.parallel import per_rank

    name, shape, stage, batch, fields = cfg
    est = estimate_model(zoo._config(shape), zoo._recipe(fields), batch, gpu="h100")
    r = per_rank(est.breakdown, est.peak_reserved_bytes, f"zero{stage}", RANKS,
                 block_bytes=int(est.details.get("block_bytes", 0)), phases=est.details.get("phases"),
                 **_zero_kwargs(est))
    return {"name": name, "set": "dev" if cfg in DEV else "heldout", "per_rank_reserved": r["peak_reserved_bytes"],
            "breakdown": r["breakdown"], "peak_phase": r.get("peak_phase")}


def _zero_kwargs(est) -> dict:
    return {}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--measure", action="store_true")
    ap.add_argument("--estimate", action="store_true")
    ap.add_argument("--one")
    ap.add_argument("--only", help="comma-separated names")
    ap.add_argument("--deadline", type=float, default=500)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    names = a.only.split(",") if a.only else [c[0] for c in ALL]
    if a.one:
        measure_one(a.one, out)
    elif a.estimate:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=2) as pool:
            rows = list(pool.map(estimate_one, [next(c for c in ALL if c[0] == n) for n in names]))
        (out / "parallel_zero_estimated.json").write_text(json.dumps(rows, indent=1))
    elif a.measure:
        measure_all(out, names, a.deadline)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
