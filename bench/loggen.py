"""Synthetic training logs for the explain benches, in three shapes that real jobs print.

The pre-filter's speed depends on which bytes a log is made of (how often the first bytes of its
literals occur), so explain is timed on more than one shape:
- train: a plain training script (timestamps, INFO lines, a memory figure every ~20 lines).
- hf: Hugging Face Trainer output (tqdm bars with carriage returns, metric dicts, per-step GPU
  memory lines with "memory" on them, warnings, NCCL info lines).
- json: structured JSON lines as `kubectl logs` prints them for a JSON logger.
- gpu: a training script that names its device on every line ("device cuda:0", "GPU 0: util ..."), which the
  head pre-filter hands on for the environment hints (session 28: ~3 s/MB before the gates were read in C).
- returnn: RETURNN's per-step line, with its memory figure on every line ("mem_usage:cuda:0 8.9GB").
Each has a CUDA OOM traceback every ~100 MB, so every block of the log is scanned for real. The
first 64 MiB of lines are unique (seeded) and then repeat: the pre-filter's speed depends on which
bytes a log is made of, not on whether its lines recur.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path

STYLES = ("train", "hf", "json", "gpu", "returnn")

OOM = (
    "Traceback (most recent call last):\n"
    '  File "train.py", line 210, in <module>\n'
    "    loss.backward()\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.95 GiB. GPU 0 has a total capacity of "
    "44.35 GiB of which 1.27 GiB is free. Including non-PyTorch memory, this process has 43.07 GiB memory in "
    "use. Of the allocated memory 30.02 GiB is allocated by PyTorch, and 12.46 GiB is reserved by PyTorch but "
    "unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.\n"
)


def _train(rnd: random.Random, step: int) -> str:
    r = rnd.random()
    if r < 0.05:
        return f"step {step} loss {rnd.random():.4f} lr 3e-4 mem {10 + step % 7 * 0.1:.2f} GiB\n"
    if r < 0.06:
        return f"2026-11-22 03:{step % 60:02d}:00 WARNING dataloader slow batch {step} took {rnd.random():.2f}s\n"
    return (f"2026-11-22 03:{step % 60:02d}:{step % 59:02d} INFO rank0 processed batch {step} "
            f"tokens/s {rnd.randint(9000, 13000)} loss={rnd.random():.3f}\n")


def _hf(rnd: random.Random, step: int) -> str:
    r = rnd.random()
    total = 200000
    if r < 0.55:  # tqdm writes the bar again and again on one terminal line
        done = step % total
        pct = 100 * done // total
        bar = "\u2588" * (pct // 10) + " " * (10 - pct // 10)
        return (f"\r {pct:3d}%|{bar}| {done}/{total} [{step // 3600:02d}:{step // 60 % 60:02d}<"
                f"{rnd.randint(10, 99)}:{rnd.randint(10, 59)}, {rnd.uniform(1, 9):.2f}it/s]\n")
    if r < 0.80:
        return (f"{{'loss': {rnd.uniform(0.1, 3):.4f}, 'grad_norm': {rnd.uniform(0.1, 9):.6f}, "
                f"'learning_rate': {rnd.uniform(1, 5):.6f}e-05, 'epoch': {step / total:.2f}}}\n")
    if r < 0.95:
        return (f"[rank{step % 8}]: step {step} | GPU memory allocated: {rnd.uniform(20, 40):.2f} GB | "
                f"max memory reserved: {rnd.uniform(40, 70):.2f} GB | samples/s {rnd.uniform(50, 90):.1f}\n")
    if r < 0.98:
        return (f"{rnd.choice(['node-7', 'node-12'])}:{rnd.randint(1000, 9999)}:{rnd.randint(1000, 9999)} "
                f"[{step % 8}] NCCL INFO Channel {step % 32:02d}/0 : {step % 8}[{step % 8}] -> "
                f"{(step + 1) % 8}[{(step + 1) % 8}] via P2P/CUMEM/read\n")
    return ("/usr/lib/python3/site-packages/torch/utils/checkpoint.py:87: UserWarning: None of the inputs "
            "have requires_grad=True. Gradients will be None\n")


def _json(rnd: random.Random, step: int) -> str:
    r = rnd.random()
    rec = {"ts": f"2026-11-22T03:{step // 60 % 60:02d}:{step % 60:02d}.{rnd.randint(0, 999):03d}Z",
           "level": "info", "logger": "trainer", "rank": step % 8}
    if r < 0.7:
        rec.update(msg="train step", step=step, loss=round(rnd.uniform(0.1, 3), 4),
                   lr=3e-4, tokens_per_s=rnd.randint(9000, 13000))
    elif r < 0.95:
        rec.update(msg="gpu memory", step=step, allocated_mib=rnd.randint(20000, 40000),
                   reserved_mib=rnd.randint(40000, 70000), free_mib=rnd.randint(1000, 9000))
    else:
        rec.update(level="warning", msg="dataloader slow", step=step, wait_s=round(rnd.random(), 3))
    return json.dumps(rec, separators=(",", ":")) + "\n"


def _gpu(rnd: random.Random, step: int) -> str:
    ts = f"2026-11-22 03:{step // 60 % 60:02d}:{step % 60:02d}"
    if rnd.random() < 0.6:
        return f"[{ts}] INFO epoch {step // 5000} step {step} loss {rnd.uniform(0.1, 3):.4f} lr 3e-4 device cuda:0\n"
    return (f"[{ts}] INFO GPU 0: util {rnd.randint(80, 100)}% temp {rnd.randint(60, 80)}C "
            f"power {rnd.randint(250, 400)}W\n")


def _returnn(rnd: random.Random, step: int) -> str:
    ctc = [rnd.uniform(3, 6) for _ in range(3)]
    return (f"ep {step // 2000 + 1} train, step {step % 2000}, ctc_4 {ctc[0]:.3f}, ctc_8 {ctc[1]:.3f}, ctc {ctc[2]:.3f}, "
            f"aed_ce {rnd.uniform(4, 6):.3f}, aed_fer {rnd.uniform(0.7, 0.9):.3f}, num_seqs {rnd.randint(8, 12)}, "
            f"max_size:time {rnd.randint(200000, 250000)}, max_size:out-spatial {rnd.randint(50, 70)}, "
            f"mem_usage:cuda:0 {rnd.uniform(8.5, 9.2):.1f}GB, {rnd.uniform(0.7, 0.9):.3f} sec/step\n")


_LINES: dict[str, Callable[[random.Random, int], str]] = {"train": _train, "hf": _hf, "json": _json, "gpu": _gpu,
                                                          "returnn": _returnn}


def sample(size: int, style: str = "train", seed: int = 0) -> bytes:
    """About `size` bytes of `style` in memory, without OOM tracebacks (background text)."""
    line, rnd = _LINES[style], random.Random(seed)
    out, n, step = [], 0, 0
    while n < size:
        step += 1
        s = line(rnd, step).encode()
        out.append(s)
        n += len(s)
    return b"".join(out)


UNIQUE = 64 << 20  # unique lines; a larger log repeats them (the byte statistics are what matter)


def generate(path: Path, size: int, style: str = "train", seed: int = 0) -> None:
    """Write about `size` bytes of `style` to `path`, with an OOM traceback every ~100 MB: the first
    64 MiB of lines are generated, then repeated, so a 1 GB log takes seconds, not minutes."""
    unique = sample(min(size, UNIQUE), style, seed)
    oom, every = OOM.encode(), 100 << 20
    with open(path, "wb") as f:
        written, next_oom = 0, every
        while written < size:
            take = min(len(unique), size - written, next_oom - written)
            cut = unique.rfind(b"\n", 0, take) + 1 or take  # whole lines
            f.write(unique[:cut])
            written += cut
            if written >= next_oom:
                f.write(oom)
                written += len(oom)
                next_oom += every
