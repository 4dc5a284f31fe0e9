"""After a failed run: the kernel log's OOM kills of the job, kept in run.json for `report` to judge.

Read when the command died of SIGKILL, exited non-zero (a launcher such as torchrun exits 1 when the OOM killer
took one of its ranks) or when one of its processes vanished while it ran (launch decides; this reads and matches).

The kernel log is the whole ring buffer since boot, and a pid number is reused: matching on the pid alone
read an old kill of another program (or a user's `kill -9` after it) as an OOM kill of the job (review). So
only lines stamped after the job's start count (`[secs]` is the kernel's monotonic clock, the one
time.monotonic() reads on Linux). Then the pid decides and the name breaks the tie:

- a pid the sampler saw in the job in its last seconds (`live_at_end`) is the job's, whatever name the
  line gives: reusing it since would take the kernel handing out every other free pid first;
- a pid the job held earlier may have been reused by another program since: the line's name must then be
  one of the job's (read on any of its processes), or one PyTorch gives its threads (`pt_main_thread`,
  `pt_data_worker`...: the kernel prints the main thread's name, and a rename after the sampler's last
  read was otherwise taken for another program). Names compare as the kernel keeps them, 15 characters.

Inside a pid namespace other than the host's (a container) the log's pids are the host's, not the ones
the sampler saw: there only the name and time can match, a name read on the job's processes (a PyTorch
thread name alone would match every PyTorch job on the machine), and no match means unknown, not "no
kill". The matched lines (at most MAX_LINES, each through the redactor) go to run.json; analysis.kill decides.
"""

from __future__ import annotations

import os
import time
from typing import Any

from oomdoctor.collectors.context import CommandRunner
from oomdoctor.collectors.kernel_log import read_dmesg
from oomdoctor.knowledge.process_names import comm as kernel_comm
from oomdoctor.knowledge.process_names import is_torch_name
from oomdoctor.parsers.kernlog import line_uptime, parse_oom_kills
from oomdoctor.redact import redact_text

DMESG_TIMEOUT_S = 2.0
MAX_LINES = 20
RSS_FIELDS = ("anon_rss_kb", "file_rss_kb", "shmem_rss_kb")  # the killed process's memory, as the kill line gives it
INIT_PID_NS_INODE = 4026531836  # PROC_PID_INIT_INO: the host's (initial) pid namespace


def start_marks() -> dict[str, Any]:
    """What run.json needs at the start: the monotonic clock (the kernel log's time) and the pid namespace."""
    return {"start_monotonic": time.monotonic(), "pid_namespace": pid_namespace()}


def pid_namespace(proc: str = "/proc") -> str:
    """"init" (the host's), "other" (a container's own), or "unknown". The inode of /proc/self/ns/pid tells
    it; NSpid in /proc/self/status with more than one value says "other" too (a /proc of an outer namespace)."""
    try:
        with open(os.path.join(proc, "self/status"), encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("NSpid:") and len(line.split()) > 2:
                    return "other"
    except OSError:
        pass
    try:
        return "init" if os.stat(os.path.join(proc, "self/ns/pid")).st_ino == INIT_PID_NS_INODE else "other"
    except OSError:
        return "unknown"


def _named(comm: str, names: set[str]) -> bool:
    return kernel_comm(comm) in {kernel_comm(n) for n in names}


def _comm_match(comm: str, own: set[str] | None, every: set[str]) -> bool | None:
    """Is the line's name one of this pid's process? True: a name read on it, on another process of the job,
    or one PyTorch gives its threads. False: other names were read on it. None: no name was read on it."""
    if _named(comm, own or set()) or _named(comm, every) or is_torch_name(comm):
        return True
    return False if own else None


def kernel_oom_kills(seen: dict[int, set[str]], start_monotonic: float | None, namespace: str = "init",
                     runner: CommandRunner | None = None, live_at_end: set[int] | None = None) -> dict[str, Any]:
    """{"kernel_oom_kills": [...], "kernel_oom_kill": bool} or {"kernel_log": why-unknown, ...}.

    `seen`: pid -> the names the sampler saw for it; `live_at_end`: the pids it saw in the job in its last
    seconds (None: not known). A kill line counts when it is stamped after the start (a line without a time
    stamp is kept: the time is then unknown) and names a process of the job: its pid, held to the end or with
    a name of the job (see the module's docstring); in another pid namespace, a name read on the job."""
    lines, why = read_dmesg(runner or CommandRunner(), DMESG_TIMEOUT_S)
    if lines is None:
        return {"kernel_log": why[:200]}
    every = set().union(*seen.values()) if seen else set()
    kept = []
    for k in parse_oom_kills(lines):
        t = line_uptime(k["text"])
        if t is not None and start_monotonic is not None and t < start_monotonic:
            continue  # before the job started: another program's kill, its pid maybe reused since
        entry: dict[str, Any] = {"pid": k["pid"], "comm": redact_text(k["comm"]), "uptime": t,
                                 **{f: k[f] for f in RSS_FIELDS if isinstance(k.get(f), int)}}
        if namespace == "other":
            entry.update(pid_match=None, comm_match=_named(k["comm"], every))
        else:
            pid_match = k["pid"] in seen
            entry.update(pid_match=pid_match,
                         comm_match=_comm_match(k["comm"], seen.get(k["pid"]), every) if pid_match else None)
            if live_at_end is not None and pid_match:
                entry["pid_live_at_end"] = k["pid"] in live_at_end
        if entry["pid_match"] or entry["comm_match"]:
            kept.append({**entry, "text": redact_text(k["text"])[:500]})
    kept = kept[-MAX_LINES:]
    out: dict[str, Any] = {"kernel_oom_kills": kept}
    if namespace == "other":
        if any(k["comm_match"] for k in kept):
            out["kernel_oom_kill"] = True
        else:
            out["kernel_log"] = ("the kernel log names pids of another pid namespace (the host's); no OOM kill "
                                 "after the job's start names its process")
    else:
        out["kernel_oom_kill"] = any(k["pid_match"] and (k["comm_match"] is not False or k.get("pid_live_at_end"))
                                     for k in kept)
    return out
