"""After a failed run: the kernel log's OOM kills of the job, kept in run.json for `report` to judge.

Read when the command died of SIGKILL, exited non-zero (a launcher such as torchrun exits 1 when the OOM killer
took one of its ranks) or when one of its processes vanished while it ran (launch decides; this reads and matches).

The kernel log is the whole ring buffer since boot, and a pid number is reused (pid_max may be 32768): matching on
the pid alone read an old kill of another program as an OOM kill of the job (review). So only lines stamped after
the job's start count (`[secs]` is the kernel's monotonic clock, the one time.monotonic() reads on Linux), and a
pid is the job's only at the times the job held it: the outside sampler keeps, per pid, each span from the last
look that did not find it to the first look that no longer did (launch.PidLives). A kill line of that pid stamped
inside a span is the job's whatever name it gives (the kernel prints the main thread's name, which PyTorch and
setproctitle change: `pt_main_thread`, `pt_data_worker`); one stamped outside every span is another program's
whatever its name, a PyTorch thread name included (another job's DataLoader worker has that name too). The name
is kept as more evidence (`comm_match`), compared as the kernel keeps names, 15 characters. A line without a
time stamp (printk.time=0) cannot be placed in a span and is put on no pid.

Inside a pid namespace other than the host's (a container) the log's pids are the host's, not the ones the
sampler saw: there a name read on the job's processes is needed (a PyTorch thread name alone would match every
PyTorch job on the machine), and a name alone is not enough either, since another container's `python` has the
same one (review: another pod's kill made a job's ValueError a host OOM). It takes one of: the kill line's cgroup
(`task_memcg`, or `oom_memcg` for a cgroup's own OOM) at or below the job's own cgroup path (from
/proc/self/cgroup at the start; inside a cgroup namespace that path is `/` and tells nothing), or the job's
cgroup `oom_kill` count rising while it ran (the sampler reads memory.events). A line whose cgroup is another, or
a count read that did not rise, is evidence against; with neither for nor against the kill is only possible.
The matched lines (at most MAX_LINES, each through the redactor) go to run.json; analysis.kill decides.
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
from oomdoctor.parsers.procfs import cgroup_path_for, parse_proc_cgroup
from oomdoctor.redact import redact_text

DMESG_TIMEOUT_S = 2.0
MAX_LINES = 20
RSS_FIELDS = ("anon_rss_kb", "file_rss_kb", "shmem_rss_kb")  # the killed process's memory, as the kill line gives it
INIT_PID_NS_INODE = 4026531836  # PROC_PID_INIT_INO: the host's (initial) pid namespace
# the kernel log's clock and time.monotonic() may disagree by a little (NTP slews one, not the other); a pid is
# reused this soon only if the kernel handed out every other free pid within it
CLOCK_SLACK_S = 1.0


def start_marks() -> dict[str, Any]:
    """What run.json needs at the start: the monotonic clock (the kernel log's time), the pid namespace and the
    job's cgroup path (the command inherits ours)."""
    return {"start_monotonic": time.monotonic(), "pid_namespace": pid_namespace(), "cgroup_path": job_cgroup_path()}


def job_cgroup_path(proc: str = "/proc") -> str | None:
    """Our memory cgroup's path as /proc/self/cgroup gives it: v1's memory hierarchy (what a v1 kill line names),
    else the v2 one. None when unreadable."""
    try:
        with open(os.path.join(proc, "self/cgroup"), encoding="utf-8", errors="replace") as f:
            entries = parse_proc_cgroup(f.read(1 << 16))
    except OSError:
        return None
    return cgroup_path_for(entries, "memory") or cgroup_path_for(entries, None)


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


def _in_life(t: float | None, spans: list[tuple[float | None, float | None]] | None) -> bool | None:
    """Was the line stamped while the job held the pid? None: no spans kept (an older caller); False also for a
    line without a time stamp, which cannot be placed."""
    if spans is None:
        return None
    if t is None:
        return False
    return any((lo is None or t >= lo - CLOCK_SLACK_S) and (hi is None or t <= hi + CLOCK_SLACK_S) for lo, hi in spans)


def _under(path: str | None, job: str) -> bool:
    return bool(path) and (path == job or str(path).startswith(job.rstrip("/") + "/"))


def _memcg_match(k: dict[str, Any], job: str | None) -> bool | None:
    """Is the killed task in the job's cgroup (or one below it)? None where it cannot be told: the line names no
    cgroup, or the job's path is unknown or `/` (a cgroup namespace's root, which every path is below)."""
    if not job or job == "/" or not (k.get("task_memcg") or k.get("oom_memcg")):
        return None
    return _under(k.get("task_memcg"), job) or _under(k.get("oom_memcg"), job)


def _tied(entry: dict[str, Any], oom_kill_rose: bool | None) -> bool | None:
    """In another pid namespace: is a kill line named as the job's processes tied to the job? True: its cgroup is
    the job's, or the job's oom_kill count rose (and its cgroup is not another). False: evidence against. None:
    neither (possible only)."""
    if entry["memcg_match"] is not None:
        return entry["memcg_match"]
    return oom_kill_rose


def kernel_oom_kills(seen: dict[int, set[str]], start_monotonic: float | None, namespace: str = "init",
                     runner: CommandRunner | None = None, lives: dict[int, list[tuple[float | None, float | None]]]
                     | None = None, cgroup_path: str | None = None,
                     oom_kill_rose: bool | None = None) -> dict[str, Any]:
    """{"kernel_oom_kills": [...], "kernel_oom_kill": bool} or {"kernel_log": why-unknown, ...}.

    `seen`: pid -> the names the sampler saw for it; `lives`: pid -> the spans (monotonic, None: open) the job
    held it (None: not known, then the name breaks the tie as recorders before spans did); `cgroup_path`: the
    job's cgroup; `oom_kill_rose`: whether its oom_kill count rose while it ran (None: not read). A kill line counts
    when it is stamped after the start and names a process of the job: its pid, at a time the job held it; in
    another pid namespace, a name read on the job, tied to it (see the module's docstring)."""
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
            entry.update(pid_match=None, comm_match=_named(k["comm"], every), memcg_match=_memcg_match(k, cgroup_path))
            if not (entry["comm_match"] or entry["memcg_match"]):
                continue
        else:
            pid_match = k["pid"] in seen
            entry.update(pid_match=pid_match,
                         comm_match=_comm_match(k["comm"], seen.get(k["pid"]), every) if pid_match else None)
            if lives is not None and pid_match:
                entry["pid_in_life"] = _in_life(t, lives.get(k["pid"], []))
            if not (entry["pid_match"] or entry["comm_match"]):
                continue
        kept.append({**entry, "text": redact_text(k["text"])[:500]})
    kept = kept[-MAX_LINES:]
    out: dict[str, Any] = {"kernel_oom_kills": kept}
    if namespace == "other":
        named = [k for k in kept if k["comm_match"]]
        if any(_tied(k, oom_kill_rose) for k in named):
            out["kernel_oom_kill"] = True
        elif any(_tied(k, oom_kill_rose) is None for k in named):
            out["kernel_log"] = ("a kill line after the job's start names a process as the job's are named (the log's "
                                 "pids are the host's in this pid namespace), but nothing else ties it to the job: "
                                 "not its cgroup, nor the job's oom_kill count rising")
        elif named:
            out["kernel_log"] = ("the kernel log names pids of another pid namespace (the host's); the OOM kills after "
                                 "the job's start named as its processes are were in another cgroup, or the job's "
                                 "oom_kill count did not rise: another container's processes")
        else:
            out["kernel_log"] = ("the kernel log names pids of another pid namespace (the host's); no OOM kill "
                                 "after the job's start names its process")
    else:
        out["kernel_oom_kill"] = any(_jobs(k) for k in kept)
    return out


def _jobs(k: dict[str, Any]) -> bool:
    """The host namespace's rule (analysis.kill.job_kills has the same): the pid at a time the job held it; for a
    caller without spans, the pid and a name that is not another program's."""
    if "pid_in_life" in k:
        return bool(k["pid_match"]) and k["pid_in_life"] is True
    return bool(k["pid_match"]) and k["comm_match"] is not False
