"""`explain` (text, `--here`) under HAMi-core, the in-container limit of HAMi (written for validation, session 19).

docs/validation/explain.md listed HAMi as not validated: every HAMi case explain had read was a public report.
Here the real hook library is built from source (Project-HAMi/HAMi-core, `libvgpu.so`, LD_PRELOAD) and each
failure is made on purpose, its cause known by construction: a job past the container's limit
(CUDA_DEVICE_MEMORY_LIMIT) on a card with room; a limit set above the card and a job too big for the card (the
limit is not the cause); a co-tenant outside the container filling the card while the job is under its limit;
a job that catches its OOM and stays alive; a healthy run under a limit. Each log is read from the text
alone, with `--here` in the job's environment (a shell in the same container: LD_PRELOAD and the limit set),
and with `--here` from a host shell without them. Nothing here was used to write explain's rules; the
cases and their truths were written before the first run.

Usage (device machine): PYTHONPATH=src python3 validation/explain_here_hami.py OUTDIR --lib PATH/libvgpu.so
    [--only NAME ...] [--code start=PATH/TO/OTHER/src]
Writes OUTDIR/<case>.log, OUTDIR/results.json and prints a table.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import explain_here_gpu as H  # noqa: E402
import explain_here_gpu2 as H2  # noqa: E402

PY = sys.executable
LIB: list[str] = []  # the built libvgpu.so (--lib)
CACHE_DIR = Path("/tmp/oomd-hami")

# The job's need in GiB (NEED_GIB): under HAMi the device's total is the limit (cuDeviceTotalMem and
# cudaMemGetInfo are hooked), so the shares below are of the physical card, read outside the container.
NEED_ABS = H2.NEED.replace('need = float(os.environ["NEED"]) * total', 'need = float(os.environ["NEED_GIB"]) * GiB')
assert NEED_ABS != H2.NEED, "explain_here_gpu2.NEED changed: NEED_GIB is no longer applied"

# A job on the CUDA driver API itself (cuMemAlloc_v2, the symbol HAMi-core's hook exports): the C programs
# HAMi's own tests use, for where a framework's runtime reaches the driver by entry points the hook does not
# cover (CUDA 13: HAMi-core#233). NEED_GIB in 1 GiB blocks, then "done"; the driver's error name on failure.
DRIVER_JOB = r"""
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
int main(void) {
    CUdevice d; CUcontext c; CUdeviceptr p; const char *name = 0, *msg = 0;
    double need = atof(getenv("NEED_GIB") ? getenv("NEED_GIB") : "1");
    size_t total = 0, free_b = 0;
    setvbuf(stdout, NULL, _IONBF, 0);  /* one log file for both streams: keep their order */
    if (cuInit(0) || cuDeviceGet(&d, 0) || cuDevicePrimaryCtxRetain(&c, d) || cuCtxSetCurrent(c)) { fprintf(stderr, "context failed\n"); return 3; }
    cuMemGetInfo(&free_b, &total);
    printf("device memory: %.2f GiB total, %.2f GiB free; allocating %.1f GiB\n", total / 1073741824.0,
           free_b / 1073741824.0, need);
    for (int i = 0; i < (int)need; i++) {
        CUresult r = cuMemAlloc(&p, (size_t)1 << 30);
        if (r != CUDA_SUCCESS) {
            cuGetErrorName(r, &name); cuGetErrorString(r, &msg);
            fprintf(stderr, "cuMemAlloc of block %d (1 GiB) failed: %s (%s)\n", i, name, msg);
            return 1;
        }
    }
    printf("done\n");
    return 0;
}
"""


# The same job reaching the driver as CUDA runtimes before 11.3 did, by dlopen + dlsym: HAMi-core's exported
# dlsym hands back its hooks there (its build exports no cu* symbol, so a program linked to libcuda, DRIVER_JOB,
# bypasses it; run 3 found that with LD_DEBUG=bindings).
DLSYM_JOB = r"""
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
typedef CUresult (*f_init)(unsigned int);
typedef CUresult (*f_dev)(CUdevice *, int);
typedef CUresult (*f_retain)(CUcontext *, CUdevice);
typedef CUresult (*f_set)(CUcontext);
typedef CUresult (*f_info)(size_t *, size_t *);
typedef CUresult (*f_alloc)(CUdeviceptr *, size_t);
typedef CUresult (*f_name)(CUresult, const char **);
int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) { fprintf(stderr, "dlopen libcuda failed\n"); return 3; }
    f_init init = (f_init)dlsym(h, "cuInit"); f_dev dev = (f_dev)dlsym(h, "cuDeviceGet");
    f_retain retain = (f_retain)dlsym(h, "cuDevicePrimaryCtxRetain"); f_set set = (f_set)dlsym(h, "cuCtxSetCurrent");
    f_info info = (f_info)dlsym(h, "cuMemGetInfo_v2"); f_alloc alloc = (f_alloc)dlsym(h, "cuMemAlloc_v2");
    f_name name = (f_name)dlsym(h, "cuGetErrorName");
    CUdevice d; CUcontext c; CUdeviceptr p; const char *n = "?";
    double need = atof(getenv("NEED_GIB") ? getenv("NEED_GIB") : "1");
    size_t total = 0, free_b = 0;
    if (init(0) || dev(&d, 0) || retain(&c, d) || set(c)) { fprintf(stderr, "context failed\n"); return 3; }
    info(&free_b, &total);
    printf("device memory: %.2f GiB total, %.2f GiB free; allocating %.1f GiB\n", total / 1073741824.0,
           free_b / 1073741824.0, need);
    for (int i = 0; i < (int)need; i++) {
        CUresult r = alloc(&p, (size_t)1 << 30);
        if (r != CUDA_SUCCESS) {
            name(r, &n);
            fprintf(stderr, "cuMemAlloc of block %d (1 GiB) failed: %s\n", i, n);
            return 1;
        }
    }
    printf("done\n");
    return 0;
}
"""

# (truth, job source, job env, need (share of the card) or None, co-tenant (share of the card, outside the
# container) or None, limit (share of the card), note)
CASES: dict[str, tuple] = {
    "hami_limit": ("gpu_sharing_limit", NEED_ABS, {}, 0.3, None, 0.15,
                   "HAMi limit 15% of the card; job needs 30%"),
    "hami_limit_b": ("gpu_sharing_limit", NEED_ABS, {}, 0.5, None, 0.35,
                     "HAMi limit 35% of the card; job needs 50%"),
    "hami_limit_alive": ("gpu_sharing_limit", NEED_ABS, {"ALIVE": "1"}, 0.3, None, 0.12,
                         "HAMi limit 12% of the card; job needs 30%, catches the OOM and stays alive"),
    "hami_over_card": ("true_capacity", NEED_ABS, {}, 1.2, None, 3.0,
                       "HAMi limit above the card (300%); job needs 120% of the card (the limit is not the cause)"),
    "hami_cotenant": ("other_process", NEED_ABS, {}, 0.5, 0.6, 0.75,
                      "HAMi limit 75% of the card; a co-tenant outside the container holds 60%; job needs 50%"),
    "hami_healthy": ("none", H.HEALTHY, {}, None, None, 0.15, "healthy short run under a HAMi limit of 15% of the card"),
    "hami_driver_limit": ("gpu_sharing_limit", DRIVER_JOB, {}, 0.3, None, 0.15,
                          "driver-API job (C, cuMemAlloc) under a HAMi limit of 15%; needs 30%"),
    "hami_driver_cotenant": ("other_process", DRIVER_JOB, {}, 0.5, 0.6, 0.75,
                             "driver-API job under a HAMi limit of 75%; co-tenant outside holds 60%; needs 50%"),
    "hami_driver_healthy": ("none", DRIVER_JOB, {}, 0.05, None, 0.15,
                            "driver-API job needing 5% under a HAMi limit of 15%"),
    # run 3 (written before it ran): the driver reached by dlsym, as HAMi-core hooks it
    "hami_dlsym_limit": ("gpu_sharing_limit", DLSYM_JOB, {}, 0.3, None, 0.15,
                         "dlsym job under a HAMi limit of 15%; needs 30%"),
    "hami_dlsym_limit_b": ("gpu_sharing_limit", DLSYM_JOB, {}, 0.6, None, 0.4,
                           "dlsym job under a HAMi limit of 40%; needs 60%"),
    "hami_dlsym_cotenant": ("other_process", DLSYM_JOB, {}, 0.5, 0.6, 0.75,
                            "dlsym job under a HAMi limit of 75%; a co-tenant outside holds 60%; needs 50%"),
    "hami_dlsym_healthy": ("none", DLSYM_JOB, {}, 0.05, None, 0.15, "dlsym job needing 5% under a HAMi limit of 15%"),
}


def card_gib() -> float:
    """The physical card's memory, read outside the container (nvidia-smi without the hook)."""
    p = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits", "-i", "0"],
                       capture_output=True, text=True, timeout=30)
    return int(p.stdout.split()[0]) / 1024


