"""Validate `oomdoctor max-batch` on a GPU against the truth and against Lightning and Accelerate.

For each workload (validation/workloads/*.py, CONTRACTS section 6), under one memory cap
(torch.cuda.set_per_process_memory_fraction), in one worker process per workload:
  1. `oomdoctor max-batch W --memory-limit CAP --format json` (the real CLI; trials in child processes)
  2. the truth by bisection, in-process: the largest batch whose 3-step peak reserved fits the budget
     (limit - margin, the question max-batch answers) and the largest batch that runs at all
  3. Accelerate `find_executable_batch_size` (its 0.9 back-off), started at 2^ceil(log2(1.5 x true max))
  4. Lightning `Tuner.scale_batch_size` in "power" and "binsearch" modes (defaults: init 2, 3 steps/trial)
  5. 200 further steps at oomdoctor's batch, in a fresh child process under the same cap (run right
     after step 1, before this worker touches the GPU)
Workers run side by side (the GPU has room for all caps); trial counts are exact, wall times include
that contention and are comparable within a row. `--dry-cpu` exercises the glue on a CPU with a
simulated memory rule (no numbers from it are results).

    python validation/max_batch_compare.py --cap 12GiB --out $OUT
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

from oomdoctor.workload.oom_exceptions import is_oom  # noqa: E402
from oomdoctor.workload.step import StepRunner, _call_model, _loss, make_optimizer  # noqa: E402
from oomdoctor.workload.load import load_workload  # noqa: E402
from oomdoctor.units import parse_size  # noqa: E402

MAX_VAL = 8192


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(HERE.parent / "src") + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Device:
    """The GPU, or (--dry-cpu) a CPU with a simulated rule: OOM above `dry_max`, peak = 1 MiB x batch."""

    def __init__(self, cap: int, dry_max: int | None):
        import torch

        self.torch, self.dry_max = torch, dry_max
        self.name = "cpu" if dry_max else "cuda"
        if not dry_max:
            total = torch.cuda.get_device_properties(0).total_memory
            torch.cuda.set_per_process_memory_fraction(cap / total, 0)

    def check(self, batch: int) -> None:
        if self.dry_max and batch > self.dry_max:
            raise self.torch.OutOfMemoryError(f"CUDA out of memory. (simulated above {self.dry_max})")

    def reset(self) -> None:
        if not self.dry_max:
            self.torch.cuda.synchronize()
            self.torch.cuda.reset_peak_memory_stats()

    def peak(self, batch: int) -> int:
        if self.dry_max:
            return batch * 2**20
        self.torch.cuda.synchronize()
        return int(self.torch.cuda.max_memory_reserved())

    def free(self) -> None:
        gc.collect()
        if not self.dry_max:
            self.torch.cuda.empty_cache()


def _to(obj, dev):
    if hasattr(obj, "to") and hasattr(obj, "device"):
        return obj.to(dev)
    if isinstance(obj, dict):
        return {k: _to(v, dev) for k, v in obj.items()}
    if isinstance(obj, (tuple, list)):
        return type(obj)(_to(v, dev) for v in obj)
    return obj


def steps_raising(wl, dev: Device, batch: int, steps: int = 3) -> int:
    """Build at `batch` on the device and run the contract's steps; OOM propagates. Returns the peak."""
    torch = dev.torch
    dev.check(batch)
    with torch.device(dev.name):
        spec = wl.spec(batch)
    spec = replace(spec, model=spec.model.to(dev.name), inputs=_to(spec.inputs, dev.name),
                   target=_to(spec.target, dev.name))
    runner = StepRunner(spec, device_type=dev.name)
    dev.reset()
    for _ in range(steps):
        runner.step()
    return dev.peak(batch)


