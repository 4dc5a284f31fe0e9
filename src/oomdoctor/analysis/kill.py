"""A job killed by SIGKILL, or one of its processes killed: what the recording says about memory, and what not.

A SIGKILL is what the kernel's OOM killer and a cgroup limit send, but also `kill -9`, a scheduler's
preemption or time limit, a watchdog. Only evidence makes it a host OOM: the kernel log naming the
job's process, the cgroup's `oom_kill` count rising while the job ran, the job's RSS at the cgroup's limit
or the machine's RAM nearly used up. Without it the verdict says memory is one possible cause and how to
check (a walkthrough, session 26: a bare SIGKILL was reported as a host OOM "(likely)").

A launcher (torchrun, accelerate, deepspeed, mpirun, a shell script) whose rank the OOM killer takes does not die
of the signal: it stops the other ranks and exits 1. There only a kill line of the kernel log naming a process of
the job (by the recorder's rules, injob.record.kernel_kills: after the start, its pid at a time the job held it; in
a container's own pid namespace a name of the job's processes tied to it by its cgroup or the job's oom_kill count)
makes the failure a host OOM; the line also gives the process's memory at the kill. A name alone in a container is
only a possible kill: another container's `python` has the same name. Pure.
"""

from __future__ import annotations

import re
import signal
from typing import Any

from oomdoctor.parsers.kernlog import parse_oom_kills
from oomdoctor.units import format_bytes

NEAR_CGROUP_LIMIT = 0.9  # peak use / limit: sampled every 0.5 s, the real peak can be higher
LOW_HOST_AVAILABLE = 0.05  # the machine's MemAvailable / MemTotal at its lowest

HOW_TO_CHECK = [
    "Check who sent the SIGKILL: on the node, `dmesg -T | grep -i -E 'out of memory|killed process'` (the kernel's "
    "OOM killer names the pid); the job's cgroup `memory.events` (`oom_kill` count; v1: `memory.oom_control`); "
    "on Kubernetes `kubectl describe pod POD` (Last State: Terminated, Reason: OOMKilled); on Slurm "
    "`sacct -j JOBID -o JobID,State,ExitCode,MaxRSS` (OUT_OF_MEMORY, TIMEOUT, PREEMPTED, CANCELLED).",
]
# the one command that tells whether the OOM killer took a process (a rank) of a job that exited non-zero
KERNEL_LOG_CHECK = "`sudo dmesg -T | grep -i 'killed process'` (or `sudo journalctl -k | grep -i 'killed process'`)"
# in a container, whose kernel log names other containers' processes too: which cgroup the killed process was in
CONTAINER_CHECK = ("Check whether the OOM killer took a process of this container: `kubectl describe pod POD` (Last "
                   "State: Terminated, Reason: OOMKilled), `grep oom_kill /sys/fs/cgroup/memory.events` inside it, or "
                   "on the node `sudo dmesg -T | grep -i -E 'oom-kill:|killed process'` (`task_memcg=` is the killed "
                   "process's cgroup).")


def _signal_name(n: int) -> str | None:
    try:
        return signal.Signals(n).name
    except (ValueError, OverflowError):
        return None


# run.json's `block`: what an in-process recording covered (oomdoctor.watch, or training under a callback)
_BLOCKS = {
    "watch": "the watched block (oomdoctor.watch)",
    "hf": "Trainer.train (the Hugging Face callback)",
    **{f"lightning.{stage}": f"trainer.{stage} (the Lightning callback)"
       for stage in ("fit", "validate", "test", "predict")},
}
_BLOCK_NAME_MAX = 40


def _block_wording(block: Any) -> str:
    """What run.json's `block` covered, in words. None (run.json written before `block` was) is watch's; a Lightning
    stage not listed (another version's) is still trainer.STAGE; any other name is "the recorded block", with the
    name only when it is a short plain one (run.json is the job's file: no control characters into a terminal)."""
    if block is None:
        return _BLOCKS["watch"]
    if not isinstance(block, str):
        return "the recorded block"
    if block in _BLOCKS:
        return _BLOCKS[block]
    plain = (0 < len(block) <= _BLOCK_NAME_MAX and block.isascii()
             and all(c.isalnum() or c in "._-" for c in block))
    if not plain:
        return "the recorded block"
    stage = block.removeprefix("lightning.")
    if stage != block and stage.isidentifier():
        return f"trainer.{stage} (the Lightning callback)"
    return f"the recorded block ({block})"


