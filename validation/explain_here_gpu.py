"""`explain` against `explain --here` on memory failures staged on a real GPU (written for validation).

Issue #17 asks that where a log cannot settle the cause, `explain --here` read the deciding fact from the
machine (GPU processes through NVML, /dev/shm, cgroup and kernel OOM kills) and use it. Public reports
cannot measure that (their machines are gone), so here each failure is made on purpose, its cause known by
construction, and both readings of the same log are recorded:

- other_process: a co-tenant process holds part of the GPU and the job's own need would fit an empty one
  (three sizes); a co-tenant that leaves too little for a CUDA context; three "ranks" all on cuda:0;
- true_capacity: the job alone needs more than the GPU (two sizes), and once with a small co-tenant that is
  not the cause (5% of the GPU: --here must not blame it);
- gpu_sharing_limit: set_per_process_memory_fraction below the job's need;
- fragmentation: a cache keeps one 6 MiB block in three across the whole GPU, then one large request;
- leak_in_code: outputs kept with their graph step after step (with and without memory printed per step);
- not_oom: an embedding index out of range (device-side assert);
- host_oom: host tensors past an address-space limit (no GPU involved);
- shm_exhausted: DataLoader workers with a 64 MB /dev/shm (own mount namespace; skipped where it cannot be made);
- healthy: a short training run next to a co-tenant holding half the GPU (expect no event either way);
- on a machine of two GPUs (cases mgpu_*, session 13): the co-tenant on the job's GPU or on the other one,
  the job on physical GPU 0 or 1 (CUDA_VISIBLE_DEVICES=1: PyTorch's message then says "GPU 0" while NVML
  counts the card as 1). `--here` cannot know the job's CUDA_VISIBLE_DEVICES, so a co-tenant may count only
  as a lead there; these cases check that it neither blames a co-tenant on the other card nor loses one on
  its own. Skipped with fewer than two GPUs.

Each log is also cut to what users often paste, the error line alone up to "Tried to allocate ...", and read
both ways. Nothing here was used to write explain's rules. The co-tenants stay alive while `explain --here`
runs (as a leftover process would); everything is killed and the GPU checked free before the next case.

Usage (device machine): PYTHONPATH=src:/tmp/site python3 validation/explain_here_gpu.py OUTDIR [--only NAME ...]
    [--code start=PATH/TO/OTHER/src]   (also read each log with another source tree, e.g. the session's start)
Writes OUTDIR/<case>.log, OUTDIR/results.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

PY = sys.executable

HOG = r"""
import sys, time, torch
free, total = torch.cuda.mem_get_info()
mode, val = sys.argv[1], float(sys.argv[2])
n = int(total * val) if mode == "frac" else int(free - val * 2**20)
x = torch.empty(n, dtype=torch.uint8, device="cuda")
print("READY", n, flush=True)
time.sleep(900)
"""

# The job's own need as a share of the GPU: weights in 1 GiB chunks (60%), then one activation (40%).
NEED = r"""
import os, torch
GiB = 1 << 30
total = torch.cuda.get_device_properties(0).total_memory
frac = float(os.environ.get("CAP", "0"))
if frac:
    torch.cuda.set_per_process_memory_fraction(frac)
need = float(os.environ["NEED"]) * total
print(f"loading weights: {0.6 * need / GiB:.1f} GiB", flush=True)
w = []
while len(w) * GiB < 0.6 * need:
    w.append(torch.empty(GiB, dtype=torch.uint8, device="cuda"))
print("weights loaded; step 1", flush=True)
act = torch.empty(int(0.4 * need), dtype=torch.uint8, device="cuda")
print("step 1 done", flush=True)
"""

CONTEXT = r"""
import torch
print("moving the model to cuda", flush=True)
x = torch.zeros(1024, device="cuda")
print("on cuda", flush=True)
"""

RANKS = r"""
import os, subprocess, sys, time
RANK = r'''
import sys, time, torch
GiB = 1 << 30
r = int(sys.argv[1])
total = torch.cuda.get_device_properties(0).total_memory
print(f"[rank{r}] loading model on cuda:0", flush=True)
w = [torch.empty(GiB, dtype=torch.uint8, device="cuda:0") for _ in range(int(0.4 * total / GiB))]
print(f"[rank{r}] ready, waiting for the others", flush=True)
time.sleep(900)
'''
procs = [subprocess.Popen([sys.executable, "-c", RANK, str(r)]) for r in range(3)]
while True:
    codes = [p.poll() for p in procs]
    if any(c not in (None, 0) for c in codes):
        print(f"launcher: a rank failed (exit codes {codes}); exiting", flush=True)
        sys.exit(1)
    time.sleep(0.5)
