"""Validate `oomdoctor record`'s verdicts on a GPU: 12 healthy and 12 leaking jobs (validation/record_jobs).

--jobs DIR runs another set of jobs instead, e.g. validation/record_jobs_heldout (6 healthy, 6 leaking,
written without looking at the detector, to check it on scripts it was not tuned on). A job is any
`*.py` in DIR not starting with `_`, with `expect: healthy|leak` in its docstring; a docstring line
`record: --history` records it with allocation history (as the HISTORY names below are).

Each job runs the way a user would run it: `python -m oomdoctor record --dir RUN [--history N] -- python
JOB.py` (most without step markers), then the run directory is analysed exactly as `oomdoctor report`
does. A healthy job passes when the verdict is not `leak_in_code` (and no OOM); a leaking job passes
when it is `leak_in_code`. Targets (issue 19): no healthy job called a leak, >= 90% of leaks caught.

Jobs run --parallel at a time (default 4; each stays under ~16 GiB, the 1.1B Llama job ~15 GiB), so the
suite takes about 3-5 minutes on one H100. Writes to --out (default $OUT):
  record_suite.json   one entry per job: expectation, verdict, rates, projection, confidence, pass
  record_runs.tar.gz  the run directories (timelines, final/oom evidence), to keep as test fixtures

    PYTHONPATH=src python validation/record_suite.py --out $OUT
    PYTHONPATH=src python validation/record_suite.py --jobs validation/record_jobs_heldout --out $OUT
    PYTHONPATH=src python validation/render_record_suite.py $OUT/record_suite.json   # -> docs/validation/record.md
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "src"))

from oomdoctor.analysis import timeline  # noqa: E402
from oomdoctor.collectors import rundir  # noqa: E402

# jobs recorded with torch's allocation history on, so the verdict can name the allocation sites
HISTORY = {"l01_val_loss_list_keeps_graph", "l02_eval_without_no_grad_short", "l04_4mib_per_step_markers",
           "l08_metrics_logits_on_gpu", "h03_gpt_adamw_bf16", "h06_cache_filled_once"}
JOB_TIMEOUT = 240


def expectation(path: Path) -> str:
    m = re.search(r"expect:\s*(healthy|leak)", path.read_text())
    if not m:
        raise SystemExit(f"{path}: no 'expect: healthy|leak' in its docstring")
    return m.group(1)


def dies_of_oom(path: Path) -> bool:
    return re.search(r"^dies:\s*oom\b", path.read_text(), re.M) is not None


def wants_history(path: Path) -> bool:
    return path.stem in HISTORY or re.search(r"^record:\s*--history\b", path.read_text(), re.M) is not None


def run_job(job: Path, work: Path, python: str) -> dict:
    name = job.stem
    run = work / name
    flags = ["--history", "20000"] if wants_history(job) else []
    cmd = [python, "-m", "oomdoctor", "record", "--dir", str(run), *flags, "--", python, str(job)]
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=JOB_TIMEOUT, env=env, cwd=str(job.parent))
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as exc:
        rc, out, err = "timeout", (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or ""), ""
    wall = time.time() - t0
    entry: dict = {"job": name, "expect": expectation(job), "returncode": rc, "wall_seconds": round(wall, 1),
                   "history": bool(flags), "stdout_tail": out.strip().splitlines()[-2:],
                   "stderr_tail": err.strip().splitlines()[-3:]}
    try:
        doc = timeline.analyse(rundir.load(str(run)))
    except Exception as exc:  # noqa: BLE001 - a job the recorder could not follow is a failed case, not a crash
        entry.update(verdict=None, passed=False, error=f"{type(exc).__name__}: {exc}")
        return entry
    v = doc["verdict"]
    proc = max(doc["processes"], key=lambda p: p["samples"]) if doc["processes"] else {}
    leak = proc.get("leak") or {}
    entry.update(
        verdict=v["category"], oom=v["oom"], summary=v["summary"], evidence=v["evidence"][:6],
        steps_recorded=proc.get("steps"), samples=proc.get("samples"),
        growth={k: leak.get(k) for k in ("pattern", "steps_from", "unit", "rate_per_step", "rate_per_s",
                                         "growth_bytes", "tau", "coverage", "confidence", "projection",
                                         "level_shifts", "points", "warmup_points")},
        sites=[s.get("source") for s in leak.get("sites") or []],
        peak_allocated=(proc.get("peaks") or {}).get("peak_allocated"))
    called_leak = v["category"] == "leak_in_code"
    # a job whose docstring says `dies: oom` is meant to end in CUDA OOM: it ran if the OOM was recorded
    ran = rc == 0 or (dies_of_oom(job) and bool(v["oom"]))
    entry["passed"] = ran and (called_leak if entry["expect"] == "leak" else (not called_leak and not v["oom"]))
    return entry


def shown_dir(path: Path) -> str:
    """The jobs dir as recorded in the JSON: relative to the repository when inside it."""
    path = path.resolve()
    try:
        return path.relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--jobs", "--jobs-dir", dest="jobs_dir", default=str(HERE / "record_jobs"),
                    help="directory of job scripts (default validation/record_jobs)")
    ap.add_argument("--only", nargs="*", help="job names (stems) to run")
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args()
    jobs_dir = Path(args.jobs_dir).resolve()  # the jobs are started from their run directories
    if not jobs_dir.is_dir():
        print(f"record_suite: {jobs_dir}: not a directory", file=sys.stderr)
        return 2
    jobs = sorted(p for p in jobs_dir.glob("*.py") if not p.name.startswith("_"))
    if args.only:
        jobs = [j for j in jobs if j.stem in set(args.only)]
    if not jobs:
        print(f"record_suite: no jobs in {jobs_dir}", file=sys.stderr)
        return 2
    for j in jobs:  # a job without its expectation is refused before anything runs
        try:
            expectation(j)
        except SystemExit as exc:
            print(f"record_suite: {exc}", file=sys.stderr)
            return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="record-suite-"))
    # the slowest first (the 1.1B model, torch.compile, the long runs), so the parallel slots finish together
    jobs.sort(key=lambda j: (not (j.stem.startswith("h09") or "compile" in j.stem), j.stem))
    t0 = time.time()
    with ThreadPoolExecutor(max_workers=max(1, args.parallel)) as pool:
        results = list(pool.map(lambda j: run_job(j, work, args.python), jobs))
    for r in results:
        print(f"{'PASS' if r['passed'] else 'FAIL'} {r['job']:<36} expect {r['expect']:<7} -> "
              f"{r.get('verdict')}  {r.get('summary', r.get('error', ''))}  ({r['wall_seconds']} s)", flush=True)
    healthy = [r for r in results if r["expect"] == "healthy"]
    leaks = [r for r in results if r["expect"] == "leak"]
    summary = {"healthy": len(healthy), "healthy_called_leak": sum(r.get("verdict") == "leak_in_code" for r in healthy),
               "healthy_passed": sum(r["passed"] for r in healthy), "leaks": len(leaks),
               "leaks_caught": sum(r["passed"] for r in leaks), "wall_seconds": round(time.time() - t0, 1)}
    summary["leak_recall"] = round(summary["leaks_caught"] / len(leaks), 3) if leaks else None
    summary["targets_met"] = summary["healthy_called_leak"] == 0 and (summary["leak_recall"] or 0) >= 0.9
    try:
        import torch

        device = {"gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
                  "torch": torch.__version__, "cuda": torch.version.cuda}
    except Exception:  # noqa: BLE001
        device = {}
    doc = {"suite": "record", "jobs_dir": shown_dir(jobs_dir), "device": device, "summary": summary, "jobs": results}
    (out / "record_suite.json").write_text(json.dumps(doc, indent=1, default=str))
    with tarfile.open(out / "record_runs.tar.gz", "w:gz") as tar:
        tar.add(work, arcname="record_runs")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
