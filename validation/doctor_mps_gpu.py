"""`doctor`, `bundle` and `explain --here` under a real MPS daemon (written for validation, session 15).

The MPS check (SHR002) and the `sharing.mps` collector had only unit tests. Here an MPS control daemon is
started by this script (no setting of the card is changed; `quit` after each case), once on a private pipe
directory (as the Kubernetes MPS device plugin mounts one: a client must carry CUDA_MPS_PIPE_DIRECTORY) and
once on the default /tmp/nvidia-mps (an admin's `nvidia-cuda-mps-control -d`: every CUDA process on the
machine is a client without any variable). For each: what `doctor --format json` finds (SHR002, and whether
the MPS server process is taken for a co-tenant by SHR010), from the job's environment and from a clean one;
`doctor --probe` under a pinned limit (its probes are MPS clients); a bundle taken under MPS read back with
`doctor --bundle`; and `explain --here` from a clean shell on a job that failed at the daemon's default
pinned limit (explain_here_gpu2.py's NEED job).

Usage (device machine): PYTHONPATH=src:/tmp/site python3 validation/doctor_mps_gpu.py OUTDIR
Writes OUTDIR/results.json and prints a table.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import explain_here_gpu as H  # noqa: E402
import explain_here_gpu2 as H2  # noqa: E402

PY = sys.executable


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("CUDA_MPS_")}


def start(private: bool, default_limit: str | None) -> tuple[dict[str, str], str | None]:
    """The MPS variables a client needs (none on the default pipe directory), and the reason the daemon
    cannot start (else None)."""
    pipe = H2.PRIVATE_PIPE if private else H2.DEFAULT_PIPE
    return ({"CUDA_MPS_PIPE_DIRECTORY": str(pipe)} if private else {}), H2.mps_start(default_limit, pipe)


def stop(client: dict[str, str]) -> None:
    H2.mps_stop(Path(client.get("CUDA_MPS_PIPE_DIRECTORY", str(H2.DEFAULT_PIPE))))


def doctor(env: dict[str, str], extra: list[str]) -> dict:
    p = subprocess.run([PY, "-m", "oomdoctor", "doctor", "--format", "json", *extra], capture_output=True, text=True,
                       timeout=300, env=env)
    try:
        d = json.loads(p.stdout)
    except ValueError:
        return {"rc": p.returncode, "error": (p.stderr or p.stdout)[-300:]}
    fs = d.get("findings") or []
    return {"rc": p.returncode, "verdict": d.get("verdict"),
            "findings": [f"{f['id']} {f['severity']}: {f['title'][:160]}" for f in fs
                         if f["id"].startswith(("SHR", "FWK", "PRC")) or f["severity"] in ("error", "critical")]}


def has(res: dict, fid: str) -> str:
    fs = res.get("findings") or []
    hit = [f for f in fs if f.startswith(fid + " ")]
    return hit[0][:70] if hit else "-"


# name: (private pipe dir?, the daemon's default limit, what the client adds, co-tenant share or None, action, expectation)
CASES = {
    "private_env_limit": (True, None, {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=20G"}, None, "doctor",
                          "SHR002 warning naming the 20 GiB pin; the MPS server not a co-tenant"),
    "private_env": (True, None, {}, None, "doctor", "SHR002 info (MPS in use)"),
    "private_clean_shell": (True, None, None, None, "doctor",
                            "no SHR002: a shell without the job's variables cannot find a private pipe directory"),
    "default_dir_clean_shell": (False, None, {}, None, "doctor", "SHR002 info from /tmp/nvidia-mps/control"),
    "default_dir_cotenant": (False, None, {}, 0.5, "doctor", "SHR002 info; the client holding 50% named (SHR010)"),
    "private_probe_limit": (True, None, {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=2G"}, None, "probe",
                            "probes run as MPS clients under a 2 GiB pin: no false probe failure"),
    "private_bundle_limit": (True, None, {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=20G"}, None, "bundle",
                             "doctor --bundle shows SHR002 warning with the pin"),
    "default_dir_explain": (False, "16G", {}, None, "explain",
                            "a job failing at the daemon's 16 GiB default pin: explain --here from a clean shell "
                            "gives gpu_sharing_limit first"),
}


def run_case(name: str, out: Path) -> dict:
    private, dlimit, add, cotenant, action, expect = CASES[name]
    res: dict = {"case": name, "expect": expect}
    client, why = start(private, dlimit)
    if why:
        stop(client)
        res["skipped"] = why
        return res
    env = clean_env() if add is None else {**clean_env(), **client, **add}
    hog = None
    try:
        if cotenant:
            hog = subprocess.Popen([PY, "-c", H.HOG, "frac", str(cotenant)], stdout=subprocess.PIPE, text=True,
                                   start_new_session=True, env={**clean_env(), **client})
            res["cotenant"] = (hog.stdout.readline() if hog.stdout else "").strip()
        if action == "doctor":
            res["doctor"] = doctor(env, [])
        elif action == "probe":
            res["doctor"] = doctor(env, ["--probe", "--probe-attempts", "3"])
        elif action == "bundle":
            b = out / f"{name}.tar.gz"
            p = subprocess.run([PY, "-m", "oomdoctor", "bundle", "-o", str(b)], capture_output=True, text=True,
                               timeout=300, env=env)
            res["bundle_rc"] = p.returncode
            res["doctor"] = doctor(clean_env(), ["--bundle", str(b)])
        else:
            log = out / f"{name}.log"
            with log.open("w") as fh:
                rc = subprocess.run([PY, "-c", H2.NEED], stdout=fh, stderr=subprocess.STDOUT, timeout=240,
                                    env={**env, "NEED": "0.25"}).returncode
            res["job_rc"] = rc
            res["text"] = H2.explain_with(log, {}, [])
            res["here"] = H2.explain_with(log, {}, ["--here"])
            res["log_tail"] = log.read_text(errors="replace")[-700:]
        res["nvidia_smi"] = H2.nvml_processes(env)
    finally:
        if hog is not None:
            H.kill_group(hog)
        stop(client)
        res["gpu_used_after_mib"] = H.wait_free()
    return res


def _describe(n: str, r: dict) -> str:
    d = r.get("doctor") or {}
    got = (f"SHR002 {has(d, 'SHR002')} | SHR010 {has(d, 'SHR010')} | verdict {str(d.get('verdict'))[:60]}"
           if d else f"text {H.top(r.get('text'))} here {H.top(r.get('here'))}")
    return f"{n:24} {got} {r.get('skipped') or r.get('error') or ''} ({r['seconds']} s)\n{'':24} expect: {r.get('expect')}"


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    print(f"GPU used before: {H.gpu_used_mib()} MiB", flush=True)
    H.run_cases(list(CASES), run_case, out, _describe, lambda n: {})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