def exit_wording(meta: dict[str, Any]) -> str | None:
    """One wording of how the job ended, used everywhere a report says it: `exit 1`, `killed by SIGKILL
    (exit 137 in a shell)`. Python gives a death by signal as -N; a shell shows 128 + N."""
    rc = meta.get("returncode")
    if meta.get("ended_by") == "watch":  # oomdoctor.watch or a callback: the block's end, not an exit status
        what = _block_wording(meta.get("block"))
        exc = meta.get("exception")
        if isinstance(exc, dict):
            how = "a CUDA out-of-memory error" if exc.get("oom") else "an exception"
            return f"{what} raised {how} ({exc.get('type') or 'unknown type'})"
        if meta.get("exited_inside") is True:
            return f"the process exited inside {what}, before its end"
        return f"{what} ended normally"
    if not isinstance(rc, int) or isinstance(rc, bool):
        return None
    if rc < 0:
        name = _signal_name(-rc) or f"signal {-rc}"
        return f"killed by {name} (exit {128 - rc} in a shell)"
    if 128 < rc <= 128 + 64 and (name := _signal_name(rc - 128)):
        return f"exit {rc} (128 + {rc - 128}: {name}, as a shell reports a death by signal)"
    return f"exit {rc}"


def cut_short(meta: dict[str, Any]) -> bool:
    """run.json written at the start but never finished: no exit status (the recorder died with the job).
    A watch() run is finished with `returncode: null` and `ended_by: "watch"`: not cut short."""
    return bool(meta) and "start" in meta and "returncode" not in meta and meta.get("ended_by") != "watch"


def is_sigkill(meta: dict[str, Any]) -> bool:
    return meta.get("signal") == "SIGKILL" or meta.get("returncode") in (-9, 137)


def failed_status(meta: dict[str, Any]) -> int | None:
    """The command's exit status when it failed other than by SIGKILL (that has a verdict of its own): a launcher's
    exit 1 after one of its ranks was killed, an exception, another signal. None otherwise."""
    rc = meta.get("returncode")
    if meta.get("ended_by") == "watch" or not isinstance(rc, int) or isinstance(rc, bool) or rc == 0 or is_sigkill(meta):
        return None
    return rc


# what a launcher raises when one of its ranks failed (torchrun; `accelerate launch`): the rank's failure, which may be
# the OOM killer's, not an error of the launcher's own
LAUNCHER_CHILD_ERRORS = frozenset({"ChildFailedError", "CalledProcessError"})
# an error that says a process died (PyTorch's "DataLoader worker (pid 4242) is killed by signal: Killed."): it
# may have died between two samples, so the sampler not seeing it vanish does not clear the OOM killer
CHILD_DIED = re.compile(r"killed by signal|exited unexpectedly|SIGKILL|signal 9\b", re.IGNORECASE)


def _rows(meta: dict[str, Any]) -> list[dict[str, Any]]:
    kills = meta.get("kernel_oom_kills")
    return [k for k in kills if isinstance(k, dict)] if isinstance(kills, list) else []


def _tied(meta: dict[str, Any], k: dict[str, Any]) -> bool | None:
    """In another pid namespace: does something beyond the name tie a kill line to the job? Its cgroup (`memcg_match`:
    at or below the job's, or another), else the job's cgroup `oom_kill` count (rose, or read and did not); None:
    neither was told (older recordings too)."""
    memcg = k.get("memcg_match")
    if isinstance(memcg, bool):
        return memcg
    rose = meta.get("cgroup_oom_kill_rose")
    return rose if isinstance(rose, bool) else None


def job_kills(meta: dict[str, Any]) -> list[dict[str, Any]]:
    """The kill lines the recorder kept that are the job's: a pid of the job, stamped while the job held it
    (`pid_in_life`; recorders before it: a pid whose name matches or that the job held to its end); in another pid
    namespace (the log's pids are the host's) a name read on the job's processes, tied to the job (_tied)."""
    rows = _rows(meta)
    if meta.get("pid_namespace") == "other":
        return [k for k in rows if k.get("comm_match") is True and _tied(meta, k) is True]
    return [k for k in rows if k.get("pid_match") is True and (
        k.get("pid_in_life") is True if "pid_in_life" in k
        else k.get("comm_match") is not False or k.get("pid_live_at_end") is True)]


