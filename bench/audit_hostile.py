"""Bench: `oomdoctor audit` on hostile scripts with N `docker run` lines (a `.sh`, and a `.sbatch` whose
#SBATCH options bound every container). Parse and audit in-process, best of `--runs`; the seconds per
1,000 lines should stay flat as N grows (linear). Prints a table.

    PYTHONPATH=src python bench/audit_hostile.py [--sizes 10000,20000,40000] [--runs 3]
"""

from __future__ import annotations

import argparse
import time

from oomdoctor.checks.audit import audit
from oomdoctor.parsers.config_file import parse_config

LINE = "docker run --gpus all -m 4g img python t.py\n"
KINDS = {
    "many.sh": "#!/bin/bash\n",
    "many.sbatch": "#!/bin/bash\n#SBATCH --mem=64G\n#SBATCH --gres=gpu:1\n",
}


def _time(text: str, name: str, runs: int) -> tuple[float, int]:
    best, found = float("inf"), 0
    for _ in range(runs):
        t0 = time.perf_counter()
        found = len(audit(parse_config(text, name)))
        best = min(best, time.perf_counter() - t0)
    return best, found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,20000,40000")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    print(f"{'file':<12} {'lines':>7} {'MiB':>6} {'seconds':>8} {'s/1k lines':>10} {'findings':>9}")
    for name, head in KINDS.items():
        for n in (int(s) for s in args.sizes.split(",")):
            text = head + LINE * n
            secs, found = _time(text, name, args.runs)
            print(f"{name:<12} {n:>7} {len(text) / 2**20:>6.2f} {secs:>8.2f} {secs / n * 1000:>10.3f} {found:>9}")


if __name__ == "__main__":
    main()
