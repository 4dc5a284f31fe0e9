"""How long `oomdoctor doctor --format json` takes, against its peer `python -m torch.utils.collect_env`.

Both run as fresh processes (what a user types), N times each, interleaved so both see the same
machine state; the table gives min / median / max wall seconds and the ratio of medians. Also times
`doctor --bundle examples/seed-a100-k8s` (offline path), the same bundle carrying a large training log
in logs/ against `explain --bundle` on it (doctor reads bundle logs with explain's scanner, so the two
should cost the same), and `oomdoctor bundle` (which imports torch in a child, so it is not expected to
be fast).

    PYTHONPATH=src python bench/doctor_speed.py [--runs 7] [--log-mib 256]
"""

from __future__ import annotations

import argparse
import os
import shutil
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


def big_log(path: Path, mib: int) -> None:
    """A training log: step lines with memory readings, a warning now and then, and OOM events."""
    step = "".join(f"[rank0] step {i} loss 0.{i % 97:02d} lr 3e-4 mem_allocated 41.{i % 10}G throughput 812 it/s\n"
                   for i in range(2000))
    noise = "WARNING: torch.distributed: grad norm clipped to 1.0 on bucket 3\n" * 20
    oom = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
           "79.25 GiB of which 1.00 GiB is free. Process 22 has 60.00 GiB memory in use.\n")
    unit = (step + noise).encode()
    with open(path, "wb") as f:
        for i in range(mib * (1 << 20) // len(unit)):
            f.write(unit)
            if i % 50 == 49:  # one OOM (then the restarted job's log) per ~10 MiB
                f.write(oom.encode())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--log-mib", type=int, default=256)
    args = ap.parse_args()
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / "seed-with-log"
        shutil.copytree(ROOT / "examples" / "seed-a100-k8s", big)
        big_log(big / "logs" / "train.log", args.log_mib)
        with_log = f"seed + {args.log_mib} MiB log"
        cases = {
            "oomdoctor doctor --format json": [py, "-m", "oomdoctor", "doctor", "--format", "json"],
            "python -m torch.utils.collect_env": [py, "-m", "torch.utils.collect_env"],
            "oomdoctor doctor --bundle examples/seed-a100-k8s --format json":
                [py, "-m", "oomdoctor", "doctor", "--bundle", str(ROOT / "examples" / "seed-a100-k8s"), "--format", "json"],
            f"oomdoctor doctor --bundle ({with_log}) --format json":
                [py, "-m", "oomdoctor", "doctor", "--bundle", str(big), "--format", "json"],
            f"oomdoctor explain --bundle ({with_log}) --format json":
                [py, "-m", "oomdoctor", "explain", "--bundle", str(big), "--format", "json"],
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
    d = statistics.median(next(t for n, t in times.items() if n.startswith("oomdoctor doctor --bundle (")))
    e = statistics.median(next(t for n, t in times.items() if n.startswith("oomdoctor explain --bundle (")))
    print(f"ratio doctor / explain on the bundle with the log (medians): {d / e:.2f}x")


if __name__ == "__main__":
    main()