"""

FRAGMENT = r"""
import torch
GiB, MiB = 1 << 30, 1 << 20
free, total = torch.cuda.mem_get_info()
acts = []
while torch.cuda.memory_reserved() < free - 3 * GiB:
    acts.extend(torch.empty(6 * MiB, dtype=torch.uint8, device="cuda") for _ in range(30))
cache = acts[::3]
del acts
print(f"step 1: allocated {torch.cuda.memory_allocated() / GiB:.2f} GiB, reserved {torch.cuda.memory_reserved() / GiB:.2f} GiB", flush=True)
big = torch.empty(int(0.25 * total), dtype=torch.uint8, device="cuda")
print("unexpected: fit", flush=True)
"""

LEAK = r"""
import os, torch
GiB = 1 << 30
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
history = []
for step in range(100000):
    x = torch.randn(8192, 4096, device="cuda")
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward(retain_graph=True)
    opt.step()
    history.append(loss)  # kept with its graph: the leak
    if os.environ.get("PRINT_MEM"):
        print(f"step {step}: loss {loss.item():.4f} allocated {torch.cuda.memory_allocated() / GiB:.2f} GiB", flush=True)
    elif step % 5 == 0:
        print(f"epoch 0 step {step} loss {loss.item():.4f}", flush=True)
"""

NOT_OOM = r"""
import torch
emb = torch.nn.Embedding(1000, 64).cuda()
idx = torch.tensor([3, 17, 1000, 5], device="cuda")  # 1000 is out of range
out = emb(idx)
print(out.sum().item())
"""

HOST = r"""
import resource, torch
resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))
print("building the feature matrix", flush=True)
x = torch.empty(1 << 31, dtype=torch.float32)
y = x * 2
print(y.sum())
"""

SHM = r"""
import torch
from torch.utils.data import DataLoader, Dataset
class D(Dataset):
    def __len__(self): return 64
    def __getitem__(self, i): return torch.ones(64, 1024, 1024)
for i, b in enumerate(DataLoader(D(), batch_size=4, num_workers=2)):
    print("batch", i, b.shape, flush=True)
"""

HEALTHY = r"""
import torch
GiB = 1 << 30
model = torch.nn.Linear(4096, 4096).cuda()
opt = torch.optim.AdamW(model.parameters())
for step in range(20):
    loss = model(torch.randn(1024, 4096, device="cuda")).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    if step % 5 == 0:
        print(f"step {step} loss {loss.item():.4f} mem {torch.cuda.max_memory_allocated() / GiB:.2f} GiB", flush=True)
