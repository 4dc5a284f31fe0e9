"""How long `oomdoctor doctor --format json` takes, against its peer `python -m torch.utils.collect_env`.

Both run as fresh processes (what a user types), N times each, interleaved so both see the same
machine state; the table gives min / median / max wall seconds and the ratio of medians. Also times
`doctor --bundle examples/seed-a100-k8s` (offline path) and `oomdoctor bundle` (which imports torch
in a child, so it is not expected to be fast).

    PYTHONPATH=src python bench/doctor_speed.py [--runs 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed(argv: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, env=env, timeout=600, check=False)
    elapsed = time.perf_counter() - t0
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.decode()[-500:]}")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        cases = {
            "oomdoctor doctor --format json": [py, "-m", "oomdoctor", "doctor", "--format", "json"],
            "python -m torch.utils.collect_env": [py, "-m", "torch.utils.collect_env"],
            "oomdoctor doctor --bundle examples/seed-a100-k8s --format json":
                [py, "-m", "oomdoctor", "doctor", "--bundle", str(ROOT / "examples" / "seed-a100-k8s"), "--format", "json"],
            "oomdoctor bundle -o b.tar.gz": [py, "-m", "oomdoctor", "bundle", "-o", f"{tmp}/b.tar.gz"],
        }
        for argv in cases.values():  # warm the page cache once
            timed(argv)
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(args.runs):
            for name, argv in cases.items():
                times[name].append(timed(argv))
    width = max(len(n) for n in times)
    print(f"{'command':<{width}}  runs    min  median     max")
    for name, ts in times.items():
        print(f"{name:<{width}}  {len(ts):>4}  {min(ts):5.2f}  {statistics.median(ts):6.2f}  {max(ts):6.2f}")
    doctor = statistics.median(times["oomdoctor doctor --format json"])
    peer = statistics.median(times["python -m torch.utils.collect_env"])
    print(f"\nratio collect_env / doctor (medians): {peer / doctor:.1f}x")


if __name__ == "__main__":
    main()
