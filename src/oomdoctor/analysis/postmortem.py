"""The verdict of a recorded run, in docs/contracts.md §2's categories, with the fix.

With an OOM the recorded numbers decide: another process on the device, free bytes stranded in the
cache (fragmentation: the cache's free bytes could have held the request), steady growth across steps
(leak), else the job needs more than it may use. `explain` (reading the OOM message) decides when no
allocator state was recorded, and is quoted as a second opinion when it disagrees.
Without an OOM: a flagged leak or heavy fragmentation is a warning; a SIGKILL is a host OOM when the recording
shows memory running out (analysis.kill), else one possible cause. A command that exited non-zero (a launcher such
as torchrun exits 1 when the OOM killer takes a rank) is a host OOM when the kernel log names the killed process of
the job; where the log could not be read, the report says so and how to check.
"""

from __future__ import annotations

import importlib
from typing import Any

from oomdoctor.analysis import kill
from oomdoctor.units import format_bytes

GiB = 1 << 30

FIXES = {
    "leak_in_code": [
        "Find what keeps tensors alive across steps: `losses.append(loss)` keeps each step's graph; "
        "store `loss.item()` or `loss.detach()` instead.",
        "Run evaluation under `torch.no_grad()` / `torch.inference_mode()`; clear caches/lists you fill per step.",
        "The source lines holding the most live memory are listed under 'Largest live allocations'.",
    ],
    "fragmentation": [
        "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (PyTorch >= 2.1) so free space can be reused.",
        "Or limit splitting of big blocks: PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128 (tune the value).",
        "Keep shapes steady (pad or bucket variable sequence lengths); avoid torch.cuda.empty_cache() in the loop.",
    ],
    "true_capacity": [
        "Reduce the per-step memory: smaller batch (with gradient accumulation), shorter sequences, "
        "mixed precision (bf16), activation checkpointing.",
        "Shard or offload: FSDP / ZeRO for parameters, gradients and optimizer state; an 8-bit optimizer.",
        "`oomdoctor estimate WORKLOAD.py --max-batch --memory-limit SIZE` predicts the batch that fits.",
    ],
    "other_process": [
        "Another process holds memory on this GPU: find it with nvidia-smi / `oomdoctor doctor` and stop it, "
        "or pick a free device with CUDA_VISIBLE_DEVICES.",
        "In containers and Kubernetes, make sure one job gets the whole GPU (no stray notebook, no extra rank).",
    ],
    "host_leak": [
        "Find what keeps host memory alive across steps: a list of tensors or arrays kept on the CPU, a cache, "
        "per-step logs; tracemalloc or memray (`memray run train.py`) shows the growing allocation sites.",
        "With DataLoader workers: copy-on-write of Python lists in the dataset; keep samples in numpy arrays.",
    ],
    "host_oom": [
        "Host or cgroup RAM ran out (the kernel or Kubernetes killed the job, or one of its processes, with SIGKILL): "
        "raise the memory limit, use fewer DataLoader workers, avoid loading the whole dataset in RAM, check pinned "
        "memory.",
    ],
}


def _explain(message: str) -> dict[str, Any] | None:
    """Ask analysis.explain (another branch) about the OOM text, if it is installed."""
    try:
        mod = importlib.import_module("oomdoctor.explain.rank")
        result = mod.explain_text(message.splitlines(), None)
        hyps = list(getattr(result, "hypotheses", None) or [])
    except Exception:
        return None
    if not hyps:
        return None
    h = hyps[0]
    cat = getattr(h, "category", None)
    cat = getattr(cat, "value", cat)
    if not cat or cat == "unknown":
        return None
    return {"category": str(cat), "evidence": [str(e) for e in getattr(h, "evidence", ()) or ()],
            "fixes": [str(f) for f in getattr(h, "fixes", ()) or ()]}


def _messages(processes: list[dict[str, Any]]) -> list[str]:
    out = []
    for p in processes:
        for e in p.get("events", ()):
            msg = e.get("message")
            if isinstance(msg, str) and "out of memory" in msg.lower():  # a stranger's record may hold anything
                out.append(msg)
    return out


