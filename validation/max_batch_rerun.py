"""Re-run `oomdoctor max-batch` (the CLI) on the validation workloads in parallel under a hard deadline,
then the 200-step check at each batch found while time remains. Used after a fix to the search, so
the answers can be set against the truth that max_batch_compare.py measured (the truth does not
depend on the search). Writes OUT/rerun.json after every event.

    python validation/max_batch_rerun.py --cap 10GiB --out $OUT --deadline 55 [--long W1,W2]
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
sys.path.insert(0, str(HERE.parent / "src"))

from oomdoctor.units import parse_size  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cap", default="10GiB")
    ap.add_argument("--out", required=True)
    ap.add_argument("--deadline", type=float, default=55)
    ap.add_argument("--workloads", default="bert_base,vit_b16,resnet50,gpt2_small,token_mlp")
    ap.add_argument("--long", default="bert_base,vit_b16", help="workloads that get the 200-step check")
    ap.add_argument("--long-steps", type=int, default=200)
    ap.add_argument("--no-estimator", action="store_true", help="pass --no-estimator to the CLI")
    args = ap.parse_args()
    t0 = time.perf_counter()
    cap = parse_size(args.cap)
    env = dict(os.environ, PYTHONPATH=str(HERE.parent / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
               PYTHONUNBUFFERED="1")
    out = Path(args.out) / "rerun.json"
    res: dict = {"cap_bytes": cap, "results": {}}
    procs = {}
    for name in args.workloads.split(","):
        cmd = [sys.executable, "-m", "oomdoctor", "max-batch", str(HERE / "workloads" / f"{name}.py"),
               "--memory-limit", str(cap), "--format", "json"] + (["--no-estimator"] if args.no_estimator else [])
        procs[name] = (subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env),
                       time.perf_counter())
    longs = {}
    while procs or longs:
        left = args.deadline - (time.perf_counter() - t0)
        if left <= 0:
            break
        for name, (p, start) in list(procs.items()):
            if p.poll() is None:
                continue
            stdout, stderr = p.communicate()
            wall = time.perf_counter() - start
            try:
                payload = json.loads(stdout)
            except json.JSONDecodeError:
                payload = None
            res["results"][name] = {"rc": p.returncode, "wall_s": round(wall, 2), "payload": payload,
                                    "stderr": stderr[-3000:]}
            del procs[name]
            found = (payload or {}).get("max_batch_size")
            if found and name in args.long.split(","):
                cmd = [sys.executable, "-m", "oomdoctor.trials.child", str(HERE / "workloads" / f"{name}.py"),
                       "--batch", str(found), "--steps", str(args.long_steps), "--memory-limit", str(cap)]
                longs[name] = (subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                                env=env), time.perf_counter(), found)
            out.write_text(json.dumps(res, indent=1))
        for name, (p, start, found) in list(longs.items()):
            if p.poll() is None:
                continue
            stdout, stderr = p.communicate()
            line = [ln for ln in stdout.splitlines() if ln.startswith("OOMDOCTOR_TRIAL ")]
            res["results"][name]["long_run"] = {
                "batch": found, "steps": args.long_steps, "wall_s": round(time.perf_counter() - start, 2),
                **(json.loads(line[-1][len("OOMDOCTOR_TRIAL "):]) if line else {"outcome": "error",
                                                                                  "detail": stderr[-500:]})}
            del longs[name]
            out.write_text(json.dumps(res, indent=1))
        time.sleep(0.2)
    for name, (p, *_rest) in list(procs.items()) + list(longs.items()):
        p.kill()
        res["results"].setdefault(name, {})["killed_at_deadline"] = True
    res["wall_s"] = round(time.perf_counter() - t0, 2)
    out.write_text(json.dumps(res, indent=1))
    for name, r in res["results"].items():
        p = r.get("payload") or {}
        print(name, p.get("max_batch_size"), len(p.get("trials", [])), r.get("wall_s"),
              (r.get("long_run") or {}).get("outcome"), (r.get("long_run") or {}).get("peak_reserved_bytes"),
              "killed" if r.get("killed_at_deadline") else "")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
