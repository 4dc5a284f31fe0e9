"""An MPS control daemon killed without `quit` (written for validation, session 16, before any run).

Session 15 left this unvalidated: a daemon that dies without `quit` (SIGKILL, the node's OOM killer, a crashed
device-plugin pod). What does it leave in the pipe directory, does a CUDA client still run, and what do
`doctor`, `bundle` (read back with `doctor --bundle`) and `explain --here` say then? And does oomdoctor's
liveness test (a connection to the control socket, closed at once) leave a running daemon unharmed?

Steps (private pipe and log directories under /tmp/oomd-mps; no setting of the card is changed):
 1. start a daemon; a client allocates 1 GiB (works under MPS?); `doctor` in the client's environment;
    `nvidia-cuda-mps-control` `get_server_list` after doctor's connection (the daemon still answers?); a second
    client (still works?).
 2. SIGKILL the control daemon (pid from its pid file); list the pipe directory; a client with the pipe
    variable (runs? hangs? its error, 90 s limit); `doctor`; `bundle` + `doctor --bundle`; an OOM log of a job
    too big for the card (made without MPS) read with `explain --here` in the client's environment.
 3. kill what is left of MPS (servers started by this daemon), remove the directories.

Usage (device machine): PYTHONPATH=src:/tmp/site python3 validation/mps_killed_daemon_gpu.py OUTDIR
Writes OUTDIR/results.json and the logs; prints a summary.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import doctor_mps_gpu as D  # noqa: E402
import explain_here_gpu as H  # noqa: E402
import explain_here_gpu2 as H2  # noqa: E402

PY = sys.executable
CLIENT = ("import torch, time; t0 = time.time(); x = torch.empty(1 << 30, dtype=torch.uint8, device='cuda'); "
          "torch.cuda.synchronize(); print('client ok', round(time.time() - t0, 2), 's', flush=True)")
TOO_BIG = ("import torch; total = torch.cuda.get_device_properties(0).total_memory\n"
           "w = [torch.empty(1 << 30, dtype=torch.uint8, device='cuda') for _ in range(int(0.6 * total) >> 30)]\n"
           "x = torch.empty(int(0.6 * total), dtype=torch.uint8, device='cuda')\n")


def client(env: dict[str, str], code: str = CLIENT, limit: float = 90.0) -> dict:
    t0 = time.monotonic()
    try:
        p = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=limit, env=env)
        return {"rc": p.returncode, "seconds": round(time.monotonic() - t0, 1),
                "out": (p.stdout + p.stderr).strip()[-400:]}
    except subprocess.TimeoutExpired:
        return {"rc": None, "seconds": limit, "out": f"hung: no answer in {limit:.0f} s"}


def listing(pipe: Path) -> list[str]:
    try:
        return sorted(os.listdir(pipe))
    except OSError as e:
        return [f"error: {e}"]


def mps_fact(env: dict[str, str]) -> dict:
    code = ("from oomdoctor.collectors.machine import live_context; from oomdoctor.collectors.sharing import "
            "collect_sharing; import json; e = [x for x in collect_sharing(live_context()) if x.key == 'sharing.mps'][0]; "
            "print(json.dumps({'value': getattr(e, 'value', None), 'source': getattr(e, 'source', None)}, default=str))")
    p = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    try:
        return json.loads(p.stdout)
    except ValueError:
        return {"error": (p.stderr or p.stdout)[-300:]}


def bundle_then_doctor(env: dict[str, str], out: Path) -> dict:
    b = out / "killed.tar.gz"
    p = subprocess.run([PY, "-m", "oomdoctor", "bundle", "-o", str(b)], capture_output=True, text=True, timeout=300,
                       env=env)
    if p.returncode not in (0, 1):
        return {"bundle_rc": p.returncode, "error": (p.stderr or p.stdout)[-300:]}
    return {"bundle_rc": p.returncode, "doctor_bundle": D.doctor(D.clean_env(), ["--bundle", str(b)])}


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    pipe = H2.PRIVATE_PIPE
    res: dict = {}
    # the OOM log first, without MPS (a job too big for the whole card)
    log = out / "too_big.log"
    p = subprocess.run([PY, "-c", TOO_BIG], capture_output=True, text=True, timeout=300, env=D.clean_env())
    log.write_text(p.stdout + p.stderr)
    res["too_big_rc"] = p.returncode
    why = H2.mps_start(None, pipe)
    if why:
        res["skipped"] = why
        print(json.dumps(res, indent=1))
        (out / "results.json").write_text(json.dumps(res, indent=1))
        return 0
    env = {**D.clean_env(), "CUDA_MPS_PIPE_DIRECTORY": str(pipe)}
    res["1_listing"] = listing(pipe)
    res["1_client"] = client(env)
    res["1_fact"] = mps_fact(env)
    res["1_doctor"] = D.doctor(env, [])
    res["1_server_list_after_doctor"] = H2.mps_control("get_server_list", pipe)
    res["1_client_after_doctor"] = client(env)
    pid_text = (pipe / "nvidia-cuda-mps-control.pid").read_text().strip() if (pipe / "nvidia-cuda-mps-control.pid").exists() else ""
    res["2_daemon_pid"] = pid_text
    ps = subprocess.run(["ps", "-eo", "pid,comm"], capture_output=True, text=True, timeout=10).stdout
    res["2_mps_processes_before_kill"] = [ln.strip() for ln in ps.splitlines() if "mps" in ln]
    if pid_text.isdigit():
        os.kill(int(pid_text), signal.SIGKILL)
        time.sleep(2)
    ps = subprocess.run(["ps", "-eo", "pid,comm"], capture_output=True, text=True, timeout=10).stdout
    res["2_mps_processes_after_kill"] = [ln.strip() for ln in ps.splitlines() if "mps" in ln]
    res["2_listing"] = listing(pipe)
    res["2_client"] = client(env)
    res["2_fact"] = mps_fact(env)
    res["2_doctor"] = D.doctor(env, [])
    res["2_bundle"] = bundle_then_doctor(env, out)
    res["2_explain_here"] = H.explain(log, True, env=env)
    res["2_explain_text"] = H.explain(log, False)
    # 3. clean up: MPS servers this daemon started, then the directories
    for ln in res["2_mps_processes_after_kill"]:
        pid, _, comm = ln.partition(" ")
        if pid.isdigit() and "mps" in comm:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass
    time.sleep(2)
    res["3_client_after_cleanup"] = client(env)
    res["3_client_without_pipe_variable"] = client(D.clean_env())
    (out / "results.json").write_text(json.dumps(res, indent=1, default=str))
    print(json.dumps(res, indent=1, default=str)[:11000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
