"""Validate `oomdoctor max-batch` on a GPU: its answer against the true largest batch (or sequence) that runs.

For each workload (validation/max_batch_workloads/*.py) under a memory cap (the same
torch.cuda.set_per_process_memory_fraction that max-batch applies), with --margin 0 (the question:
the largest batch that runs three full training steps):
  1. `python -m oomdoctor max-batch W --memory-limit CAP --margin 0 --format json` (the real CLI)
  2. the truth, by code independent of trials/search.py: in one process, batch 1, 2, 4, ... until a
     step OOMs, then bisection (a fresh build per trial, the cache emptied between); then the edge is
     confirmed in fresh processes (python -m oomdoctor.trials.child, one per trial, as max-batch runs
     them): T must run and T+1 must not, else it walks one batch at a time until both hold
  3. pass: truth - tol <= answer <= truth, tol = 1 under 50, else 2% (floor)
Workers run --parallel at a time (default 4; caps are chosen so that they fit together on one 80 GB
card); wall times include that contention and are comparable within a row. Total about 6-8 minutes on one H100.

    PYTHONPATH=src python validation/max_batch_suite.py --out $OUT
    PYTHONPATH=src python validation/render_max_batch_suite.py $OUT/max_batch_suite.json  # -> docs/validation/max-batch.md
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "src"))

GiB = 1 << 30
RESULT_PREFIX = "OOMDOCTOR_TRIAL "
TRUTH_PREFIX = "TRUTH "
MAX_SIZE = 1 << 15


@dataclass(frozen=True)
class Case:
    name: str
    file: str
    cap_gib: float
    dim: str = "batch"
    fixed_batch: int = 1
    max_size: int = 8192


CASES = [
    Case("llama-1.1b-full", "llama_1b_full.py", 24),
    Case("llama-1.1b-lora", "llama_1b_lora.py", 12),
    Case("bert-large-256", "bert_large_256.py", 10),
    Case("resnet50-fp32", "resnet50_fp32.py", 8),
    Case("vit-b16-bf16", "vit_b16_bf16.py", 8),
    Case("bert-base-512", "bert_base_512.py", 8),
    Case("gpt2-1024", "gpt2_1024.py", 12),
    Case("gpt2-seq-b4", "gpt2_seq.py", 8, dim="seq", fixed_batch=4, max_size=16384),
]


def tolerance(n: int) -> int:
    """The issue's tolerance, written here again on purpose (independent of trials/search.py)."""
    return 1 if n < 50 else max(1, (2 * n) // 100)


def env() -> dict:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + e.get("PYTHONPATH", "")
    e["PYTHONUNBUFFERED"] = "1"
    return e


# -- the truth, in one process ----------------------------------------------------------------------------

def _to(obj, dev):
    if hasattr(obj, "to") and hasattr(obj, "device"):
        return obj.to(dev)
    if isinstance(obj, dict):
        return {k: _to(v, dev) for k, v in obj.items()}
    if isinstance(obj, (tuple, list)):
        return type(obj)(_to(v, dev) for v in obj)
    return obj


def truth_worker(path: str, cap: int, dim: str, fixed_batch: int, max_size: int) -> dict:
    import torch

    from oomdoctor.workload.load import load_workload
    from oomdoctor.workload.oom_exceptions import is_oom
    from oomdoctor.workload.step import StepRunner

    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(cap / total, 0)
    wl = load_workload(path)
    tried: dict[int, bool] = {}

    def runs(n: int) -> bool:
        if n in tried:
            return tried[n]
        ok = True
        try:
            with torch.device("cuda"):
                spec = wl.spec(n) if dim == "batch" else wl.spec(fixed_batch, n)
            spec = replace(spec, model=spec.model.to("cuda"), inputs=_to(spec.inputs, "cuda"),
                           target=_to(spec.target, "cuda"))
            runner = StepRunner(spec, device_type="cuda")
            for _ in range(3):
                runner.step()
            torch.cuda.synchronize()
        except Exception as exc:
            if not is_oom(exc):
                raise
            ok = False
        finally:
            spec = runner = None  # noqa: F841 - drop the references before emptying the cache
            gc.collect()
            torch.cuda.empty_cache()
        tried[n] = ok
        return ok

    lo, hi = 0, None
    n = 64 if dim == "seq" else 1
    while n <= max_size:
        if runs(n):
            lo, n = n, n * 2
        else:
            hi = n
            break
    if hi is None:
        return {"edge": lo, "capped": True, "in_process_trials": len(tried)}
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if runs(mid) else (lo, mid)
    return {"edge": lo, "capped": False, "in_process_trials": len(tried)}


def child_runs(path: str, cap: int, case: Case, n: int) -> dict:
    args = ["--batch", str(n)] if case.dim == "batch" else ["--batch", str(case.fixed_batch), "--seq", str(n)]
    cmd = [sys.executable, "-m", "oomdoctor.trials.child", path, *args, "--memory-limit", str(cap)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=600)
    for line in reversed(p.stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX):])
    return {"outcome": "error", "detail": (p.stderr or p.stdout).strip().splitlines()[-1:] or [f"rc {p.returncode}"]}


