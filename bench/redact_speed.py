"""How long the redactor takes on large logs of several shapes, and what `bundle --log` pays for one.

Each shape is a log made of one repeated unit (colon-rich lines are where the redactor used to be slow:
every `word:` is a name it must judge). Two timings per shape: `redact_text` on the whole text, and
`bundle_write.add_log` on the same text as a file (reading, cutting and redacting it as `oomdoctor bundle
--log` does). Each measure runs in a fresh process; the table gives the best of `--repeat` runs in CPU seconds of
the process (`time.process_time`: on a shared machine less at the mercy of other jobs than the wall clock) and a
digest of the redacted text. With `--before SRC` (the `src/` of another checkout, e.g. a `git worktree` of an
older commit) the same measures run against that code too, and `same` says whether both redacted every shape
to the same bytes.

    PYTHONPATH=src python bench/redact_speed.py [--mib 32] [--repeat 1] [--before /path/to/old/src]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SHAPES = {
    # a logger's timestamp, level and nested prefixes: five `name:` heads a line, none secret
    "timestamped a: b: c": "2024-01-01 12:00:00: INFO: a: b: c\n",
    # YAML-ish metrics, one harmless name per line
    "key: value metrics": "epoch: 3\nloss: 0.5312\nlr: 3e-4\ngrad_norm: 1.07\nthroughput: 812 it/s\n",
    # every line a secret-named assignment that is masked (the worst case: all work is real work)
    "key: value (all masked)": "key: value\n",
    # a training log without `name:` heads
    "step lines": "[rank0] step 1200 loss 0.53 lr 3e-4 mem_allocated 41.2G throughput 812 it/s\n",
    # a log with a planted secret every 100 lines among colon-rich lines
    "colons + 1% secrets": "2024-01-01 12:00:00: INFO: trainer: step: 12 loss: 0.53\n" * 99
                           + "2024-01-01 12:00:00: DEBUG: env: HF_TOKEN=Zq9planted0x password: hunter2\n",
}


def _text(shape: str, mib: float) -> str:
    unit = SHAPES[shape]
    return unit * max(1, int(mib * (1 << 20)) // len(unit))


def worker(mib: float, repeat: int) -> None:
    """Runs in the child (PYTHONPATH picks the code): prints one JSON line per shape."""
    from oomdoctor.collectors.bundle_write import BundleWriter, add_log
    from oomdoctor.redact import redact_text

    with tempfile.TemporaryDirectory() as tmp:
        for shape in SHAPES:
            text = _text(shape, mib)
            best_text = best_bundle = float("inf")
            digest = ""
            for _ in range(repeat):
                t0 = time.process_time()
                red = redact_text(text)
                best_text = min(best_text, time.process_time() - t0)
                digest = hashlib.sha256(red.encode()).hexdigest()[:12]
            path = Path(tmp) / "train.log"
            path.write_text(text)
            for _ in range(repeat):
                w = BundleWriter()
                t0 = time.process_time()
                add_log(w, str(path))
                best_bundle = min(best_bundle, time.process_time() - t0)
            print(json.dumps({"shape": shape, "mib": len(text) / (1 << 20), "text_s": best_text,
                              "bundle_s": best_bundle, "digest": digest}), flush=True)


def run(src: Path, mib: float, repeat: int) -> dict[str, dict]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    proc = subprocess.run([sys.executable, __file__, "--worker", "--mib", str(mib), "--repeat", str(repeat)],
                          capture_output=True, text=True, env=env, check=False)
    if proc.returncode:
        raise SystemExit(f"worker on {src} failed: {proc.stderr[-2000:]}")
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return {r["shape"]: r for r in rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=float, default=32.0)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--before", type=Path, help="the src/ directory of the code to compare with")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.mib, args.repeat)
        return
    after = run(ROOT / "src", args.mib, args.repeat)
    before = run(args.before, args.mib, args.repeat) if args.before else None
    if before is None:
        print(f"{'shape':26} {'MiB':>6} {'redact_text CPU s':>18} {'add_log CPU s':>14}")
        for shape, a in after.items():
            print(f"{shape:26} {a['mib']:6.1f} {a['text_s']:18.2f} {a['bundle_s']:14.2f}")
        return
    print(f"{'shape':26} {'MiB':>6} {'redact_text CPU s':>22} {'add_log CPU s':>22}  same")
    print(f"{'':26} {'':>6} {'before':>10} {'after':>11} {'before':>10} {'after':>11}")
    for shape, a in after.items():
        b = before[shape]
        print(f"{shape:26} {a['mib']:6.1f} {b['text_s']:10.2f} {a['text_s']:11.2f} {b['bundle_s']:10.2f}"
              f" {a['bundle_s']:11.2f}  {'yes' if a['digest'] == b['digest'] else 'NO'}")


if __name__ == "__main__":
    main()
