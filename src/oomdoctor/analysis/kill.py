"""A job killed by SIGKILL: what the recording says about memory, and what it cannot say.

A SIGKILL is what the kernel's OOM killer and a cgroup limit send, but also `kill -9`, a scheduler's
preemption or time limit, a watchdog. Only evidence makes it a host OOM: the kernel log naming the
job's process, the cgroup's `oom_kill` count rising while the job ran, the job's RSS at the cgroup's limit
or the machine's RAM nearly used up. Without it the verdict says memory is one possible cause and how to
check (a walkthrough, session 26: a bare SIGKILL was reported as a host OOM "(likely)"). Pure.
"""

from __future__ import annotations

import signal
from typing import Any

from oomdoctor.units import format_bytes

NEAR_CGROUP_LIMIT = 0.9  # peak use / limit: sampled every 0.5 s, the real peak can be higher
LOW_HOST_AVAILABLE = 0.05  # the machine's MemAvailable / MemTotal at its lowest

HOW_TO_CHECK = [
    "Check who sent the SIGKILL: on the node, `dmesg -T | grep -i -E 'out of memory|killed process'` (the kernel's "
    "OOM killer names the pid); the job's cgroup `memory.events` (`oom_kill` count; v1: `memory.oom_control`); "
    "on Kubernetes `kubectl describe pod POD` (Last State: Terminated, Reason: OOMKilled); on Slurm "
    "`sacct -j JOBID -o JobID,State,ExitCode,MaxRSS` (OUT_OF_MEMORY, TIMEOUT, PREEMPTED, CANCELLED).",
]


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


def exit_wording(meta: dict[str, Any]) -> str | None:
    """One wording of how the job ended, used everywhere a report says it: `exit 1`, `killed by SIGKILL
    (exit 137 in a shell)`. Python gives a death by signal as -N; a shell shows 128 + N."""
    rc = meta.get("returncode")
    if meta.get("ended_by") == "watch":  # oomdoctor.watch or a callback: the block's end, not an exit status
        block = meta.get("block")
        what = _BLOCKS.get(block if isinstance(block, str) else "watch", _BLOCKS["watch"])
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
    `pid_live_at_end`; decided here: the pid decides, the name only where the pid may have been reused (the job's
    process had ended before the job did). Older records carry only `kernel_oom_kill` (the recorder's answer) or
    `kernel_log` (why it was not read)."""
    kills = meta.get("kernel_oom_kills")
    why = meta.get("kernel_log")
    if isinstance(kills, list):
        rows = [k for k in kills if isinstance(k, dict)]
        if meta.get("pid_namespace") == "other":  # the log's pids are the host's: only the name can match
            if any(k.get("comm_match") is True for k in rows):
                return True, None
            return None, (why if isinstance(why, str) else
                          "the kernel log names pids of another pid namespace (the host's); no kill after the "
                          "job's start names its process")
        if any(k.get("pid_match") is True and (k.get("comm_match") is not False or k.get("pid_live_at_end") is True)
               for k in rows):
            return True, None
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
        found.append("the kernel log names a process of the job as killed by the OOM killer")
    elif kernel is False:
        against.append("the kernel log holds no OOM kill of the job's processes after the job started")
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


def last_step(processes: list[dict[str, Any]]) -> tuple[str, int] | None:
    """(process name, its last recorded step) of the process with the most steps, if any step was marked."""
    marked = [p for p in processes if p.get("last_step")]
    if not marked:
        return None
    p = max(marked, key=lambda q: q["last_step"])
    return p["name"], int(p["last_step"])