class Truth:
    """Memoised in-process trials (fresh build each, cache emptied between) and bisection."""

    def __init__(self, wl, dev: Device):
        self.wl, self.dev, self.memo, self.order = wl, dev, {}, []

    def trial(self, b: int):
        if b not in self.memo:
            peak = None
            try:
                peak = steps_raising(self.wl, self.dev, b)
            except Exception as exc:
                if not is_oom(exc):
                    raise
            self.dev.free()
            self.memo[b] = peak
            self.order.append((b, peak))
        return self.memo[b]

    def largest(self, pred, start: int) -> int:
        b = max(1, min(start, MAX_VAL))
        if pred(b):
            lo = b
            while True:
                nxt = min(MAX_VAL, max(lo + 1, math.ceil(lo * 1.08)))
                if nxt == lo:
                    return lo
                if not pred(nxt):
                    hi = nxt
                    break
                lo = nxt
        else:
            hi = b
            while True:
                nxt = max(0, min(hi - 1, math.floor(hi * 0.92)))
                if nxt == 0:
                    return 0
                if pred(nxt):
                    lo = nxt
                    break
                hi = nxt
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if pred(mid) else (lo, mid)
        return lo


def run_oomdoctor(path: str, cap: int, dry_max: int | None) -> dict:
    if dry_max:  # no GPU: pretend the CLI answered 90% of the simulated max in 3 trials
        b = int(dry_max * 0.9)
        return {"wall_s": 0.0, "rc": 0, "payload": {"max_batch_size": b, "budget_bytes": int(0.95 * dry_max * 2**20),
                                                    "trials": [{}, {}, {}]}, "stderr": "dry run"}
    cmd = [sys.executable, "-m", "oomdoctor", "max-batch", path, "--memory-limit", str(cap), "--format", "json"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=_env())
    wall = time.perf_counter() - t0
    try:
        payload = json.loads(proc.stdout)
    except json.JSONDecodeError:
        payload = None
    return {"wall_s": round(wall, 2), "rc": proc.returncode, "payload": payload, "stderr": proc.stderr[-4000:]}


def run_accelerate(wl, dev: Device, start: int) -> dict:
    from accelerate.utils import find_executable_batch_size

    calls = []

    @find_executable_batch_size(starting_batch_size=start)
    def train(batch_size):
        calls.append(batch_size)
        steps_raising(wl, dev, batch_size)
        return batch_size

    t0 = time.perf_counter()
    try:
        found, error = train(), None
    except Exception as exc:  # noqa: BLE001 - reported in the table
        found, error = None, f"{type(exc).__name__}: {exc}"[:300]
    wall = time.perf_counter() - t0
    dev.free()
    import accelerate

    return {"found": found, "trials": len(calls), "batches": calls, "start": start, "wall_s": round(wall, 2),
            "error": error, "version": accelerate.__version__}


def _lightning():
    try:
        import lightning.pytorch as pl
    except ImportError:
        import pytorch_lightning as pl
    return pl


