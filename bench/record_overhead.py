"""Step-time overhead of recording, on the GPU: none vs `_record_memory_history` alone (20000 events,
Python stacks) vs oomdoctor's default recording (sampler + step marker, no history) vs recording with
the history ring (`--history 20000`).

Conditions are interleaved in rounds inside one process, so drift and clocks affect all alike; each
step is timed with a synchronize. Prints a table (median step ms, ratio to baseline) and writes JSON.

    python bench/record_overhead.py [--rounds 4] [--steps 15] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time

import torch

import oomdoctor
from oomdoctor.injob import record
from oomdoctor.injob.record.recorder import SUGGESTED_HISTORY


def resnet50():
    import torchvision

    model = torchvision.models.resnet50().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(64, 3, 224, 224, device="cuda"), torch.randint(0, 1000, (64,), device="cuda")

    def step():
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config()).cuda()  # GPT-2 small (124M) from its config, random weights
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, 50257, (8, 1024), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


class Condition:
    def __init__(self, name):
        self.name, self.times = name, []

    def __enter__(self):
        d = tempfile.mkdtemp(prefix="oomdoctor-bench-")
        if self.name == "history_only":
            torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python",
                                                     max_entries=SUGGESTED_HISTORY)
        elif self.name == "record_default":
            self.rec = record.start(d)
        elif self.name == "record_history":
            self.rec = record.start(d, history=SUGGESTED_HISTORY)
        return self

    def __exit__(self, *exc):
        if self.name == "history_only":
            torch.cuda.memory._record_memory_history(enabled=None)
        elif self.name.startswith("record"):
            self.rec.stop(final_snapshot=False)
            record._current = None


CONDITIONS = ("baseline", "history_only", "record_default", "record_history")


def bench(name, step, rounds, steps, warm=3):
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    conds = {c: Condition(c) for c in CONDITIONS}
    for r in range(rounds):
        order = CONDITIONS[r % len(CONDITIONS):] + CONDITIONS[:r % len(CONDITIONS)]
        for c in order:
            with conds[c] as cond:
                for i in range(warm + steps):
                    t = time.perf_counter()
                    step()
                    oomdoctor.step()
                    torch.cuda.synchronize()
                    if i >= warm:
                        cond.times.append(time.perf_counter() - t)
    base = statistics.median(conds["baseline"].times)
    rows = []
    for c in CONDITIONS:
        med = statistics.median(conds[c].times)
        rows.append({"model": name, "condition": c, "median_ms": med * 1e3, "ratio": med / base,
                     "steps": len(conds[c].times)})
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--json", default=None)
    ap.add_argument("--models", default="resnet50,gpt2")
    args = ap.parse_args(argv)
    rows = []
    for name in args.models.split(","):
        step = {"resnet50": resnet50, "gpt2": gpt2}[name]()
        rows += bench(name, step, args.rounds, args.steps)
        del step
        torch.cuda.empty_cache()
    print(f"{'model':<10} {'condition':<18} {'median step ms':>15} {'ratio':>7} {'steps':>6}")
    for r in rows:
        print(f"{r['model']:<10} {r['condition']:<18} {r['median_ms']:>15.2f} {r['ratio']:>7.3f} {r['steps']:>6}")
    env = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(0),
           "python": sys.version.split()[0], "history_entries": SUGGESTED_HISTORY}
    print(json.dumps(env))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "env": env}, f, indent=1)


if __name__ == "__main__":
    main()
