"""What a PyTorch OOM message's own breakdown says of the failing card: this process's figure and the part of
the card no figure explains. Below `events` because the scanner needs it too: repeats of one message merge
across ranks only when each rank's message accounts for its card (a rank failing beside a hidden co-tenant
keeps its own figures). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

GIB = 1 << 30


def own_figure(p: int | None, r: int | None, a: int | None, u: int | None, t: int | None) -> int | None:
    """This process's memory by the message: "this process has" where NVML gave a figure, never below PyTorch's
    own reserve. NVML without per-process figures prints 0 bytes (cloud VMs, containers) and WDDM/WSL its
    not-available value (17179869184.00 GiB): no figure then (review, session 15)."""
    if p is not None and (p == 0 or (t is not None and p > t)):
        p = None
    cache = r if r is not None else (a + u if a is not None and u is not None else a)
    known = [x for x in (p, cache) if x is not None]
    return max(known) if known else None


# A CUDA context and what a library adds to it: a listed process within this of PyTorch's reserve is the job.
CONTEXT_MAX = int(1.5 * GIB)
# What the message's rounded figures and NVML's view against the allocator's may be off by when they are added up.
_ROUNDING = GIB // 4


def _cannot_share(x: int, r: int, t: int | None) -> bool:
    """A listed process of `x` bytes cannot be another process beside this job's own reserve `r`: both would not
    fit on the card (`t`), so its figure holds the job's memory."""
    return t is not None and x >= r and x + r > t + max(_ROUNDING, t // 100)


def breakdown(n: Mapping[str, Any], details: Mapping[str, Any]) -> tuple[dict[str, int | None], list[dict], Any]:
    """The message's figures as the rules read them: (P, R, A, U), the other processes it lists, and the pid
    taken to be this job (or None). <= 2.0 prints reserved total and allocated (their difference is the
    cache). With NVML, 2.1+ names this process "this process" by pid; inside a container the pid NVML sees
    differs, so the job itself shows up as "Process N": a listed process whose use is PyTorch's reserve plus
    at most a context is taken to be this job, and so is one that could not fit on the card beside that reserve."""
    a, p = n.get("allocated_bytes"), n.get("process_bytes")
    u, r = n.get("reserved_unallocated_bytes"), n.get("reserved_bytes")
    if u is None and r is not None and a is not None:
        u = max(0, r - a)
    if r is None and a is not None and u is not None:
        r = a + u
    procs = [dict(x) for x in details.get("other_processes") or []]
    me = None
    # a message cut before its reserve (TGI's "... Of the allocated memory 37.21 GiB is allo") still has the allocated
    # figure, which the reserve is at least: a listed process that could not fit on the card beside it is the job
    # (a walkthrough, session 28: its pid through a container's namespace was told "stop or move those processes")
    floor = r if r is not None else a
    if p is None and procs and floor is not None:
        mine = [x for x in procs if r is not None and r <= x["bytes"] <= r + CONTEXT_MAX]
        if not mine:  # more than a context beside the reserve (NCCL, cuBLAS workspaces on an H100: 1.57 GiB,
            # session 27), yet the two would not fit on the card together: still the job
            mine = [x for x in procs if _cannot_share(x["bytes"], floor, n.get("total_bytes"))]
        if len(mine) == 1:
            p, me = mine[0]["bytes"], mine[0]["pid"]
            procs.remove(mine[0])
    return {"P": p, "R": r, "A": a, "U": u}, procs, me


def unaccounted_of(n: Mapping[str, Any], details: Mapping[str, Any]) -> int | None:
    """Total less free, this process and the other processes the message lists (PyTorch >= 2.1 lists NVML's
    processes on that GPU). None without the breakdown."""
    t, f = n.get("total_bytes"), n.get("free_bytes")
    fig, procs, _ = breakdown(n, details)
    own = own_figure(fig["P"], fig["R"], fig["A"], fig["U"], t)
    if t is None or f is None or fig["P"] is None or own is None:
        return None
    return t - f - own - sum(int(x.get("bytes") or 0) for x in procs)


def is_gap(gap: int | None, t: int | None) -> bool:
    """Memory the message leaves unexplained that a context or a rounding cannot: a GiB and a tenth of the card."""
    return gap is not None and t is not None and gap >= max(GIB, 0.1 * t)


def gap_key(n: Mapping[str, Any], details: Mapping[str, Any]) -> tuple | None:
    """None where the message accounts for its card; else its card and the gap in whole GiB, so that ranks
    whose messages all say "GPU 0" (each its own CUDA_VISIBLE_DEVICES) but leave different gaps stay apart.
    The same reading as rules.torch_oom's hidden-memory branch (breakdown, is_gap)."""
    gap, t = unaccounted_of(n, details), n.get("total_bytes")
    return ("gap", details.get("gpu"), round(gap / GIB)) if is_gap(gap, t) else None