def _nvml_other(oom: dict[str, Any]) -> tuple[int, int] | None:
    """(bytes used by other processes on the OOM's device, device total), from NVML at the OOM."""
    nv = (oom.get("outside") or {}).get("nvml") or {}
    devs = nv.get("devices") or []
    if not devs:
        return None
    mine = nv.get("gpu_proc_used") or 0
    d = max(devs, key=lambda d: d.get("proc_used", 0))
    others = d.get("others_used")
    if others is None or (others == 0 and mine == 0):
        others = max(0, d.get("used", 0) - mine)
    return int(others), int(d.get("total", 0))


def classify_oom(oom: dict[str, Any], leak: dict[str, Any] | None) -> tuple[str, list[str]]:
    stats = oom.get("stats") or {}
    allocated = stats.get("allocated_bytes.all.current")
    reserved = stats.get("reserved_bytes.all.current")
    requested = oom.get("requested")
    limit = oom.get("device_limit") or oom.get("device_total")
    ev = []
    if requested:
        ev.append(f"tried to allocate {format_bytes(requested)}")
    if allocated is not None and reserved is not None:
        ev.append(f"allocated {format_bytes(allocated)}, reserved {format_bytes(reserved)} "
                  f"(free inside the cache {format_bytes(reserved - allocated)})")
    if limit:
        ev.append(f"allowed maximum {format_bytes(limit)}")
    other = _nvml_other(oom)
    if other is not None:
        others, total = other
        ev.append(f"NVML: other processes use {format_bytes(others)} of {format_bytes(total)} on the device")
        if others >= max(GiB, 0.25 * total):
            return "other_process", ev
    if allocated is not None and reserved is not None and requested:
        free_cache = reserved - allocated
        if free_cache >= requested and free_cache >= 0.2 * reserved:
            ev.append("the cache held more free bytes than requested, but not in one block")
            return "fragmentation", ev
    if leak_before_oom(leak):
        ev.append(f"allocated memory grew {leak_rate(leak)} before the OOM")
        return "leak_in_code", ev
    if allocated is None and not requested:
        return "unknown", ev
    return "true_capacity", ev


OOM_LEAK_MIN_SECONDS = 30.0


def leak_before_oom(leak: dict[str, Any] | None) -> bool:
    """A flagged trend that may explain an OOM: across steps (markers or inferred cycles), or over at
    least 30 s of time. A job that dies while loading its model or in its first forward pass also
    rises at every sample until the OOM; that is its size, not a leak. One source line (or block size)
    that kept adding live blocks at every look before the OOM (analysis.live_growth) is a leak."""
    if not leak or not leak.get("leak"):
        return False
    if leak.get("decided_by") == "live_growth" or (leak.get("live_growth") or {}).get("leak"):
        return True
    if leak.get("pattern") == "short_run_growth":
        return False
    return leak.get("unit") == "step" or (leak.get("span") or 0) >= OOM_LEAK_MIN_SECONDS


def leak_rate(leak: dict[str, Any]) -> str:
    parts = []
    if leak.get("rate_per_step"):
        parts.append(f"{format_bytes(leak['rate_per_step'])}/step")
    if leak.get("rate_per_s"):
        parts.append(f"{format_bytes(leak['rate_per_s'])}/s")
    return ", ".join(parts) or f"{format_bytes(leak['slope_bytes'])}/{leak['unit']}"


def _live_evidence(label: str, live: dict[str, Any]) -> list[str]:
    """One line per source line (or block size) that kept adding live blocks to the end."""
    out = []
    for g in (live.get("accumulating") or [])[:3] if live.get("leak") else ():
        what = g["key"] if g["by"] == "source" else f"blocks of {format_bytes(g['key'])}"
        out.append(f"{label}: {what} gained {g['new_blocks']:.0f} live blocks ({format_bytes(g['growth_bytes'])}) "
                   f"from the first look to the end, more at {g['rises']} of {g['intervals']} looks"
                   + (" (the last was the OOM)" if live.get("end_is_oom") else ""))
    return out