def hami_env(name: str, limit: str) -> dict[str, str]:
    """What HAMi's device plugin puts in a container: the hook preloaded and the limit (a private shared-region
    file per case, so that no case reads another's accounting)."""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    Path("/tmp/vgpulock").mkdir(exist_ok=True)
    cache = CACHE_DIR / f"{name}.cache"
    cache.unlink(missing_ok=True)
    return {"LD_PRELOAD": LIB[0], "CUDA_DEVICE_MEMORY_LIMIT": limit, "CUDA_DEVICE_MEMORY_SHARED_CACHE": str(cache)}


def run_case(name: str, out: Path) -> dict:
    truth, src, jenv, need, cotenant, limit_share, note = CASES[name]
    card = card_gib()
    limit = f"{int(limit_share * card * 1024)}m"
    res: dict = {"case": name, "truth": truth, "note": note, "limit": limit, "card_gib": round(card, 1)}
    env = {**jenv, **hami_env(name, limit), **({"NEED_GIB": f"{need * card:.1f}"} if need else {})}
    log = out / f"{name}.log"
    if src is DRIVER_JOB or src is DLSYM_JOB:
        csrc, job = out / f"{name}.c", out / name
        csrc.write_text(src)
        cc = subprocess.run(["gcc", "-O1", "-o", str(job), str(csrc), "-I/usr/local/cuda/include", "-L/usr/local/cuda/lib64/stubs", "-lcuda", "-ldl"],
                            capture_output=True, text=True, timeout=120)
        if cc.returncode:
            res["skipped"] = "gcc: " + cc.stderr[-300:]
            return res
        argv = [str(job)]
    else:
        job = out / f"{name}.py"
        job.write_text(src)
        argv = [PY, str(job)]
    hog = job_p = None
    try:
        if cotenant:
            hog = subprocess.Popen([PY, "-c", H.HOG, "frac", str(cotenant)], stdout=subprocess.PIPE, text=True,
                                   start_new_session=True)
            res["cotenant"] = (hog.stdout.readline() if hog.stdout else "").strip()
        t0 = time.monotonic()
        with log.open("w") as fh:
            job_p = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, **env},
                                     start_new_session=True)
            if jenv.get("ALIVE"):
                res["job_state"] = H2.wait_for(log, "IDLE", job_p)
            else:
                try:
                    res["job_rc"] = job_p.wait(timeout=240)
                except subprocess.TimeoutExpired:
                    res["job_rc"] = "timeout"
        res["job_seconds"] = round(time.monotonic() - t0, 1)
        res["nvidia_smi_in_container"] = H2.nvml_processes(env)
        res["nvidia_smi_host"] = H2.nvml_processes({})
        res["text"] = H2.explain_with(log, env, [])
        res["here"] = H2.explain_with(log, env, ["--here"])
        res["here_outside"] = H2.explain_with(log, {"LD_PRELOAD": "", "CUDA_DEVICE_MEMORY_LIMIT": ""}, ["--here"])
        fp = subprocess.run([PY, "-c", H.FACTS], capture_output=True, text=True, timeout=120, env={**os.environ, **env})
        try:  # what --here read in the container's environment, kept whole for replays
            res["facts"] = json.loads(fp.stdout)
        except ValueError:
            res["facts"] = {"error": fp.stderr[-300:]}
        for code, csrc in H.CODES.items():
            res[f"{code}_text"] = H2.explain_with(log, env, [], csrc)
            res[f"{code}_here"] = H2.explain_with(log, env, ["--here"], csrc)
    finally:
        for p in (job_p, hog):
            if p is not None:
                H.kill_group(p)
        res["gpu_used_after_mib"] = H.wait_free()
    return res


def _describe(n: str, r: dict) -> str:
    lines = [f"{n:18} truth {r['truth']:18} text {H.top(r.get('text')):24} here {H.top(r.get('here')):24} "
             f"here_outside {H.top(r.get('here_outside')):24} {r.get('skipped') or r.get('error') or ''} ({r['seconds']} s)"]
    for code in H.CODES:
        lines.append(f"{'':18} {code:>24} text {H.top(r.get(f'{code}_text')):24} here {H.top(r.get(f'{code}_here')):24}")
    return "\n".join(lines)


def main() -> int:
    if "--lib" in sys.argv:
        i = sys.argv.index("--lib")
        LIB.append(str(Path(sys.argv[i + 1]).resolve()))
        del sys.argv[i:i + 2]
    if not LIB or not Path(LIB[0]).is_file():
        print("--lib PATH/libvgpu.so is required (build HAMi-core first)", file=sys.stderr)
        return 2
    out, names = H.parse_cli(CASES)
    print(f"GPU used before: {H.gpu_used_mib()} MiB; libvgpu: {LIB[0]}", flush=True)
    H.run_cases(names, run_case, out, _describe, lambda n: {"truth": CASES[n][0]})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
