"""run.json for `oomdoctor.watch` and "does this directory already hold a recording?". Never raises.

A watch() run had no run.json, and the report then called every one of them "cut short" (session 27).
watch() now writes one at the start (`recorded_by: "watch"`, a start, no exit status: a process killed
inside the block stays "cut short", as it should) and finishes it when the block is left: `end`,
`returncode: null`, `ended_by: "watch"`, and `exception` when the block raised. The Hugging Face and
Lightning callbacks write the same file (`block` says which). Ranks of one job (one watch per process,
same directory, on one node or several: job_key) share the file: the first creates it, each leaving one
updates it under a lock taken for at most LOCK_WAIT_S; an exception, once written, is never replaced by a
clean end.

A directory holds another run when it has a timeline or a run.json that is not this job's: `record`
refuses it, watch() records into a fresh sibling (`RUN_DIR-2`, ...) so two runs never mix.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from typing import Any

from oomdoctor._version import __version__
from oomdoctor.facts import recording
from oomdoctor.redact import redact_manifest

LOCK_WAIT_S = 1.0
MAX_SIBLINGS = 100
PROCS_DIR = ".procs"  # one empty file per watching process, by machine: PROCS_DIR/HOST/PID-START-pidnsNS


def holds_recording(run_dir: str) -> bool:
    """True when run_dir already has a run.json or a timeline: a recording, finished or not."""
    try:
        names = os.listdir(run_dir)
    except OSError:
        return False
    return any(n == recording.RUN_META or (n.startswith(recording.TIMELINE_PREFIX) and n.endswith(".jsonl"))
               for n in names)


def _start_time(pid: int) -> str:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22): with the pid, one process."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return "?"


def _int_env(*names: str) -> int | None:
    for n in names:
        v = os.environ.get(n, "").strip()
        if v.isascii() and v.isdigit() and int(v) > 0:
            return int(v)
    return None


def world_size() -> int | None:
    """How many processes of the job watch (the launcher's figure), 1 for a lone process, None if unknown."""
    return _int_env("WORLD_SIZE", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE")


_LOOPBACK = ("localhost", "127.", "::1", "0:0:0:0:0:0:0:1", "ip6-localhost")


def _namespace(kind: str) -> str:
    """This process's `kind` namespace ("pid", "net") as the kernel numbers it (the inode of /proc/self/ns/KIND),
    "?" where it cannot be read: two processes with the same number share the namespace."""
    try:
        return str(os.stat(f"/proc/self/ns/{kind}").st_ino)
    except OSError:
        return "?"


def _pid_namespace() -> str:
    return _namespace("pid")


def _rendezvous() -> str | None:
    """The point every rank of a torch.distributed job connects to, MASTER_ADDR:MASTER_PORT. A loopback address is
    every single-node job's, but its port is held on that machine (in that network namespace) while the job runs:
    with the machine's name and namespace, it names the job there (Lightning's strategy="ddp": rank 0 is the
    user's script, the other ranks its children, so no parent process is theirs all)."""
    addr, port = os.environ.get("MASTER_ADDR", "").strip(), os.environ.get("MASTER_PORT", "").strip()
    if not addr or not port:
        return None
    if addr.lower().startswith(_LOOPBACK):
        return f"{socket.gethostname()}:net{_namespace('net')}:{addr}:{port}"
    return f"{addr}:{port}"


def job_key() -> str:
    """What the processes of one job share, on every node, and the next run does not (docs/record.md, "One run
    per directory"): the launcher's run id (torchrun's TORCHELASTIC_RUN_ID); for a job of several processes the
    rendezvous point its ranks connect to (MASTER_ADDR:MASTER_PORT; a loopback address with the machine), else
    the scheduler's job (Slurm's job and step, the PMIx namespace of mpirun/prterun, LSF's or PBS's job id); else
    the parent process (mp.spawn: the ranks are its children), else this process.

    The rendezvous comes before the scheduler's ids: an LSF or PBS job id is the whole allocation's, and a Slurm
    step can run several torchruns, each with a port of its own; two of them side by side were one run. Without a
    key shared across nodes, each node's ranks found the others' run.json "another run" and recorded into DIR-2,
    DIR-3... A key can be reused by the next run (a fixed --rdzv-id or MASTER_PORT): once `world_size` blocks
    have ended, or every process of the run on this machine is gone, the job is over (choose_dir).
    JOB_COMPLETION_INDEX (a Kubernetes Indexed Job's pod index) says a process is one of several, not which job
    it belongs to."""
    env = os.environ
    run_id = env.get("TORCHELASTIC_RUN_ID", "")
    if run_id and run_id != "none":
        return f"torchelastic:{run_id}"
    ranked = any(k in env for k in ("RANK", "LOCAL_RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK", "JOB_COMPLETION_INDEX"))
    size = world_size()
    if size == 1:  # a job of one process (RANK=0 WORLD_SIZE=1 and a fixed port, its own): itself, nothing shared
        ranked = False
    if (size or 1) > 1 or ranked:
        if (rdzv := _rendezvous()) is not None:
            return f"rendezvous:{rdzv}"
        if env.get("SLURM_JOB_ID") and env.get("SLURM_STEP_ID") and (size or 1) > 1:
            return f"slurm:{env['SLURM_JOB_ID']}.{env['SLURM_STEP_ID']}"
        for var, name in (("PMIX_NAMESPACE", "pmix"), ("LSB_JOBID", "lsf"), ("PBS_JOBID", "pbs")):
            if env.get(var, "").strip():
                return f"{name}:{env[var].strip()}"
    spawned = False
    try:
        import multiprocessing

        spawned = multiprocessing.parent_process() is not None
    except Exception:
        pass
    host = socket.gethostname()
    if spawned or ranked:
        ppid = os.getppid()
        return f"parent:{host}:{ppid}:{_start_time(ppid)}"
    return f"process:{host}:{os.getpid()}:{_start_time(os.getpid())}"


def _host_dir(run_dir: str) -> str:
    host = "".join(c if c.isalnum() or c in "-_." else "_" for c in socket.gethostname())[:200].lstrip(".") or "host"
    return os.path.join(run_dir, PROCS_DIR, host)


_held: dict[str, int] = {}  # run_dir -> the open, locked mark of this process in it


def note_process(run_dir: str) -> None:
    """Leave this process's mark in the run (RUN_DIR/.procs/HOST/PID-START-pidnsNS, empty) and hold a lock on it
    until release_process: a later process of the same key on this machine tells a live run from a dead one by it
    (_gone_here). Never raises."""
    try:
        d = _host_dir(run_dir)
        os.makedirs(d, exist_ok=True)
        pid = os.getpid()
        fd = os.open(os.path.join(d, f"{pid}-{_start_time(pid)}-pidns{_pid_namespace()}"),
                     os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)  # written to: an exclusive lock on NFS needs it
    except Exception:
        return
    try:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except Exception:
        pass  # no locks on this filesystem: a process of another pid namespace then reads the mark as alive
    old = _held.pop(run_dir, None)
    _held[run_dir] = fd
    if old is not None:
        _close(old)


def release_process(run_dir: str) -> None:
    """This process's block in run_dir ended: its mark's lock goes (the mark stays). Never raises."""
    fd = _held.pop(run_dir, None)
    if fd is not None:
        _close(fd)


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def _alive(pid: int, start: str) -> bool:
    if start != "?":
        return _start_time(pid) == start  # the same pid and start time: the same process
    try:
        os.kill(pid, 0)
        return True
    except PermissionError:
        return True
    except OSError:
        return False


def _lock_held(path: str) -> bool:
    """The mark of a process in another pid namespace (a pod with hostNetwork, docker --net=host: the machine's
    name, pids of its own): its pid names nothing here, its lock tells. True while it is held, or when it cannot
    be checked (no locks on this filesystem): joining a live run by mistake splits nothing."""
    try:
        import fcntl

        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    except Exception:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # shared: two processes checking do not see each other
        return False
    except BlockingIOError:
        return True
    except Exception:
        return True
    finally:
        _close(fd)  # closing it drops the lock taken


def _gone_here(run_dir: str) -> bool:
    """True when processes of this run ran on this machine and none of them is alive now: the run is over here
    (killed, or ended), so a process of the same key is the next run's. False when none ran here (the first rank
    of a node joins on the key and blocks) or one is alive. A mark of this pid namespace is checked by its pid and
    start time, one of another namespace by its lock (_lock_held)."""
    d = _host_dir(run_dir)
    try:
        names = os.listdir(d)
    except OSError:
        return False
    here = _pid_namespace()
    marks = 0
    for name in names[:10_000]:
        pid, start, ns = (name.split("-", 2) + ["", ""])[:3]
        if not pid.isdigit():
            continue
        marks += 1
        theirs = ns.removeprefix("pidns") if ns.startswith("pidns") else "?"  # "?": unknown, or an older mark
        if "?" not in (here, theirs) and theirs != here:
            alive = _lock_held(os.path.join(d, name))
        else:
            alive = _alive(int(pid), start)
        if alive:
            return False
    return marks > 0


def _read(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as f:
            meta = json.load(f)
        return meta if isinstance(meta, dict) else None
    except (OSError, ValueError):
        return None


def _ours(run_dir: str, key: str) -> bool:
    """This job's run.json, still running: joined. Once as many blocks ended as the job has processes (one for
    a lone process: a notebook cell run again), or every process of it on this machine is gone, the job is over
    and the next block is a new run; its timeline would otherwise be appended to the last one's, and a killed
    run's evidence mixed with the next run's."""
    meta = _read(os.path.join(run_dir, recording.RUN_META))
    if not meta or meta.get("recorded_by") != "watch" or meta.get("job") != key or _gone_here(run_dir):
        return False
    size, ended = meta.get("world_size"), meta.get("blocks_ended")
    return not (isinstance(size, int) and isinstance(ended, int) and ended >= size)


def choose_dir(run_dir: str, key: str) -> str:
    """run_dir, or the first `run_dir-N` free of another run's recording (this job's own is joined)."""
    base = str(run_dir).rstrip("/") or str(run_dir)
    if not holds_recording(base) or _ours(base, key):
        return base
    for n in range(2, MAX_SIBLINGS + 2):
        cand = f"{base}-{n}"
        if not holds_recording(cand) or _ours(cand, key):
            return cand
    return f"{base}-{int(time.time())}-{os.getpid()}"


def write(path: str, meta: dict[str, Any], exclusive: bool = False) -> None:
    """run.json written whole or not at all (a temporary file renamed, or linked when `exclusive`)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=1)
    if exclusive:
        try:
            os.link(tmp, path)  # atomic create-if-absent: the first rank's run.json wins
        finally:
            os.unlink(tmp)
    else:
        os.replace(tmp, path)


@contextlib.contextmanager
def _locked(run_dir: str) -> Iterator[None]:
    """An advisory lock on RUN_DIR/.run.json.lock, waited for at most LOCK_WAIT_S (then written without)."""
    fd = None
    try:
        import fcntl

        fd = os.open(os.path.join(run_dir, ".run.json.lock"), os.O_CREAT | os.O_RDWR, 0o600)
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.01)
    except Exception:
        pass
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)


def begin(run_dir: str, key: str, block: str = "watch") -> None:
    """Create run.json for a watch() run unless this job's other processes already did. `block`: what is
    recorded ("watch", or a callback's: "hf", "lightning.fit", ...), for the report's wording."""
    try:
        meta = {"schema_version": recording.SCHEMA_VERSION, "format": recording.FORMAT, "tool_version": __version__,
                "argv": redact_manifest(list(sys.argv)), "cwd": os.getcwd(), "host": socket.gethostname(),
                "start": time.time(), "recorded_by": "watch", "block": block, "job": key,
                "world_size": 1 if key.startswith("process:") else world_size()}
        write(os.path.join(run_dir, recording.RUN_META), meta, exclusive=True)
    except Exception:
        pass


def finish(run_dir: str, exc: BaseException | None, is_oom: bool, exited: bool = False) -> None:
    """Record that the watched block ended: cleanly, by an exception (its type; an OOM as such), or (`exited`)
    by the process exiting inside it (a callback's training that never reached its end)."""
    try:
        path = os.path.join(run_dir, recording.RUN_META)
        with _locked(run_dir):
            meta = _read(path)
            if meta is None or meta.get("recorded_by") != "watch":
                return
            ended = meta.get("blocks_ended")
            meta.update({"end": time.time(), "returncode": None, "ended_by": "watch",
                         "blocks_ended": (ended if isinstance(ended, int) else 0) + 1})
            if exc is not None and not isinstance(meta.get("exception"), dict):  # the first one stays
                meta["exception"] = {"type": type(exc).__name__, "oom": bool(is_oom), "pid": os.getpid()}
            if exited:
                meta["exited_inside"] = True
            write(path, meta)
    except Exception:
        pass