def leak_evidence(label: str, leak: dict[str, Any], total: float | None) -> list[str]:
    how = {"markers": "step boundaries", "cycles": "the low points of the forward/backward cycles (steps inferred)",
           "time": "time windows (no steps found)"}.get(leak.get("steps_from", ""), "time windows")
    live_ev = _live_evidence(label, leak.get("live_growth") or {})
    if leak.get("decided_by") == "live_growth":
        ev = live_ev
    elif leak.get("pattern") == "short_run_growth":
        ev = [f"{label}: short run: live memory rose at every sample, from {format_bytes(leak['first'])} to "
              f"{format_bytes(leak['last'])} in {leak['span']:.1f} s ({leak_rate(leak)})"]
    else:
        rises, pairs = leak.get("coverage") or (0, 0)
        ev = [f"{label}: allocated memory at {how} grew {format_bytes(leak['growth_bytes'])} ({leak_rate(leak)}, "
              f"Kendall tau {leak['tau']}, rising in {rises} of {pairs} stretches of the run after warm-up)"]
    if leak.get("decided_by") != "live_growth":
        ev += live_ev
    for sh in leak.get("level_shifts") or ():
        ev.append(f"a one-off level shift of {format_bytes(sh['bytes'])} at {leak['unit']} {sh['at']:g} was not counted")
    proj = leak.get("projection") or {}
    if proj:
        when = []
        if "full_at_step" in proj:
            when.append(f"at step ~{proj['full_at_step']}")
        if "full_in_seconds" in proj:
            sec = proj["full_in_seconds"]
            when.append(f"in ~{sec:.0f} s" if sec < 120 else f"in ~{round(sec / 60)} minutes")
        ev.append(f"at this rate the {format_bytes(proj['device_total'])} device is full {', '.join(when)}")
    elif total and leak["unit"] == "step" and leak["slope_bytes"] > 0:
        ev.append(f"at this rate the GPU ({format_bytes(total)}) is full in about "
                  f"{max(0, int((total - leak['last']) / leak['slope_bytes']))} more steps")
    for site in leak.get("sites") or ():
        grew = f", +{format_bytes(site['growth_bytes'])} since the first look" if site.get("growth_bytes") else ""
        n = site.get("blocks")
        blocks = f"{n:.0f}" if isinstance(n, (int, float)) else "?"
        ev.append(f"live at the end: {format_bytes(site['bytes'])} in {blocks} blocks from {site['source']}{grew}")
    return ev


def _host_measure(host_leak: dict[str, Any]) -> str:
    """What the host-memory figures are of: RSS less its file-backed pages (records from session 26 on), or RSS."""
    return "memory not backed by files" if host_leak.get("measure") == "rss_anon" else "RSS"


def host_growth_line(p: dict[str, Any]) -> str:
    """The host-memory growth of one process in numbers that add up: the lowest readings of the first and
    last stretch (what stays allocated), their difference, and the fitted trend as the rate."""
    hl = p["host_leak"]
    how = {"markers": "step boundaries", "cycles": "inferred steps"}.get(hl.get("steps_from", ""), "time windows")
    first, last = hl["first"], hl["last"]
    return (f"{p['name']}: host {_host_measure(hl)} grew from {format_bytes(first)} to {format_bytes(last)} "
            f"({'+' if last >= first else '-'}{format_bytes(abs(last - first))}) at the low points of {how}; "
            f"the fitted trend: {leak_rate(hl)}")


def _series_last_peak(series: list[Any] | None) -> tuple[float, float] | None:
    vals = [v for _, v in series or () if isinstance(v, (int, float))]
    return (vals[-1], max(vals)) if vals else None


def _sigkill_verdict(processes: list[dict[str, Any]], host_leaks: list[dict[str, Any]], meta: dict[str, Any],
                     outside: dict[str, Any], ev: dict[str, Any]) -> dict[str, Any]:
    """host_oom firmly with evidence of memory running out; else host memory as one possible cause, how to check."""
    ended = kill.exit_wording(meta) or "killed by SIGKILL"
    lines = [f"the job ended: {ended}; no CUDA OOM was recorded"]
    lines += _memory_lines(processes, host_leaks, outside, meta)
    if ev["firm"]:
        return {"oom": True, "category": "host_oom", "severity": "error", "source": "exit status and memory readings",
                "confidence": "high", "summary": f"{ended}: host or cgroup memory ran out",
                "evidence": lines + ev["found"], "fixes": FIXES["host_oom"], "message": None}
    return {"oom": True, "category": "host_oom", "severity": "error", "source": "exit status",
            "confidence": "low",
            "summary": f"{ended}; host or cgroup memory is one possible cause (host_oom), not confirmed ("
                       f"{_not_confirmed(ev)}); a SIGKILL also comes from `kill -9`, a scheduler's preemption or "
                       "time limit",
            "evidence": lines + _open_lines(ev), "fixes": kill.HOW_TO_CHECK + ["If it was memory: " + FIXES["host_oom"][0]],
            "message": None}