print("training done", flush=True)
"""

# name: (truth, job source, env, co-tenant (mode, value[, physical GPU]) or None, note)
CASES: dict[str, tuple[str, str, dict[str, str], tuple | None, str]] = {
    "other_60_50": ("other_process", NEED, {"NEED": "0.5"}, ("frac", 0.6), "co-tenant 60%, job needs 50%"),
    "other_80_30": ("other_process", NEED, {"NEED": "0.3"}, ("frac", 0.8), "co-tenant 80%, job needs 30%"),
    "other_45_65": ("other_process", NEED, {"NEED": "0.65"}, ("frac", 0.45), "co-tenant 45%, job needs 65%"),
    "other_context": ("other_process", CONTEXT, {}, ("leave", 60), "co-tenant leaves 60 MiB: no room for a context"),
    "other_ranks_gpu0": ("other_process", RANKS, {}, None, "three ranks, each 40% of the GPU, all on cuda:0"),
    "capacity_130": ("true_capacity", NEED, {"NEED": "1.3"}, None, "job alone needs 130%"),
    "capacity_105": ("true_capacity", NEED, {"NEED": "1.05"}, None, "job alone needs 105%"),
    "capacity_small_cotenant": ("true_capacity", NEED, {"NEED": "1.2"}, ("frac", 0.05),
                                "job needs 120%; a co-tenant holds 5% (not the cause)"),
    "sharing_fraction": ("gpu_sharing_limit", NEED, {"NEED": "0.5", "CAP": "0.3"}, None,
                         "set_per_process_memory_fraction(0.3), job needs 50%"),
    "fragmentation": ("fragmentation", FRAGMENT, {}, None, "one 6 MiB block in three kept across the GPU, then 25%"),
    "leak_printed": ("leak_in_code", LEAK, {"PRINT_MEM": "1"}, None, "graph kept per step; memory printed each step"),
    "leak_plain": ("leak_in_code", LEAK, {}, None, "graph kept per step; loss printed every 5 steps"),
    "not_oom_index": ("not_oom", NOT_OOM, {"CUDA_LAUNCH_BLOCKING": "1"}, None, "embedding index out of range"),
    "host_rlimit": ("host_oom", HOST, {}, None, "8 GiB host tensor under a 6 GiB address-space limit"),
    "shm_64m": ("shm_exhausted", SHM, {}, None, "DataLoader workers, /dev/shm 64 MB (own mount namespace)"),
    "healthy_cotenant": ("none", HEALTHY, {}, ("frac", 0.5), "healthy run next to a co-tenant holding 50%"),
    # Added after the first run had found the MIG misreading (sizes not seen before the fix; see
    # docs/validation/explain.md): held-out checks of the fix and of the room-for-the-request rule.
    "other_30_80": ("other_process", NEED, {"NEED": "0.8"}, ("frac", 0.3), "co-tenant 30%, job needs 80%"),
    "other_15_95": ("other_process", NEED, {"NEED": "0.95"}, ("frac", 0.15), "co-tenant 15%, job needs 95%"),
    "capacity_cotenant_20": ("true_capacity", NEED, {"NEED": "1.5"}, ("frac", 0.2),
                             "job needs 150%; a co-tenant holds 20% (not the cause)"),
    "capacity_cotenant_10": ("true_capacity", NEED, {"NEED": "1.15"}, ("frac", 0.1),
                             "job needs 115%; a co-tenant holds 10% (not the cause)"),
    "healthy_cotenant_90": ("none", HEALTHY, {}, ("frac", 0.9), "healthy run next to a co-tenant holding 90%"),
    # Added after the second run, where capacity_cotenant_20 led to counting the message's process and NVML's
    # once (no longer held out); sizes again new.
    "other_40_55": ("other_process", NEED, {"NEED": "0.55"}, ("frac", 0.4), "co-tenant 40%, job needs 55%"),
    "other_20_85": ("other_process", NEED, {"NEED": "0.85"}, ("frac", 0.2), "co-tenant 20%, job needs 85%"),
    "other_context_200": ("other_process", CONTEXT, {}, ("leave", 200), "co-tenant leaves 200 MiB"),
    "capacity_cotenant_25": ("true_capacity", NEED, {"NEED": "1.4"}, ("frac", 0.25),
                             "job needs 140%; a co-tenant holds 25% (not the only cause)"),
    "capacity_cotenant_5": ("true_capacity", NEED, {"NEED": "1.1"}, ("frac", 0.05),
                            "job needs 110%; a co-tenant holds 5% (not the cause)"),
    # Two GPUs (session 13; written before the run, sizes as above): where the co-tenant is, against where the job is.
    "mgpu_other_same_gpu0": ("other_process", NEED, {"NEED": "0.5", "CUDA_VISIBLE_DEVICES": "0"}, ("frac", 0.6, 0),
                             "job on GPU 0 needs 50%; co-tenant 60% on GPU 0; GPU 1 idle"),
    "mgpu_other_same_gpu1": ("other_process", NEED, {"NEED": "0.5", "CUDA_VISIBLE_DEVICES": "1"}, ("frac", 0.6, 1),
                             "job on GPU 1 (its 'GPU 0') needs 50%; co-tenant 60% on GPU 1; GPU 0 idle"),
    "mgpu_capacity_cotenant_other_gpu": ("true_capacity", NEED, {"NEED": "1.3", "CUDA_VISIBLE_DEVICES": "0"},
                                         ("frac", 0.6, 1), "job on GPU 0 needs 130%; co-tenant 60% on GPU 1 (not the cause)"),
    "mgpu_capacity_remapped_cotenant_gpu0": ("true_capacity", NEED, {"NEED": "1.3", "CUDA_VISIBLE_DEVICES": "1"},
                                             ("frac", 0.6, 0), "job on GPU 1 (its 'GPU 0') needs 130%; co-tenant 60% "
                                             "on GPU 0 (not the cause, same index in the message)"),
    "mgpu_healthy_cotenant_other_gpu": ("none", HEALTHY, {"CUDA_VISIBLE_DEVICES": "0"}, ("frac", 0.9, 1),
                                        "healthy run on GPU 0; co-tenant 90% on GPU 1"),
}
# A second code tree to read the same logs with (--code NAME=PATH: the session's start, for before/after).
CODES: dict[str, str] = {}

_PASTE = re.compile(r"^.*?(?:CUDA out of memory|OutOfMemoryError).*?Tried to allocate [\d.]+ [KMGT]?i?B\.?", re.M)


def summarise(d: dict) -> dict:
    """The answer of one `explain --format json` run."""
    hs = [h for h in d.get("hypotheses", []) if h["category"] != "unknown"]
    return {"ranked": [h["category"] for h in hs], "confidence": hs[0]["confidence"] if hs else None,
            "evidence": hs[0]["evidence"][:3] if hs else [], "events": [e["kind"] for e in d.get("events", [])],
            "recovered": sum(bool(e.get("recovered")) for e in d.get("events", [])), "failed": d.get("failed"),
            "facts_used": d.get("facts_used") or [k for h in hs[:1] for k in h.get("facts_used", [])]}


def explain(log: Path, here: bool, src: str | None = None, env: dict[str, str] | None = None,
            extra: tuple[str, ...] = ()) -> dict:
    """One `explain --format json` run (with `--here`, `extra` arguments, another source tree `src`, and
    variables `env` over this process's: the job's own, as explain_here_gpu2.py runs it under MPS)."""
    cmd = [PY, "-m", "oomdoctor", "explain", "--format", "json", str(log)] + (["--here"] if here else []) + list(extra)
    e = {**os.environ, **(env or {})}
    if src:
        e["PYTHONPATH"] = os.pathsep.join([src] + [x for x in e.get("PYTHONPATH", "").split(os.pathsep)
                                                    if x and x != "src"])
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=e)
    out = {"rc": p.returncode, "seconds": round(time.monotonic() - t0, 2)}
    try:
        d = json.loads(p.stdout)
    except ValueError:
        out["error"] = (p.stderr or p.stdout)[-400:]
        return out
    return {**out, **summarise(d)}


FACTS = ("from oomdoctor.collectors.machine import collect_deciding_facts; import json; "
         "print(json.dumps({k: v.to_json() for k, v in collect_deciding_facts().items()}, default=str))")


def deciding_facts() -> dict:
    """What `explain --here` read at that moment (the same collector, its own process)."""
    p = subprocess.run([PY, "-c", FACTS], capture_output=True, text=True, timeout=120)
    try:
        return json.loads(p.stdout)
    except ValueError:
        return {"error": p.stderr[-300:]}


def gpu_used_mib() -> int:
    """The most any GPU has in use (every card must be free before the next case)."""
    p = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                       capture_output=True, text=True, timeout=30)
    return max(int(x) for x in p.stdout.split())


def gpu_count() -> int:
    p = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], capture_output=True, text=True,
                       timeout=30)
    return len(p.stdout.split())


def wait_free(limit: float = 60.0) -> int:
    t0 = time.monotonic()
    used = gpu_used_mib()
    while used > 1024 and time.monotonic() - t0 < limit:
        time.sleep(1)
        used = gpu_used_mib()
    return used


def kill_group(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.wait(timeout=30)


def run_case(name: str, out: Path) -> dict:
    truth, src, env, cotenant, note = CASES[name]
    res: dict = {"case": name, "truth": truth, "note": note}
    job = out / f"{name}.py"
    job.write_text(src)
    log = out / f"{name}.log"
    hog = None
    if name.startswith("mgpu_") and gpu_count() < 2:
        res["skipped"] = "needs two GPUs"
        return res
    if cotenant:
        hog_env = {**os.environ, **({"CUDA_VISIBLE_DEVICES": str(cotenant[2])} if len(cotenant) > 2 else {})}
        hog = subprocess.Popen([PY, "-c", HOG, cotenant[0], str(cotenant[1])], stdout=subprocess.PIPE, text=True,
                               start_new_session=True, env=hog_env)
        line = hog.stdout.readline() if hog.stdout else ""
        res["cotenant"] = line.strip()
    cmd = [PY, str(job)]
    if name == "shm_64m":
        # a private mount namespace whose /dev/shm is 64 MB; explain --here runs inside it too
        inner = (f"mount -t tmpfs -o size=64m tmpfs /dev/shm && cd {os.getcwd()} && "
                 f"timeout 120 {PY} {job} > {log} 2>&1; echo EXIT=$? >> {log}; "
                 f"for h in '' --here; do {PY} -m oomdoctor explain --format json {log} $h > {log}.explain$h.json; done")
        p = subprocess.run(["unshare", "-m", "sh", "-c", inner], capture_output=True, text=True, timeout=300)
        if "EXIT=" not in (log.read_text() if log.exists() else ""):  # (explain exits 1 on a failure found)
            res["skipped"] = f"no private /dev/shm here: {p.stderr.strip()[-200:]}"
            return res
        res["job_rc"] = log.read_text().rsplit("EXIT=", 1)[-1].strip()
        for here, suffix in ((False, ""), (True, "--here")):
            d = json.loads((out / f"{name}.log.explain{suffix}.json").read_text() or "{}")
            res["here" if here else "text"] = summarise(d)
        return res
    t0 = time.monotonic()
    with log.open("w") as fh:
        job_p = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, **env},
                                 start_new_session=True)
        try:
            res["job_rc"] = job_p.wait(timeout=240)
        except subprocess.TimeoutExpired:
            res["job_rc"] = "timeout"
    res["job_seconds"] = round(time.monotonic() - t0, 1)
    # the job's children (RANKS) may still hold the GPU, as leftovers do: explain runs before they go
    res["text"] = explain(log, False)
    res["here"] = explain(log, True)
    res["facts"] = deciding_facts()
    for code, src in CODES.items():
        res[f"{code}_text"] = explain(log, False, src)
        res[f"{code}_here"] = explain(log, True, src)
    text = log.read_text(errors="replace")
    m = _PASTE.search(text)
    if m and truth != "none":
        pasted = out / f"{name}.pasted.log"
        pasted.write_text(m.group(0).strip() + "\n")
        res["pasted_line"] = m.group(0).strip()[-200:]
        res["pasted_text"] = explain(pasted, False)
        res["pasted_here"] = explain(pasted, True)
        for code, src in CODES.items():
            res[f"{code}_pasted_here"] = explain(pasted, True, src)
    kill_group(job_p)
    if hog:
        kill_group(hog)
    res["gpu_used_after_mib"] = wait_free()
    return res


def top(r: dict | None) -> str:
    if not r:
        return "-"
    if r.get("error"):
        return "error"
    rk = r.get("ranked") or []
    return f"{rk[0]} {r.get('confidence') or 0:.2f}" if rk else "no answer"


def parse_cli(cases: dict) -> tuple[Path, list[str]]:
    """OUTDIR [--only NAME ...] [--code NAME=PATH ...] (also read every log with that source tree); shared by
    the validation scripts that run cases one by one."""
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--code", action="append", default=[], help="NAME=PATH: also read every log with that source tree")
    a = ap.parse_args()
    for c in a.code:
        name, _, path = c.partition("=")
        CODES[name] = str(Path(path).resolve())
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    return out, a.only or list(cases)


def run_cases(names: list[str], run_case, out: Path, describe, on_error) -> None:
    """Each case in turn, timed; one case's failure must not lose the others (its error recorded, the GPU
    waited for); results.json rewritten after each case; `describe(name, result)` is its printed line."""
    results = []
    for n in names:
        t0 = time.monotonic()
        try:
            r = run_case(n, out)
        except Exception as e:  # noqa: BLE001 - one case's failure must not lose the others
            r = {**on_error(n), "case": n, "error": repr(e)[:300]}
            wait_free()
        r["seconds"] = round(time.monotonic() - t0, 1)
        results.append(r)
        print(describe(n, r), flush=True)
        (out / "results.json").write_text(json.dumps(results, indent=1))


def _describe(n: str, r: dict) -> str:
    lines = [f"{n:26} truth {r['truth']:18} text {top(r.get('text')):26} here {top(r.get('here')):26} "
             f"pasted {top(r.get('pasted_text')):24} pasted+here {top(r.get('pasted_here')):24} "
             f"{r.get('skipped') or r.get('error') or ''} ({r['seconds']} s)"]
    for name in CODES:
        lines.append(f"{'':26} {name:>24} text {top(r.get(f'{name}_text')):26} here {top(r.get(f'{name}_here')):26} "
                     f"pasted+here {top(r.get(f'{name}_pasted_here')):24}")
    return "\n".join(lines)


def main() -> int:
    out, names = parse_cli(CASES)
    print(f"GPU used before: {gpu_used_mib()} MiB", flush=True)
    run_cases(names, run_case, out, _describe, lambda n: {"truth": CASES[n][0]})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
