"""One line of a progress bar redrawn with \\r for --size bytes, ending in a CUDA OOM (tqdm writing into a file for a
whole epoch): seconds for `oomdoctor explain` from the file and from standard input, against `grep -c`, and whether
the event was found. Usage: PYTHONPATH=src python bench/explain_long_line.py [--size 256MB] [--repeat 3]"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

MSG = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 "
       "GiB of which 1.20 GiB is free.")


def make(path: str, size: int) -> None:
    upd = "".join(f"\r{i % 100:3d}%|{'#' * (i % 100 // 5):20s}| {i}/99999 [00:{i % 60:02d}<01:10, 3.1it/s]"
                  for i in range(5000)).encode()
    with open(path, "wb") as f:
        f.write(b"Epoch 1\n")
        for _ in range(max(1, size // len(upd))):
            f.write(upd)
        f.write(b"\r" + MSG.encode() + b"\n")


def timed(cmd: list[str], stdin_path: str | None = None) -> tuple[float, str]:
    t = time.perf_counter()
    with open(stdin_path, "rb") if stdin_path else open(os.devnull, "rb") as inp:
        out = subprocess.run(cmd, stdin=inp, capture_output=True, text=True).stdout
    return time.perf_counter() - t, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default="256MB")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    size = int(float(a.size.rstrip("MBmb")) * 2**20)
    path = os.path.join(tempfile.mkdtemp(), "bar.log")
    make(path, size)
    rows = {"grep -c 'out of memory'": (["grep", "-c", "out of memory", path], None),
            "oomdoctor explain FILE": ([sys.executable, "-m", "oomdoctor", "explain", path], None),
            "oomdoctor explain - (stdin)": ([sys.executable, "-m", "oomdoctor", "explain", "-"], path)}
    print(f"one line of {os.path.getsize(path) / 2**20:.0f} MiB, OOM at its end; best of {a.repeat}")
    print(f"{'command':32s} {'best s':>8s}  event found")
    for name, (cmd, stdin) in rows.items():
        runs = [timed(cmd, stdin) for _ in range(a.repeat)]
        found = "Tried to allocate 2.00 GiB" in runs[0][1] if "explain" in name else "-"
        print(f"{name:32s} {min(t for t, _ in runs):8.3f}  {found}")
    os.remove(path)


if __name__ == "__main__":
    main()