def truth(path: str, cap: int, case: Case) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--truth-worker", path, "--cap", str(cap), "--dim", case.dim,
           "--fixed-batch", str(case.fixed_batch), "--max-size", str(case.max_size)]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=900)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith(TRUTH_PREFIX)]
    if not lines:
        return {"error": (p.stderr or p.stdout).strip().splitlines()[-3:]}
    out = json.loads(lines[-1][len(TRUTH_PREFIX):])
    edge, checks = out["edge"], []
    # confirm in fresh processes: edge runs, edge + 1 does not; walk if the in-process edge was off
    for _ in range(8):
        if edge >= 1:
            r = child_runs(path, cap, case, edge)
            checks.append((edge, r["outcome"]))
            if r["outcome"] != "ok":
                edge -= 1
                continue
        if out.get("capped"):
            break
        r = child_runs(path, cap, case, edge + 1)
        checks.append((edge + 1, r["outcome"]))
        if r["outcome"] == "ok":
            edge += 1
            continue
        break
    out.update(edge=edge, fresh_process_checks=checks, seconds=round(time.time() - t0, 1))
    return out


# -- one case ---------------------------------------------------------------------------------------------

def run_case(case: Case, out_dir: Path) -> dict:
    path = str(HERE / "max_batch_workloads" / case.file)
    cap = int(case.cap_gib * GiB)
    res = out_dir / f"max_batch_{case.name}.json"
    cmd = [sys.executable, "-m", "oomdoctor", "max-batch", path, "--memory-limit", str(cap), "--margin", "0",
           "--max", str(case.max_size), "--format", "json", "-o", str(res)]
    if case.dim == "seq":
        cmd += ["--dim", "seq", "--batch", str(case.fixed_batch), "--min", "64"]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=1200)
    wall = time.time() - t0
    entry: dict = {"case": case.name, "workload": f"validation/max_batch_workloads/{case.file}", "cap_bytes": cap,
                   "dim": case.dim, "fixed_batch": case.fixed_batch if case.dim == "seq" else None,
                   "max_batch_rc": p.returncode, "max_batch_wall_seconds": round(wall, 1),
                   "stderr_tail": p.stderr.strip().splitlines()[-4:]}
    try:
        doc = json.loads(res.read_text())
        res.unlink()
    except (OSError, ValueError) as exc:
        entry.update(answer=None, error=f"no JSON from max-batch: {exc}")
        doc = None
    if doc is not None:
        entry.update(answer=doc.get("max_batch_size"), trials=len(doc.get("trials", [])),
                     trial_list=[{k: t.get(k) for k in ("batch", "purpose", "outcome", "peak_reserved_bytes",
                                                         "throughput", "alloc_retries", "survived_ooms", "seconds")}
                                 for t in doc.get("trials", [])],
                     recommended=doc.get("recommended_batch_size"), pressure=doc.get("pressure"),
                     best_throughput=doc.get("best_throughput"), notes=doc.get("notes"), gpu=doc.get("gpu"))
    t = truth(path, cap, case)
    entry["truth"] = t.get("edge")
    entry["truth_detail"] = t
    a, tr = entry.get("answer"), entry.get("truth")
    entry["tolerance"] = tolerance(tr) if tr else None
    entry["passed"] = bool(a is not None and tr is not None and tr - tolerance(tr) <= a <= tr)
    entry["error_pct"] = round(100.0 * (a - tr) / tr, 1) if a is not None and tr else None
    print(f"{'PASS' if entry['passed'] else 'FAIL'} {case.name:<18} answer {a} truth {tr} "
          f"({entry.get('trials')} trials, {entry['max_batch_wall_seconds']} s)", flush=True)
    return entry


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--truth-worker", help=argparse.SUPPRESS)
    ap.add_argument("--cap", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--dim", default="batch", help=argparse.SUPPRESS)
    ap.add_argument("--fixed-batch", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--max-size", type=int, default=MAX_SIZE, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.truth_worker:
        print(TRUTH_PREFIX + json.dumps(truth_worker(args.truth_worker, args.cap, args.dim, args.fixed_batch,
                                                     args.max_size)), flush=True)
        return 0
    cases = [c for c in CASES if not args.only or c.name in set(args.only)]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    with ThreadPoolExecutor(max_workers=max(1, args.parallel)) as pool:
        results = list(pool.map(lambda c: run_case(c, out), cases))
    summary = {"cases": len(results), "passed": sum(r["passed"] for r in results),
               "median_trials": sorted(r.get("trials") or 0 for r in results)[len(results) // 2] if results else None,
               "max_trials": max((r.get("trials") or 0 for r in results), default=None),
               "wall_seconds": round(time.time() - t0, 1), "parallel": args.parallel}
    try:
        import torch

        device = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda}
    except Exception:  # noqa: BLE001
        device = {}
    (out / "max_batch_suite.json").write_text(json.dumps({"suite": "max-batch", "device": device, "summary": summary,
                                                          "cases": results}, indent=1, default=str))
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