def possible_kills(meta: dict[str, Any]) -> list[dict[str, Any]]:
    """In another pid namespace, the kill lines named as the job's processes are that nothing ties to the job nor
    speaks against: a possible kill of the job, never a firm one (another container's `python` has the name too)."""
    if meta.get("pid_namespace") != "other":
        return []
    return [k for k in _rows(meta) if k.get("comm_match") is True and _tied(meta, k) is None]


def possible_line(meta: dict[str, Any]) -> str | None:
    """One line on the possible kills (possible_kills), or None."""
    possible = possible_kills(meta)
    if not possible:
        return None
    k = possible[-1]
    more = f" (and {len(possible) - 1} more)" if len(possible) > 1 else ""
    return (f"the kernel log holds an OOM kill of a process named {k.get('comm') or '?'} (host pid {k.get('pid')}, "
            f"{killed_memory(_kill_rss(k))}) after the job's start"
            f"{more}, but in this container's own pid namespace only the name matches the job's processes (another "
            "container's process may have it); neither the kill line's cgroup nor the job's oom_kill count ties it "
            "to the job")


def _kill_rss(k: dict[str, Any]) -> dict[str, int | None]:
    """The killed process's memory in bytes, as its kill line gives it: the recorder's fields, else the line's text
    (recordings made before the fields were kept)."""
    fields = ("anon_rss_kb", "file_rss_kb", "shmem_rss_kb")
    got = {f: k.get(f) for f in fields}
    if not any(isinstance(v, int) for v in got.values()) and isinstance(k.get("text"), str):
        parsed = parse_oom_kills([k["text"]])
        got = {f: parsed[0].get(f) for f in fields} if parsed else got
    return {f.removesuffix("_kb"): (v * 1024 if isinstance(v, int) and not isinstance(v, bool) else None)
            for f, v in got.items()}