def _memory_lines(processes: list[dict[str, Any]], host_leaks: list[dict[str, Any]], outside: dict[str, Any],
                  meta: dict[str, Any]) -> list[str]:
    """The steps at the kill (the killed process's own where the kernel log names a recorded one), the job's
    largest RSS, and any host-memory growth."""
    lines = []
    step = kill.steps_at_kill(processes, kill.killed_processes(meta, processes), meta)
    if step:
        lines.append(step)
    tree = _series_last_peak(outside.get("tree_rss"))
    rss = [p["peaks"]["rss"] for p in processes if (p.get("peaks") or {}).get("rss")]
    if rss or (tree and tree[1] > 0):  # the whole tree from outside, each process from inside: the larger
        top = max(rss + ([tree[1]] if tree else []))
        summed = bool(tree) and top == tree[1] and top > max(rss, default=0)
        cgroup = _series_last_peak(outside.get("cgroup_current"))
        over = f", more than the cgroup's use ({format_bytes(cgroup[1])}): an overcount" if (
            summed and cgroup and cgroup[1] < top) else ""
        lines.append(f"host memory of the job (RSS): at most {format_bytes(top)} at the samples" + (
            f" (summed over its processes: pages that forked workers share count once in each{over})" if summed else ""))
    return lines + [host_growth_line(p) for p in host_leaks]


def _open_lines(ev: dict[str, Any]) -> list[str]:
    return ([f"not seen: {e}" for e in ev["against"]] + [f"unknown: {e}" for e in ev["unread"]]
            + [f"hint: {e}" for e in ev.get("hints", ())])


def _not_confirmed(ev: dict[str, Any]) -> str:
    """Why the evidence is not firm, in words that match what was read: seen against, or not read at all."""
    if ev["against"] and not ev["unread"]:
        return "the recording shows no OOM kill and no memory limit reached"
    if ev["against"]:
        return "the recording shows no OOM kill or memory limit reached, and some evidence was not read"
    return "the evidence of an OOM kill was not read"


def _status_wording(rc: int) -> str:
    """`exited with status 1`, `was killed by SIGTERM (exit 143 in a shell)`: what the command did after."""
    return f"was {kill.exit_wording({'returncode': rc})}" if rc < 0 else f"exited with status {rc}"


_PY_OPTS_WITH_ARG = frozenset({"-W", "-X", "--check-hash-based-pycs"})


def command_name(argv: Any) -> str:
    """The command as a user knows it: argv[0]'s file name (`torchrun`), or the module a Python runs
    (`python3 -m torch.distributed.run`: `torch.distributed.run`, not "python3")."""
    if not isinstance(argv, list) or not argv:
        return "the command"
    name = str(argv[0]).rsplit("/", 1)[-1]
    if not name.startswith("python"):
        return name
    args, i = [str(a) for a in argv[1:]], 0
    while i < len(args):
        a = args[i]
        if a == "-m":
            return args[i + 1] if i + 1 < len(args) else name
        if a.startswith("-m") and not a.startswith("--"):
            return a[2:]
        if not a.startswith("-") or a in ("-c", "-"):  # a script, code or stdin: the interpreter is the command
            return name
        i += 2 if a in _PY_OPTS_WITH_ARG else 1  # an option's value is no script
    return name


