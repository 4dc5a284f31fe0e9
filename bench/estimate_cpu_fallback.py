"""Host memory and time of `estimate` on a workload with an op that has no meta kernel (MultiMarginLoss's backward),
which fake tensors run for real on zero-filled CPU tensors of its full size (docs/estimate.md, Limits).

    PYTHONPATH=src python bench/estimate_cpu_fallback.py [--src DIR] [--batch N ...] [--max-batch]

Each run is a fresh `python -m oomdoctor estimate` process (imports included, as a user runs it): its exit status,
wall time and its own peak RSS (os.wait4). `--src` runs another checkout's code (e.g. main's, for "before"); mind
the batch sizes then: without the bound, batch N takes about 8 kB x N of host memory.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = """import torch


def build(batch_size):
    return {"model": torch.nn.Linear(64, 1000), "inputs": torch.randn(batch_size, 64),
            "target": torch.randint(0, 1000, (batch_size,)), "loss": torch.nn.MultiMarginLoss(), "optimizer": "sgd"}
"""


def run(src: Path, args: list[str]) -> tuple[int, float, int, str]:
    """(exit status, wall s, peak RSS bytes, last line of output) of one estimate process."""
    env = dict(os.environ, PYTHONPATH=str(src))
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "oomdoctor", "estimate", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    lines = [ln for ln in out.splitlines() if ln.strip()]
    return os.waitstatus_to_exitcode(status), wall, usage.ru_maxrss * 1024, lines[-1] if lines else ""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", type=Path, default=ROOT / "src")
    ap.add_argument("--batch", type=int, nargs="*", default=[131072, 1000000])
    ap.add_argument("--max-batch", action="store_true", help="also --max-batch --memory-limit 80GiB")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        wl = Path(tmp) / "margin.py"
        wl.write_text(WORKLOAD)
        cases = [[str(wl), "--batch-size", str(b)] for b in a.batch]
        if a.max_batch:
            cases.append([str(wl), "--max-batch", "--memory-limit", "80GiB"])
        print("| run | exit | wall s | peak RSS MiB | says |")
        print("|---|---:|---:|---:|---|")
        for args in cases:
            rc, wall, rss, last = run(a.src, args)
            what = " ".join(args[1:])
            print(f"| {what} | {rc} | {wall:.1f} | {rss / 2**20:.0f} | {last[:160]} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