def _step(p: dict[str, Any]) -> int | None:
    """A process's last recorded step; step 0 is a step."""
    v = p.get("last_step")
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def killed_processes(meta: dict[str, Any], processes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The job's processes the kernel log says the OOM killer killed: {pid, comm, name, anon_rss, file_rss,
    shmem_rss, uptime, last_step}. `name` is the rank (`rank 1`) of a recorded process with that pid, else None;
    `last_step` the last step that process recorded (None: none, or not a recorded process); never in another
    pid namespace, where the log's pids are the host's and the recording's are the container's."""
    other = meta.get("pid_namespace") == "other"
    ranks = {p.get("pid"): p.get("name") for p in processes if p.get("rank") is not None and p.get("pid") is not None}
    steps = {} if other else {p.get("pid"): _step(p) for p in processes if p.get("pid") is not None}
    out = []
    for k in job_kills(meta):
        pid = k.get("pid")
        out.append({"pid": pid, "comm": str(k.get("comm") or "?"), "name": None if other else ranks.get(pid),
                    **_kill_rss(k), "uptime": k.get("uptime"), "last_step": steps.get(pid)})
    return out


def killed_who(d: dict[str, Any]) -> str:
    """`rank 1 (pid 4242, python)`, or `a process of the job (pid 4242, python)`."""
    return f"{d['name'] or 'a process of the job'} (pid {d['pid']}, {d['comm']})"


def killed_memory(d: dict[str, Any]) -> str:
    """`anon-rss 8.00 GiB, file-rss 2.00 MiB, shmem-rss 0 B`: what the kill line gives (the process's RSS)."""
    parts = [f"{label} {format_bytes(d[key])}" for key, label in (("anon_rss", "anon-rss"), ("file_rss", "file-rss"),
                                                                   ("shmem_rss", "shmem-rss")) if d.get(key) is not None]
    return ", ".join(parts) or "its memory not given in the line"


def kernel_unknown(meta: dict[str, Any]) -> str | None:
    """Why the kernel log did not tell whether a process of the job was OOM-killed, for a recorder that asked it
    (run.json says so); None when it told, or was not asked (an older recording)."""
    if "kernel_log" not in meta and not isinstance(meta.get("kernel_oom_kills"), list):
        return None
    kernel, why = _kernel(meta)
    if kernel is not None:
        return None
    why = str(why)[:200]
    if why.startswith(("dmesg", "the kernel log could not")):
        return f"the kernel log could not be read ({why})"
    return f"the kernel log did not tell ({why})"


def _values(samples: list[dict[str, Any]], key: str) -> list[float]:
    return [v for r in samples if isinstance(v := r.get(key), (int, float)) and not isinstance(v, bool)]


def _job_memory(r: dict[str, Any]) -> tuple[float, str] | None:
    """(the job's memory at one reading, what it is: "rss", "cut" or "anon"), for "near the cgroup's limit".

    `tree_rss` sums RSS over the job's processes, and forked DataLoader workers share their parent's pages, so
    the sum counts those pages once per worker: a review saw 46 GiB summed in a cgroup using 30 GiB. RSS of one
    process (`rss`, read inside it) is not summed. The cgroup's use counts each page once (page cache included),
    so a figure above it is cut to it ("cut"). Best is the cgroup's own memory not backed by files
    (`cgroup_anon`, anonymous + shared, recorded from memory.stat by newer recorders): used where recorded."""
    anon = r.get("cgroup_anon")
    if isinstance(anon, (int, float)) and not isinstance(anon, bool):
        return float(anon), "anon"
    vals = [v for k in ("tree_rss", "rss") if isinstance(v := r.get(k), (int, float)) and not isinstance(v, bool)]
    if not vals:
        return None
    top, current = max(vals), r.get("cgroup_current")
    if isinstance(current, (int, float)) and not isinstance(current, bool) and current < top:
        return float(current), "cut"
    return float(top), "rss"


_MEMORY_WHAT = {
    "rss": "the job's RSS",
    "cut": "the job's memory (its processes' summed RSS, cut to the cgroup's use: pages forked workers share count "
           "once per process in the sum)",
    "anon": "the cgroup's memory not backed by files (anonymous and shared)",
}


def _by_source(samples: list[dict[str, Any]] | dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    return samples if isinstance(samples, dict) else {"": samples}


def _kernel(meta: dict[str, Any]) -> tuple[bool | None, str | None]:
    """(killed by the OOM killer?, why unknown) from run.json. `kernel_oom_kills`: the kill lines the recorder kept
    (after the job's start, at most ~20), each with `pid_match`/`comm_match` and, from newer recorders,
    `pid_in_life` (host pid namespace) or `memcg_match` (another); decided here by job_kills and possible_kills.
    Older records carry only `kernel_oom_kill` (the recorder's answer) or `kernel_log` (why it was not read)."""
    kills = meta.get("kernel_oom_kills")
    why = meta.get("kernel_log")
    if isinstance(kills, list):
        if job_kills(meta):
            return True, None
        if possible_kills(meta):
            return None, ("an OOM kill after the job's start names a process as the job's are named, but nothing "
                          "else ties it to the job in this pid namespace")
        if meta.get("pid_namespace") == "other":  # the log's pids are the host's: only the name can match
            return None, (why if isinstance(why, str) else
                          "the kernel log names pids of another pid namespace (the host's); no kill after the "
                          "job's start names its process")
        return False, None
    kernel = meta.get("kernel_oom_kill")
    if isinstance(kernel, bool):
        return kernel, None
    return None, (why if isinstance(why, str) else "a recording by an older oomdoctor")


def evidence(meta: dict[str, Any], samples: list[dict[str, Any]] | dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """{"firm": bool, "found", "against", "unread", "hints": [...]}: the memory evidence of a SIGKILL.

    `samples`: the readings by time (tree_rss, rss, cgroup_current, cgroup_limit, cgroup_oom_kill, mem_available,
    mem_total), as one list or by source (the outside sampler, each process): a count is compared only within
    one source, which may read another cgroup than the next one."""
    found: list[str] = []
    against: list[str] = []
    unread: list[str] = []
    hints: list[str] = []
    sources = _by_source(samples)
    every = [r for rows in sources.values() for r in rows]
    kernel, why = _kernel(meta)
    if kernel is True:
        named = "; ".join(f"pid {k['pid']} ({k['comm']}), {killed_memory(k)}" for k in killed_processes(meta, [])[:3])
        found.append("the kernel log names a process of the job as killed by the OOM killer"
                     + (f": {named}" if named else ""))
    elif kernel is False:
        against.append("the kernel log holds no OOM kill of the job's processes after the job started")
    elif (possible := possible_line(meta)) is not None:
        unread.append(possible)
    else:
        unread.append(f"the kernel log was not read ({str(why)[:200]})")
    rises = [(k[0], max(k)) for rows in sources.values() if (k := _values(rows, "cgroup_oom_kill"))]
    if rises:
        rose = [(a, b) for a, b in rises if b > a]
        if rose:
            a, b = max(rose, key=lambda ab: ab[1] - ab[0])
            found.append(f"the cgroup's oom_kill count rose from {a:.0f} to {b:.0f} while the job ran")
        else:
            against.append(f"the cgroup's oom_kill count did not rise ({rises[0][0]:.0f} from start to end)")
    else:
        unread.append("the cgroup's oom_kill count was not recorded")
    current, limits = _values(every, "cgroup_current"), _values(every, "cgroup_limit")
    readings = [m for r in every if (m := _job_memory(r)) is not None]
    if any(how == "anon" for _, how in readings):  # the cgroup's own count, where recorded, over any RSS figure
        readings = [m for m in readings if m[1] == "anon"]
    mem = [v for v, _ in readings]
    if limits:
        limit = min(limits)
        if mem:  # RSS, not the cgroup's use: that counts the page cache, which the kernel takes back before a kill
            peak, how = max(readings)
            near = peak >= NEAR_CGROUP_LIMIT * limit
            line = f"{_MEMORY_WHAT[how]} peaked at {format_bytes(peak)} of the cgroup's {format_bytes(limit)} limit ({peak / limit:.0%})"
            (found if near else against).append(line + ("" if near else " at the samples (a spike between samples "
                                                                         "is not seen)"))
        if current and max(current) >= NEAR_CGROUP_LIMIT * limit and not (mem and max(mem) >= NEAR_CGROUP_LIMIT * limit):
            hints.append(f"the cgroup's use (page cache included) reached {format_bytes(max(current))} of its "
                         f"{format_bytes(limit)} limit: a sign only, the kernel takes the cache back before it kills")
    elif current:
        unread.append("the cgroup has no memory limit (or it was not readable)")
    avail, total = _values(every, "mem_available"), _values(every, "mem_total")
    if avail and total:
        low, tot = min(avail), max(total)
        line = f"the machine's available RAM was at least {format_bytes(low)} of {format_bytes(tot)}"
        if low <= LOW_HOST_AVAILABLE * tot:
            found.append(f"the machine's available RAM fell to {format_bytes(low)} of {format_bytes(tot)}")
        else:
            against.append(line + " at the samples")
    return {"firm": bool(found), "found": found, "against": against, "unread": unread, "hints": hints}


def _recorded_killed(killed: list[dict[str, Any]], processes: list[dict[str, Any]],
                     meta: dict[str, Any]) -> list[dict[str, Any]]:
    """The recorded processes (timelines) the kernel log names as killed, matched by pid; none in another pid
    namespace (the log's pids are the host's) nor for a killed process without a timeline (a DataLoader worker)."""
    if meta.get("pid_namespace") == "other":
        return []
    pids = {d.get("pid") for d in killed if d.get("pid") is not None}
    return [p for p in processes if p.get("pid") in pids]


def steps_at_kill(processes: list[dict[str, Any]], killed: list[dict[str, Any]], meta: dict[str, Any]) -> str | None:
    """The evidence line on steps: the killed process's own last recorded step, and a process that got further.

    Under a launcher the OOM killer takes one rank while the others run on until the launcher stops them, so the
    furthest step (rank 0's) is not where the killed rank died. Where no recorded process is known to be the
    killed one, the furthest step is said as that; a job of one process keeps its own wording."""
    stepped = [(s, p) for p in processes if (s := _step(p)) is not None]
    hit = _recorded_killed(killed, processes, meta)
    if hit:
        parts = [f"{p['name']}: no step was recorded before the kill" if (s := _step(p)) is None
                 else f"{p['name']}: the last step recorded before the kill was step {s}" for p in hit[:3]]
        own = max((s for p in hit if (s := _step(p)) is not None), default=None)
        others = [(s, p) for s, p in stepped if all(p is not q for q in hit)]
        further = ""
        if others:
            s, top = max(others, key=lambda sp: sp[0])
            if own is None or s > own:
                further = f" ({top['name']} got further, to step {s})"
        return "; ".join(parts) + further
    if not stepped:
        return None
    s, top = max(stepped, key=lambda sp: sp[0])
    if len(processes) == 1:
        return f"{top['name']}: the last step recorded before the kill was step {s}"
    return f"the furthest step recorded before the kill: step {s} ({top['name']})"