def _killed_verdict(processes: list[dict[str, Any]], host_leaks: list[dict[str, Any]], meta: dict[str, Any],
                    outside: dict[str, Any], killed: list[dict[str, Any]]) -> dict[str, Any]:
    """The kernel log names a process of the job killed by the OOM killer, and the command did not die of SIGKILL
    itself: a launcher (torchrun, accelerate, deepspeed, mpirun, a script) that exited 1 after losing a rank, or
    one that restarted its ranks and exited 0. The killed process is named with its memory from the kill line."""
    rc = meta["returncode"]
    first = killed[0]
    more = f" (and {len(killed) - 1} more of its processes)" if len(killed) > 1 else ""
    cmd = command_name(meta.get("argv"))
    launcher = first["name"] is not None and first["pid"] != meta.get("command_pid")
    what = f"the launcher ({cmd})" if launcher else f"the command ({cmd})"
    who = f"{kill.killed_who(first)} was killed by the kernel's OOM killer ({kill.killed_memory(first)} at the kill){more}"
    lines = [f"the job ended: {kill.exit_wording(meta)}; no CUDA OOM was recorded"]
    lines += [f"the kernel log names {kill.killed_who(d)} as killed by the OOM killer: {kill.killed_memory(d)}"
              for d in killed]
    lines += _memory_lines(processes, host_leaks, outside, meta)
    base = {"category": "host_oom", "source": "kernel log", "confidence": "high", "evidence": lines,
            "fixes": FIXES["host_oom"], "message": None, "killed": killed}
    if rc == 0:
        return {**base, "oom": False, "severity": "warning",
                "summary": f"{who}, yet {what} ended with exit 0 (a launcher that restarted its ranks, or a process "
                           "the job replaced): host or cgroup memory ran out while it ran"}
    return {**base, "oom": True, "severity": "error",
            "summary": f"{who}; {what} then {_status_wording(rc)}: host or cgroup memory ran out"}


def _raised(processes: list[dict[str, Any]], meta: dict[str, Any]) -> str | None:
    """The exception the command's own process recorded last (`KeyError: 'boom'`), or None: none, or a launcher's
    error for a failed rank (ChildFailedError), which may be the OOM killer's doing. An OOM exception never gets
    here (it has a verdict of its own)."""
    pid = meta.get("command_pid")
    own = [p for p in processes if pid is not None and p.get("pid") == pid]
    events = [e for p in own for e in p.get("events") or () if e.get("kind") == "exception"]
    if not events:
        return None
    e = events[-1]
    kind = str(e.get("type") or "")
    if kind in kill.LAUNCHER_CHILD_ERRORS:
        return None
    lines = [ln.strip() for ln in str(e.get("message") or "").splitlines() if ln.strip()]
    line = next((ln for ln in lines if kind and ln.startswith(kind)), lines[0] if lines else kind)
    return line[:200] or None


