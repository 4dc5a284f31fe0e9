"""`explain --here` / `--bundle` where the earlier GPU runs did not reach (written for validation, session 15).

validation/explain_here_gpu.py staged co-tenants, fractions, leaks and two GPUs; docs/validation/explain.md
listed what stayed unvalidated: MPS, a job still alive while `--here` reads the machine, more than two GPUs
and a bundle's CUDA_VISIBLE_DEVICES mapping on hardware. Each failure here is made on purpose, its cause
known by construction, and each log is read from the text alone, with `--here`, and (multi-GPU) with a
bundle taken in the job's own environment. Nothing here was used to write explain's rules.

- mps_*: an MPS control daemon started by this script (private pipe and log directories, quit after each
  case; no setting of the card is changed). The job and `explain --here` share its environment, as in a
  container of the Kubernetes MPS device plugin (CUDA_MPS_PIPE_DIRECTORY, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT).
  A pinned limit set in the job's environment or as the daemon's default; MPS without a limit and a job too
  big for the whole card (MPS is not the cause); a second MPS client holding memory; a healthy client.
  Skipped where nvidia-cuda-mps-control is absent or will not start.
- alive_*: the job catches its OOM, prints the traceback and stays alive holding its memory (a notebook
  kernel), or is still training: `--here` runs while it lives, so NVML sees the job itself.
- gpu4_*: four GPUs; the job's CUDA_VISIBLE_DEVICES picks cards 2,3 or 3,0 so the message's "GPU n" is not
  NVML's n; a co-tenant on the job's card or on the card whose NVML index equals the message's. Read also
  with `explain --bundle` of `oomdoctor bundle` run in the job's environment. Skipped with fewer than four.

Usage (device machine): PYTHONPATH=src:/tmp/site python3 validation/explain_here_gpu2.py OUTDIR [--only NAME ...]
    [--code start=PATH/TO/OTHER/src]
Writes OUTDIR/<case>.log, OUTDIR/results.json and prints a table.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import explain_here_gpu as H  # noqa: E402

PY = sys.executable
MPS_DIR = Path("/tmp/oomd-mps")

# The job's need as a share of its GPU (weights 60% in 1 GiB pieces, then one activation); DEV picks the
# CUDA device; ALIVE: catch the OOM, print its traceback, stay alive holding the memory (a notebook kernel).
NEED = r"""
import os, sys, time, traceback, torch
GiB = 1 << 30
dev = os.environ.get("DEV", "cuda:0")
total = torch.cuda.get_device_properties(dev).total_memory
need = float(os.environ["NEED"]) * total
w = []
try:
    print(f"loading weights on {dev}: {0.6 * need / GiB:.1f} GiB", flush=True)
    while len(w) * GiB < 0.6 * need:
        w.append(torch.empty(GiB, dtype=torch.uint8, device=dev))
    print("weights loaded; step 1", flush=True)
    act = torch.empty(int(0.4 * need), dtype=torch.uint8, device=dev)
    print("step 1 done", flush=True)
except torch.OutOfMemoryError:
    if not os.environ.get("ALIVE"):
        raise
    traceback.print_exc()
    print("IDLE", flush=True)
    time.sleep(900)
"""

LEAK_ALIVE = r"""
import time, traceback, torch
GiB = 1 << 30
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
history = []
try:
    for step in range(100000):
        x = torch.randn(8192, 4096, device="cuda")
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward(retain_graph=True)
        opt.step()
        history.append(loss)  # kept with its graph: the leak
        if step % 5 == 0:
            print(f"epoch 0 step {step} loss {loss.item():.4f}", flush=True)
except torch.OutOfMemoryError:
    traceback.print_exc()
    print("IDLE", flush=True)
    time.sleep(900)
"""

TRAINING = r"""
import torch
GiB = 1 << 30
model = torch.nn.Linear(4096, 4096).cuda()
opt = torch.optim.AdamW(model.parameters())
for step in range(10 ** 9):
    loss = model(torch.randn(1024, 4096, device="cuda")).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    if step % 200 == 0:
        print(f"step {step} loss {loss.item():.4f} mem {torch.cuda.max_memory_allocated() / GiB:.2f} GiB", flush=True)
    if step == 1000:
        print("IDLE", flush=True)  # still training: explain reads the log so far
