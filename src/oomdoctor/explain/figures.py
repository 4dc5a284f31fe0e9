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


def unaccounted_of(n: Mapping[str, Any], details: Mapping[str, Any]) -> int | None:
    """Total less free, this process and the processes the message lists (PyTorch >= 2.1 lists NVML's
    processes on that GPU). None without the breakdown."""
    t, f, p = n.get("total_bytes"), n.get("free_bytes"), n.get("process_bytes")
    own = own_figure(p, n.get("reserved_bytes"), n.get("allocated_bytes"), n.get("reserved_unallocated_bytes"), t)
    if t is None or f is None or p is None or own is None:
        return None
    return t - f - own - sum(int(x.get("bytes") or 0) for x in details.get("other_processes") or [])


def gap_key(n: Mapping[str, Any], details: Mapping[str, Any]) -> tuple | None:
    """None where the message accounts for its card; else its card and the gap in whole GiB, so that ranks
    whose messages all say "GPU 0" (each its own CUDA_VISIBLE_DEVICES) but leave different gaps stay apart.
    The gap is read from the message's own "this process has" figure only: a container's pid-namespace form
    (rules.torch_oom infers the job's figure from a listed process) is not read here, and such repeats merge
    as before (review, session 16)."""
    gap, t = unaccounted_of(n, details), n.get("total_bytes")
    if gap is None or t is None or gap < max(GIB, 0.1 * t):
        return None
    return ("gap", details.get("gpu"), round(gap / GIB))
