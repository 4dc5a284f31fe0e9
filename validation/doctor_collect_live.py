"""Device validation of the live collectors and the --probe path (run on a GPU machine).

1. collect_live(probe=True) on an idle GPU.
2. A second process (the "hog") takes all but ~300 MiB of GPU 0 with a plain torch allocation and
   stays alive; collect_live(probe=True) runs again. The hog must appear in sharing.processes with
   its memory, and the context probes must fail (the seed's "CUDA error: out of memory" at context
   creation while the GPU is "not really full" for NVML-reading tools).
3. A bundle is written and read back (bundle -> collect_bundle) to check the live path writes
   what the offline path reads.

Usage: python validation/doctor_collect_live.py OUTDIR [--leave-mib 300] [--attempts 5] [--skip-idle] [--skip-bundle]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HOG = r"""
import sys, time, torch
leave = int(sys.argv[1]) * 1024 * 1024
free, total = torch.cuda.mem_get_info(0)
x = torch.empty(free - leave, dtype=torch.uint8, device="cuda:0")
torch.cuda.synchronize()
free2, _ = torch.cuda.mem_get_info(0)
print(f"READY {free - leave} {free2}", flush=True)
sys.stdin.read()
"""


def summary(facts) -> dict:
    out = {}
    for key in ("driver.version", "driver.flavour", "cuda.driver_max", "kernel.release", "os.name", "torch.version",
                "cuda.torch_runtime", "driver.gpu_names", "probe.context", "probe.context_bytes", "probe.alloc",
                "probe.mem_get_info", "sharing.processes", "driver.nvml_error", "runtime.container", "shm.size_bytes",
                "cgroup.memory_limit_bytes", "cuda.arch_list", "cuda.device_capabilities"):
        e = facts.get(key)
        out[key] = None if e is None else e.to_json()
    gpus = facts.value("driver.gpus") or []
    out["gpu0_memory"] = {k: gpus[0].get(k) for k in ("memory_total_bytes", "memory_used_bytes", "memory_free_bytes",
                                                      "memory_reserved_bytes")} if gpus else None
    return out


def timed_collect(label: str, outdir: Path, attempts: int) -> dict:
    from oomdoctor.collectors.machine import collect_live

    t0 = time.monotonic()
    facts = collect_live(probe=True, probe_attempts=attempts)
    seconds = round(time.monotonic() - t0, 2)
    (outdir / f"facts_{label}.json").write_text(json.dumps(facts.to_json(), indent=1, default=str))
    s = summary(facts)
    s["collect_seconds"] = seconds
    print(f"== {label}: collect_live(probe=True) took {seconds} s")
    print(json.dumps(s, indent=1, default=str))
    return s


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--leave-mib", type=int, default=300)
    ap.add_argument("--attempts", type=int, default=5)
    ap.add_argument("--skip-idle", action="store_true")
    ap.add_argument("--skip-bundle", action="store_true")
    args = ap.parse_args()
    outdir = Path(args.outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    results = {"own_pid": os.getpid(), "leave_mib": args.leave_mib, "attempts": args.attempts}
    if not args.skip_idle:
        results["idle"] = timed_collect("idle", outdir, args.attempts)

    hog = subprocess.Popen([sys.executable, "-c", HOG, str(args.leave_mib)], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    line = hog.stdout.readline().strip()
    print(f"hog pid {hog.pid}: {line}")
    results["hog"] = {"pid": hog.pid, "ready": line}
    try:
        results["with_hog"] = timed_collect(f"with_hog_leave{args.leave_mib}", outdir, args.attempts)
        procs = (results["with_hog"]["sharing.processes"] or {}).get("value") or []
        found = [p for p in procs if p["pid"] == hog.pid]
        results["hog_found"] = found
        print(f"hog found in sharing.processes: {found}")
    finally:
        hog.stdin.close()
        hog.wait(timeout=60)

    if args.skip_bundle:
        (outdir / "summary.json").write_text(json.dumps(results, indent=1, default=str))
        return
    from oomdoctor.collectors.bundle_write import write_bundle
    from oomdoctor.collectors.machine import collect_bundle

    t0 = time.monotonic()
    write_bundle(outdir / "live-bundle.tar.gz")
    back = collect_bundle(outdir / "live-bundle.tar.gz")
    results["bundle_roundtrip"] = {"seconds": round(time.monotonic() - t0, 2),
                                   "driver.version": back.value("driver.version"),
                                   "cuda.driver_max": back.value("cuda.driver_max"),
                                   "torch.version": back.value("torch.version"),
                                   "cuda.arch_list": back.value("cuda.arch_list"),
                                   "driver.gpu_names": back.value("driver.gpu_names")}
    print("bundle round trip:", json.dumps(results["bundle_roundtrip"]))
    (outdir / "summary.json").write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