"""

# name: (truth, job source, job env, co-tenant (share of its GPU, physical GPU or None) or None,
#        setup ("mps", default pinned limit or None) or None, note)
CASES: dict[str, tuple] = {
    "mps_pinned_env": ("gpu_sharing_limit", NEED, {"NEED": "0.3", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=20G"}, None,
                       ("mps", None), "MPS; the client's pinned limit 20 GiB (env); job needs 30% of the card"),
    "mps_pinned_default": ("gpu_sharing_limit", NEED, {"NEED": "0.25"}, None, ("mps", "16G"),
                           "MPS; the daemon's default pinned limit 16 GiB; job needs 25% of the card"),
    "mps_capacity": ("true_capacity", NEED, {"NEED": "1.2"}, None, ("mps", None),
                     "MPS without a limit; job needs 120% of the card (MPS is not the cause)"),
    "mps_cotenant": ("other_process", NEED, {"NEED": "0.5"}, (0.6, None), ("mps", None),
                     "MPS; another MPS client holds 60%; job needs 50%"),
    "mps_healthy": ("none", H.HEALTHY, {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=8G"}, None, ("mps", None),
                    "healthy short run as an MPS client with an 8 GiB pinned limit"),
    "alive_capacity": ("true_capacity", NEED, {"NEED": "1.25", "ALIVE": "1"}, None, None,
                       "job needs 125%; catches the OOM and stays alive holding its memory"),
    "alive_other": ("other_process", NEED, {"NEED": "0.45", "ALIVE": "1"}, (0.7, None), None,
                    "co-tenant 70%; job needs 45%, catches the OOM and stays alive"),
    "alive_leak": ("leak_in_code", LEAK_ALIVE, {}, None, None,
                   "graph kept per step; the OOM caught, the process stays alive holding it all"),
    "alive_training": ("none", TRAINING, {}, None, None, "a healthy run still training while explain reads its log"),
    "gpu4_other_cvd23": ("other_process", NEED, {"NEED": "0.5", "CUDA_VISIBLE_DEVICES": "2,3", "DEV": "cuda:1"},
                         (0.6, 3), None, "job on cuda:1 of 2,3 (card 3) needs 50%; co-tenant 60% on card 3"),
    "gpu4_capacity_cotenant_card1": ("true_capacity", NEED, {"NEED": "1.3", "CUDA_VISIBLE_DEVICES": "2,3",
                                                             "DEV": "cuda:1"}, (0.6, 1), None,
                                     "job on cuda:1 of 2,3 (card 3) needs 130%; co-tenant 60% on card 1 (the "
                                     "message's index, not the cause)"),
    "gpu4_other_cvd30": ("other_process", NEED, {"NEED": "0.55", "CUDA_VISIBLE_DEVICES": "3,0", "DEV": "cuda:0"},
                         (0.5, 3), None, "job on cuda:0 of 3,0 (card 3) needs 55%; co-tenant 50% on card 3"),
    "gpu4_capacity_cotenant_card0": ("true_capacity", NEED, {"NEED": "1.2", "CUDA_VISIBLE_DEVICES": "3,0",
                                                             "DEV": "cuda:0"}, (0.6, 0), None,
                                     "job on cuda:0 of 3,0 (card 3) needs 120%; co-tenant 60% on card 0 (not the cause)"),
    "gpu4_healthy_cotenant": ("none", H.HEALTHY, {"CUDA_VISIBLE_DEVICES": "2"}, (0.85, 2), None,
                              "healthy run on card 2 beside a co-tenant holding 85% of it"),
    # Added after run 1 (mps_pinned_*, mps_capacity, mps_cotenant and gpu4_capacity_* then drove the rules of
    # explain/rules_by_kind.py _mps_weight and the accounted-for card in _co_tenants; they are no longer held
    # out): new sizes and cards, written before run 2, as held-out checks of those rules.
    "mps_pinned_env_b": ("gpu_sharing_limit", NEED, {"NEED": "0.45", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=40G"},
                         None, ("mps", None), "MPS; pinned limit 40 GiB (env); job needs 45% of the card"),
    "mps_pinned_default_b": ("gpu_sharing_limit", NEED, {"NEED": "0.35"}, None, ("mps", "30G"),
                             "MPS; the daemon's default pinned limit 30 GiB; job needs 35% of the card"),
    "mps_capacity_b": ("true_capacity", NEED, {"NEED": "1.1"}, None, ("mps", None),
                       "MPS without a limit; job needs 110% of the card"),
    "mps_cotenant_b": ("other_process", NEED, {"NEED": "0.65"}, (0.45, None), ("mps", None),
                       "MPS; another MPS client holds 45%; job needs 65%"),
    "gpu4_other_cvd12": ("other_process", NEED, {"NEED": "0.6", "CUDA_VISIBLE_DEVICES": "1,2", "DEV": "cuda:1"},
                         (0.55, 2), None, "job on cuda:1 of 1,2 (card 2) needs 60%; co-tenant 55% on card 2"),
    "gpu4_capacity_cotenant_card0_b": ("true_capacity", NEED, {"NEED": "1.15", "CUDA_VISIBLE_DEVICES": "1,2",
                                                               "DEV": "cuda:0"}, (0.5, 0), None,
                                       "job on cuda:0 of 1,2 (card 1) needs 115%; co-tenant 50% on card 0 (the "
                                       "message's index, not the cause)"),
    # Added after the review (session 15, before run 3): MPS on several GPUs. The pinned limit names devices by
    # the client's CUDA ordinal (after its CUDA_VISIBLE_DEVICES), as explain reads it; whether MPS does the same is
    # what these cases show (with the limit read by physical index, the first would not fail at all).
    "gpu4_mps_pinned_cvd23_dev1": ("gpu_sharing_limit", NEED, {"NEED": "0.3", "CUDA_VISIBLE_DEVICES": "2,3",
                                                               "DEV": "cuda:1",
                                                               "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=60G,1=20G"},
                                   None, ("mps", None), "MPS on 4 GPUs; job on cuda:1 of 2,3 (card 3) needs 30%; "
                                   "pins 0=60G,1=20G"),
    "gpu4_mps_pinned_cvd23_dev0_fits": ("none", NEED, {"NEED": "0.3", "CUDA_VISIBLE_DEVICES": "2,3", "DEV": "cuda:0",
                                                       "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=60G,1=20G"},
                                        None, ("mps", None), "MPS on 4 GPUs; job on cuda:0 of 2,3 (card 2) needs 30%, "
                                        "under its 60 GiB pin: no failure"),
    "gpu4_mps_capacity_cvd30": ("true_capacity", NEED, {"NEED": "1.1", "CUDA_VISIBLE_DEVICES": "3,0", "DEV": "cuda:1"},
                                None, ("mps", None), "MPS on 4 GPUs without a limit; job on cuda:1 of 3,0 (card 0) "
                                "needs 110%"),
}


PRIVATE_PIPE = MPS_DIR / "pipe"  # a pipe directory a client must be told of (CUDA_MPS_PIPE_DIRECTORY)
DEFAULT_PIPE = Path("/tmp/nvidia-mps")  # where every CUDA process looks without the variable


def mps_env(pipe: Path = PRIVATE_PIPE) -> dict[str, str]:
    """The daemon's variables (and a client's, for a private pipe directory)."""
    return {"CUDA_MPS_PIPE_DIRECTORY": str(pipe), "CUDA_MPS_LOG_DIRECTORY": str(MPS_DIR / "log")}


def _daemon_env(pipe: Path) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("CUDA_MPS_")}, **mps_env(pipe)}


def mps_control(cmd: str, pipe: Path = PRIVATE_PIPE) -> str:
    p = subprocess.run(["nvidia-cuda-mps-control"], input=cmd + "\n", capture_output=True, text=True, timeout=30,
                       env=_daemon_env(pipe))
    return (p.stdout + p.stderr).strip()


def mps_start(default_limit: str | None, pipe: Path = PRIVATE_PIPE) -> str | None:
    """Start an MPS control daemon on `pipe`; the reason it cannot, else None."""
    if not shutil.which("nvidia-cuda-mps-control"):
        return "nvidia-cuda-mps-control not found"
    for d in (pipe, MPS_DIR / "log"):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    p = subprocess.run(["nvidia-cuda-mps-control", "-d"], capture_output=True, text=True, timeout=30,
                       env=_daemon_env(pipe))
    if p.returncode != 0:
        return f"mps daemon: rc {p.returncode} {p.stderr.strip()[-200:]}"
    time.sleep(1)
    if default_limit:
        out = mps_control(f"set_default_device_pinned_mem_limit 0 {default_limit}", pipe)
        if out and "error" in out.lower():
            return f"set_default_device_pinned_mem_limit: {out[-200:]}"
    return None


def mps_stop(pipe: Path = PRIVATE_PIPE) -> str:
    try:
        out = mps_control("quit", pipe)
    except Exception as e:  # noqa: BLE001
        out = repr(e)
    time.sleep(2)
    return out


def explain_with(log: Path, env: dict[str, str], extra: list[str], src: str | None = None) -> dict:
    """One `explain --format json` run in the given environment (the job's, for --here under MPS), with the
    facts the answer used."""
    return H.explain(log, "--here" in extra, src, env=env, extra=tuple(x for x in extra if x != "--here"))


def wait_for(log: Path, marker: str, proc: subprocess.Popen, limit: float = 240.0) -> str:
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        if marker in (log.read_text(errors="replace") if log.exists() else ""):
            return "alive"
        if proc.poll() is not None:
            return f"exited {proc.returncode}"
        time.sleep(0.5)
    return "timeout"


def nvml_processes(env: dict[str, str]) -> str:
    p = subprocess.run(["nvidia-smi", "--query-compute-apps=gpu_bus_id,pid,process_name,used_memory",
                        "--format=csv,noheader"], capture_output=True, text=True, timeout=30, env={**os.environ, **env})
    return p.stdout.strip()


def run_case(name: str, out: Path) -> dict:
    truth, src, jenv, cotenant, setup, note = CASES[name]
    res: dict = {"case": name, "truth": truth, "note": note}
    if name.startswith("gpu4_") and H.gpu_count() < 4:
        res["skipped"] = "needs four GPUs"
        return res
    env: dict[str, str] = dict(jenv)
    if setup and setup[0] == "mps":
        why = mps_start(setup[1])
        if why:
            mps_stop()
            res["skipped"] = why
            return res
        env.update(mps_env())
    job, log = out / f"{name}.py", out / f"{name}.log"
    job.write_text(src)
    hog = job_p = None
    try:
        if cotenant:
            share, card = cotenant
            henv = {**os.environ, **({k: v for k, v in env.items() if k.startswith("CUDA_MPS_") and "LIMIT" not in k}),
                    **({"CUDA_VISIBLE_DEVICES": str(card)} if card is not None else {})}
            hog = subprocess.Popen([PY, "-c", H.HOG, "frac", str(share)], stdout=subprocess.PIPE, text=True,
                                   start_new_session=True, env=henv)
            res["cotenant"] = (hog.stdout.readline() if hog.stdout else "").strip()
        t0 = time.monotonic()
        with log.open("w") as fh:
            job_p = subprocess.Popen([PY, str(job)], stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, **env},
                                     start_new_session=True)
            if "IDLE" in src:
                res["job_state"] = wait_for(log, "IDLE", job_p)
            else:
                try:
                    res["job_rc"] = job_p.wait(timeout=240)
                except subprocess.TimeoutExpired:
                    res["job_rc"] = "timeout"
        res["job_seconds"] = round(time.monotonic() - t0, 1)
        res["nvidia_smi"] = nvml_processes(env)
        # explain runs in the job's environment (a shell in the same container), the job possibly alive
        res["text"] = explain_with(log, env, [])
        res["here"] = explain_with(log, env, ["--here"])
        if name.startswith("mps_"):
            res["here_outside"] = explain_with(log, {}, ["--here"])  # a host shell without the MPS variables
        if name.startswith("gpu4_"):
            bundle = out / f"{name}.bundle.tar.gz"
            p = subprocess.run([PY, "-m", "oomdoctor", "bundle", "-o", str(bundle), "--log", str(log)],
                               capture_output=True, text=True, timeout=300, env={**os.environ, **env})
            res["bundle_rc"] = p.returncode
            res["bundle"] = explain_with(log, {}, ["--bundle", str(bundle)])
        fp = subprocess.run([PY, "-c", H.FACTS], capture_output=True, text=True, timeout=120, env={**os.environ, **env})
        try:  # what --here read (the same collector in the job's environment), kept whole for replays
            res["facts"] = json.loads(fp.stdout)
        except ValueError:
            res["facts"] = {"error": fp.stderr[-300:]}
        for code, csrc in H.CODES.items():
            res[f"{code}_text"] = explain_with(log, env, [], csrc)
            res[f"{code}_here"] = explain_with(log, env, ["--here"], csrc)
            if name.startswith("gpu4_"):
                res[f"{code}_bundle"] = explain_with(log, {}, ["--bundle", str(out / f"{name}.bundle.tar.gz")], csrc)
    finally:
        for p in (job_p, hog):
            if p is not None:
                H.kill_group(p)
        if setup and setup[0] == "mps":
            res["mps_quit"] = mps_stop()
        res["gpu_used_after_mib"] = H.wait_free()
    return res


def _describe(n: str, r: dict) -> str:
    extra = "".join(f" {k} {H.top(r.get(k)):24}" for k in ("here_outside", "bundle") if k in r)
    lines = [f"{n:30} truth {r['truth']:18} text {H.top(r.get('text')):24} here {H.top(r.get('here')):24}{extra} "
             f"{r.get('skipped') or r.get('error') or ''} ({r['seconds']} s)"]
    for code in H.CODES:
        lines.append(f"{'':30} {code:>24} text {H.top(r.get(f'{code}_text')):24} here {H.top(r.get(f'{code}_here')):24} "
                     f"bundle {H.top(r.get(f'{code}_bundle')):24}")
    return "\n".join(lines)


def main() -> int:
    out, names = H.parse_cli(CASES)
    print(f"GPU used before: {H.gpu_used_mib()} MiB; GPUs: {H.gpu_count()}", flush=True)
    H.run_cases(names, run_case, out, _describe, lambda n: {"truth": CASES[n][0]})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