def _with_kernel_unknown(v: dict[str, Any], meta: dict[str, Any], ev: dict[str, Any] | None,
                         processes: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A command that failed without a CUDA OOM or a named kill: say what it raised, if its own process recorded an
    exception, and what the kernel log told about an OOM kill of its processes. Unread (dmesg restricted, a
    container's log): say so and the command that tells, unless the command raised the error itself and no process
    of the job vanished (nothing the OOM killer could have taken); if the cgroup's oom_kill count rose meanwhile, or
    a container's log names a kill of a process with the job's name, a host OOM of one of its processes is one
    possible cause."""
    rc = kill.failed_status(meta)
    if rc is None:
        return v
    raised = _raised(processes or [], meta)
    ended = kill.exit_wording(meta)
    if raised and v["severity"] == "ok":
        v = {**v, "summary": f"{ended}: the job raised {raised}; {v['summary']}"}
    unknown = kill.kernel_unknown(meta)
    if unknown is None:
        if kill.job_kills(meta) == [] and isinstance(meta.get("kernel_oom_kills"), list):
            return {**v, "evidence": [*v["evidence"], "the kernel log holds no OOM kill of the job's processes "
                                                      "after the job started"]}
        return v
    check = f"Check the kernel log on the node for an OOM kill of one of the job's processes: {kill.KERNEL_LOG_CHECK}"
    rose = [f for f in (ev or {}).get("found", ()) if "oom_kill count rose" in f]
    possible = kill.possible_line(meta)
    if raised and not rose and meta.get("processes_vanished") == 0 and not kill.CHILD_DIED.search(raised):
        return {**v, "evidence": [*v["evidence"], f"the command's process raised {raised}, and no process of the job "
                                  f"vanished while it ran: nothing points to the OOM killer ({unknown}"
                                  + (f"; {possible}" if possible else "") + ")"]}
    evidence = [*v["evidence"], f"unknown: whether the kernel's OOM killer killed a process of the job: {unknown}"]
    if (rose or possible) and v["severity"] == "ok":
        lead = rose[0] if rose else possible
        tail = (f", and {unknown.split(' (')[0]}, which would name the process" if rose else "")
        return {"oom": True, "category": "host_oom", "severity": "warning", "source": "cgroup" if rose else "kernel log",
                "confidence": "low",
                "summary": f"{ended}; a host OOM of one of its processes (a rank) is one possible cause (host_oom), "
                           f"not confirmed: {lead}{tail}",
                "evidence": [f"the job ended: {ended}; no CUDA OOM was recorded", *evidence[len(v['evidence']):],
                             *(rose or [possible])] + ([f"the command's process raised {raised}"] if raised else []),
                "fixes": [check if rose else kill.CONTAINER_CHECK, "If it was memory: " + FIXES["host_oom"][0]],
                "message": None}
    if rose:
        evidence.append(f"hint: {rose[0]}")
    if possible:
        evidence.append(f"hint: {possible}")
    summary = v["summary"]
    if v["severity"] == "ok":
        summary = f"{summary}; whether the kernel's OOM killer took one of its processes is unknown"
        if not raised:
            summary = f"{ended}; {summary}"
    return {**v, "summary": summary, "evidence": evidence, "fixes": [*v["fixes"], check]}


def _cut_short_verdict(processes: list[dict[str, Any]], host_leaks: list[dict[str, Any]], outside: dict[str, Any],
                       ev: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    """run.json has no exit status: `record` died with the job (a kill of the whole process group or cgroup,
    the OOM killer taking both), or the job is still running. The memory evidence still decides."""
    cut = "the recording was cut short (no exit status: the recorder died with the job, or the job is still running)"
    lines = [cut] + _memory_lines(processes, host_leaks, outside, meta)
    if ev["firm"]:
        return {"oom": True, "category": "host_oom", "severity": "error", "source": "memory readings",
                "confidence": "high", "summary": f"{cut}: host or cgroup memory ran out",
                "evidence": lines + ev["found"], "fixes": FIXES["host_oom"], "message": None}
    return {"oom": False, "category": None, "severity": "warning", "source": "timeline", "confidence": "low",
            "summary": f"{cut}; how the job ended is unknown ({_not_confirmed(ev)}); no CUDA OOM was recorded",
            "evidence": lines + _open_lines(ev), "fixes": kill.HOW_TO_CHECK, "message": None}


def verdict(processes: list[dict[str, Any]], ooms: list[dict[str, Any]], meta: dict[str, Any],
            outside: dict[str, Any], kill_evidence: dict[str, Any] | None = None) -> dict[str, Any]:
    leaks = {p["label"]: p["leak"] for p in processes if p.get("leak") and p["leak"].get("leak")}
    host_leaks = [p for p in processes if p.get("host_leak") and p["host_leak"].get("leak")]
    messages = _messages(processes)
    if ooms or messages:
        oom = ooms[-1] if ooms else {}
        category, evidence = classify_oom(oom, leaks.get(oom.get("label"))) if ooms else ("unknown", [])
        source = "recorded allocator state"
        fixes = FIXES.get(category, [])
        if messages:
            # the recorded allocator state (segments, inactive split, NVML, the trend) is more direct
            # evidence than the message's numbers; explain decides only when no state was recorded
            ex = _explain(messages[-1])
            if ex is not None and category == "unknown":
                category, fixes, source = ex["category"], ex["fixes"] or FIXES.get(ex["category"], []), "explain"
                evidence = evidence + ex["evidence"]
            elif ex is not None and ex["category"] != category:
                first = f": {ex['evidence'][0]}" if ex["evidence"] else ""
                evidence = evidence + [f"second opinion from the OOM message alone (explain): {ex['category']}{first}"]
        where = f" in {oom.get('label')}" if oom.get("label") else ""
        step = f" at step {oom['step']}" if oom.get("step") else ""
        return {"oom": True, "category": category, "severity": "error", "source": source,
                "summary": f"CUDA out of memory{where}{step}: {category.replace('_', ' ')}",
                "evidence": evidence, "fixes": fixes, "message": messages[-1] if messages else None}
    if kill.is_sigkill(meta):
        return _sigkill_verdict(processes, host_leaks, meta, outside, kill_evidence or kill.evidence(meta, []))
    rc = meta.get("returncode")
    if (kill.failed_status(meta) is not None or rc == 0) and (killed := kill.killed_processes(meta, processes)):
        return _killed_verdict(processes, host_leaks, meta, outside, killed)
    return _with_kernel_unknown(_without_kill(processes, leaks, host_leaks, meta, outside, kill_evidence), meta,
                                kill_evidence, processes)


def _without_kill(processes: list[dict[str, Any]], leaks: dict[str, Any], host_leaks: list[dict[str, Any]],
                  meta: dict[str, Any], outside: dict[str, Any], kill_evidence: dict[str, Any] | None) -> dict[str, Any]:
    """No CUDA OOM, no SIGKILL and no process of the job named killed: a leak, a host-memory lead, fragmentation,
    a recording cut short, or nothing found."""
    cut = kill.cut_short(meta)
    if cut and (kill_evidence or {}).get("firm"):
        return _cut_short_verdict(processes, host_leaks, outside, kill_evidence or kill.evidence(meta, []), meta)
    if leaks:
        label, leak = max(leaks.items(), key=lambda kv: kv[1].get("rate_per_s") or kv[1]["slope_bytes"])
        total = next((p.get("device_total") for p in processes if p["label"] == label), None)
        return {"oom": False, "category": "leak_in_code", "severity": "warning", "source": "timeline",
                "summary": f"memory grows steadily{' across steps' if leak['unit'] == 'step' else ''}: "
                           f"{leak_rate(leak)} (confidence {leak.get('confidence') or 'low'})",
                "evidence": leak_evidence(label, leak, total), "fixes": FIXES["leak_in_code"], "message": None,
                "leak": {k: leak.get(k) for k in ("rate_per_step", "rate_per_s", "growth_bytes", "confidence",
                                                   "pattern", "steps_from", "projection", "sites")}}
    if host_leaks:
        # host memory grew step after step, the GPU allocator did not: a lead, not a verdict (exit 0). RSS also counts
        # file-backed pages the kernel can take back (a memory-mapped dataset read step by step) and a warm-up that
        # settles late; a review showed both flagged, so no warning is raised from RSS alone
        p = max(host_leaks, key=lambda q: q["host_leak"].get("rate_per_s") or q["host_leak"]["slope_bytes"])
        hl = p["host_leak"]
        # records from session 26 on carry the file-backed pages, left out of what is judged (a memory-mapped dataset)
        anon = hl.get("measure") == "rss_anon"
        what, unless = (("host memory not backed by files (RSS less its file pages)", "a warm-up still settling")
                        if anon else ("host memory (RSS)", "a memory-mapped dataset's pages (the kernel takes those "
                                      "back) or a warm-up still settling"))
        return {"oom": False, "category": None, "severity": "ok", "source": "timeline",
                "summary": f"no OOM and no steady growth of GPU memory recorded; but {what} grew "
                           f"steadily{' across steps' if hl['unit'] == 'step' else ''}: {leak_rate(hl)} (confidence "
                           f"{hl.get('confidence') or 'low'}): a leak on the CPU side, unless it is {unless}",
                "evidence": [host_growth_line(p)],
                "fixes": FIXES["host_leak"], "message": None}
    for p in processes:
        fr = p.get("fragmentation") or {}
        top = fr.get("at_peak_reserved") or {}
        if top and top["free_in_cache"] >= max(GiB, 0.3 * top["reserved"]) and fr.get("alloc_retries", 0) > 0:
            return {"oom": False, "category": "fragmentation", "severity": "warning", "source": "timeline",
                    "summary": f"{p['name']}: {format_bytes(top['free_in_cache'])} reserved but unused, "
                               f"{fr['alloc_retries']} allocation retries",
                    "evidence": [f"reserved {format_bytes(top['reserved'])}, allocated {format_bytes(top['allocated'])}"],
                    "fixes": FIXES["fragmentation"], "message": None}
    if cut:
        return _cut_short_verdict(processes, host_leaks, outside, kill_evidence or kill.evidence(meta, []), meta)
    return {"oom": False, "category": None, "severity": "ok", "source": "timeline",
            "summary": "no OOM and no steady growth recorded", "evidence": [], "fixes": [], "message": None}