def run_lightning(path: str, dev: Device, mode: str, tmp: str) -> dict:
    import torch
    from torch.utils.data import DataLoader, Dataset

    pl = _lightning()
    spec = load_workload(path).spec(1)  # model on the CPU; Lightning moves it
    def pick(obj):  # sample 0 of the batch-1 tensors
        if hasattr(obj, "dim"):
            return obj[0]
        if isinstance(obj, dict):
            return {k: pick(v) for k, v in obj.items()}
        if isinstance(obj, (tuple, list)):
            return type(obj)(pick(v) for v in obj)
        return obj

    sample = (pick(spec.inputs), pick(spec.target) if spec.target is not None else torch.zeros(()))

    class Repeat(Dataset):
        def __len__(self):
            return 1 << 20

        def __getitem__(self, i):
            return sample

    class Lit(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = spec.model
            self.batch_size = 2
            self.trial_batches = []

        def train_dataloader(self):
            return DataLoader(Repeat(), batch_size=self.batch_size, num_workers=0)

        def training_step(self, batch, batch_idx):
            if batch_idx == 0:
                self.trial_batches.append(self.batch_size)
            dev.check(self.batch_size)
            x, y = batch
            out = _call_model(self.model, x)
            return _loss(replace(spec, target=y if spec.target is not None else None), out)

        def configure_optimizers(self):
            return make_optimizer(spec, [p for p in self.model.parameters() if p.requires_grad])

    module = Lit()
    precision = {"bf16": "bf16-mixed", "fp16": "16-mixed"}.get(spec.amp, "32-true")
    trainer = pl.Trainer(accelerator="gpu" if dev.name == "cuda" else "cpu", devices=1, precision=precision,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, max_epochs=1, limit_val_batches=0, num_sanity_val_steps=0,
                         default_root_dir=tmp)
    import importlib

    Tuner = importlib.import_module(pl.__name__ + ".tuner").Tuner
    t0 = time.perf_counter()
    try:
        found, error = Tuner(trainer).scale_batch_size(module, mode=mode, steps_per_trial=3, init_val=2,
                                                       max_trials=25), None
    except Exception as exc:  # noqa: BLE001
        found, error = None, f"{type(exc).__name__}: {exc}"[:300]
    wall = time.perf_counter() - t0
    batches = list(module.trial_batches)
    del trainer, module
    dev.free()
    return {"found": found, "trials": len(batches), "batches": batches, "wall_s": round(wall, 2), "error": error,
            "version": pl.__version__}


def run_long(path: str, cap: int, batch: int, steps: int, dry_max: int | None) -> dict:
    if dry_max:
        return {"outcome": "ok", "steps": steps, "dry": True}
    from oomdoctor.trials.max_batch import run_child

    t0 = time.perf_counter()
    out = run_child([path, "--batch", str(batch), "--steps", str(steps), "--memory-limit", str(cap)], 300)
    out["steps"] = steps
    out["wall_s"] = round(time.perf_counter() - t0, 2)
    return out


def worker(path: str, cap: int, result: str, dry_max: int | None, long_steps: int) -> None:
    name = Path(path).stem
    res: dict = {"workload": name, "cap_bytes": cap}
    t_all = time.perf_counter()

    def save():
        res["worker_wall_s"] = round(time.perf_counter() - t_all, 2)
        Path(result).write_text(json.dumps(res, indent=1, default=str))

    od = run_oomdoctor(path, cap, dry_max)
    res["oomdoctor"] = od
    save()
    payload = od["payload"] or {}
    found = payload.get("max_batch_size")
    if found:  # first, so that the acceptance-critical run is never the one a time limit cuts
        res["long_run"] = run_long(path, cap, found, long_steps, dry_max)
        save()
    budget = payload.get("budget_bytes") or int(0.95 * cap)
    wl = load_workload(path)
    dev = Device(cap, dry_max)
    truth = Truth(wl, dev)
    t0 = time.perf_counter()
    fits = lambda b: (p := truth.trial(b)) is not None and p <= budget  # noqa: E731
    runs = lambda b: truth.trial(b) is not None  # noqa: E731
    t_margin = truth.largest(fits, found or 8)
    t_raw = truth.largest(runs, max(t_margin, 1))
    res["truth"] = {"max_within_budget": t_margin, "max_runs": t_raw, "budget_bytes": budget,
                    "probes": truth.order, "wall_s": round(time.perf_counter() - t0, 2)}
    save()
    start = 1 << math.ceil(math.log2(max(2, 1.5 * max(t_raw, 1))))
    res["accelerate"] = run_accelerate(wl, dev, start)
    save()
    for mode in ("power", "binsearch"):
        res[f"lightning_{mode}"] = run_lightning(path, dev, mode, f"/tmp/mbc_lt_{name}_{mode}")
        save()
    dev.free()
    save()


def _fmt(v) -> str:
    return "-" if v is None else str(v)


def table(results: list[dict]) -> str:
    head = ("| workload | oomdoctor batch | trials | wall s | true max (budget) | true max (runs) | found / true (budget) "
            "| found / true (runs) | 200 steps | Lightning power: batch / trials / s | Lightning binsearch: batch / trials / s "
            "| Accelerate: batch / trials / s (start) |")
    rows = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in results:
        od = r.get("oomdoctor", {})
        p = od.get("payload") or {}
        f = p.get("max_batch_size")
        t = r.get("truth", {})
        tm, tr = t.get("max_within_budget"), t.get("max_runs")
        lr = r.get("long_run", {})

        def lib(key, extra="", r=r):
            x = r.get(key)
            if not x:
                return "-"
            if x.get("error"):
                return f"error: {x['error'][:60]}"
            return f"{x['found']} / {x['trials']} / {x['wall_s']}{extra.format(**x)}"

        rows.append("| " + " | ".join([
            r["workload"], _fmt(f), _fmt(len(p.get("trials", [])) if p else None), _fmt(od.get("wall_s")),
            _fmt(tm), _fmt(tr), f"{f / tm:.3f}" if f and tm else "-", f"{f / tr:.3f}" if f and tr else "-",
            (f"{lr.get('outcome')} (peak {lr.get('peak_reserved_bytes', 0) / 2**30:.2f} GiB)" if lr.get("peak_reserved_bytes")
             else _fmt(lr.get("outcome"))),
            lib("lightning_power"), lib("lightning_binsearch"), lib("accelerate", " ({start})"),
        ]) + " |")
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cap", default="10GiB")
    ap.add_argument("--out", default="validation/results")
    ap.add_argument("--workloads", default=",".join(sorted(p.stem for p in (HERE / "workloads").glob("*.py"))))
    ap.add_argument("--worker", default=None)
    ap.add_argument("--result", default=None)
    ap.add_argument("--dry-cpu", type=int, default=None, metavar="MAX", help="CPU glue test: simulated OOM above MAX")
    ap.add_argument("--long-steps", type=int, default=200)
    ap.add_argument("--timeout", type=float, default=420)
    ap.add_argument("--with-fit", action="store_true", help="also run validation/fit_gpu.py alongside")
    args = ap.parse_args()
    cap = parse_size(args.cap)
    if args.worker:
        worker(args.worker, cap, args.result, args.dry_cpu, args.long_steps)
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path("/tmp/mbc")
    tmp.mkdir(exist_ok=True)
    procs = {}
    t0 = time.perf_counter()
    for name in args.workloads.split(","):
        cmd = [sys.executable, __file__, "--worker", str(HERE / "workloads" / f"{name}.py"), "--cap", args.cap,
               "--result", str(tmp / f"{name}.json"), "--long-steps", str(args.long_steps)]
        if args.dry_cpu:
            cmd += ["--dry-cpu", str(args.dry_cpu)]
        procs[name] = subprocess.Popen(cmd, stdout=open(tmp / f"{name}.log", "w"), stderr=subprocess.STDOUT, env=_env())
    if args.with_fit:
        procs["fit"] = subprocess.Popen([sys.executable, str(HERE / "fit_gpu.py"), "--out", str(out / "fit_gpu.json")],
                                        stdout=open(tmp / "fit.log", "w"), stderr=subprocess.STDOUT, env=_env())
    for name, p in procs.items():
        try:
            p.wait(timeout=max(1, args.timeout - (time.perf_counter() - t0)))
        except subprocess.TimeoutExpired:
            p.kill()
            print(f"{name}: killed at the time limit", flush=True)
    results = []
    for name in args.workloads.split(","):
        f = tmp / f"{name}.json"
        results.append(json.loads(f.read_text()) if f.exists() else {"workload": name, "error": "no result"})
    import torch

    meta = {"wall_s": round(time.perf_counter() - t0, 1), "cap": args.cap, "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu (dry run)",
            "python": sys.version.split()[0], "dry_cpu": args.dry_cpu}
    (out / "max_batch_results.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1, default=str))
    md = table(results)
    (out / "max_batch_table.md").write_text(md + "\n")
    with open(out / "logs.txt", "w") as logs:
        for name in procs:
            f = tmp / f"{name}.log"
            logs.write(f"===== {name}\n" + (f.read_text()[-20000:] if f.exists() else "(none)\n"))
    print(json.dumps(meta))
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
