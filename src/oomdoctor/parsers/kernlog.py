"""Kernel log lines: NVIDIA Xid events, other NVRM errors, and OOM-killer kills.

Formats from environment-facts §7 and §9. Lines may carry a `[ 1234.5678]` or ISO timestamp
prefix (dmesg, journalctl -k); the regexes search anywhere in the line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F:.]+)\): (\d+),\s*(.*)")
_XID_PID = re.compile(r"\bpid=(\d+)")
_XID_NAME = re.compile(r"\bname=([^,]*)")
_NVRM_ERROR = re.compile(
    r"NVRM: .*(?:RmInitAdapter failed|failed to allocate|GPU at PCI:\S+ has fallen off the bus|"
    r"API mismatch|request_irq|rm_init_adapter|GPU has fallen off|Out of memory|No NVIDIA GPU found|"
    r"initialization failed|failed to|error)|nvidia-uvm: .*(?:err|fail)",
    re.IGNORECASE,
)
# The name is the victim's comm (15 characters at most, kernel 6.x still): it may hold parentheses and spaces
# (setproctitle("trainer (rank 0)") leaves `trainer (rank 0`), so it runs to the last `)` followed by a space,
# a comma or the end within 64 characters, not to the first `)`; a line of another shape, to the first `)`.
_KILLED = re.compile(r"Killed process (\d+) \((.{0,64})\)(?=[\s,]|$)(.*)")
_KILLED_ANY = re.compile(r"Killed process (\d+) \((.*?)\)(.*)")
_RSS = re.compile(r"\b(total-vm|anon-rss|file-rss|shmem-rss):(\d+)kB")
_OOM_KILL_CONSTRAINT = re.compile(r"oom-kill:constraint=(\w+).*?(?:oom_memcg=([^,]*))?,task_memcg=([^,]*),task=([^,]*),pid=(\d+)")
_REASON = re.compile(r"(Memory cgroup out of memory|Out of memory)")
_RELEVANT = re.compile(r"NVRM|nvidia|Xid|oom|Out of memory|Killed process", re.IGNORECASE)
MAX_LINE = 4096


_UPTIME = re.compile(r"^\s*(?:<\d+>)?\[\s*(\d{1,10}\.\d{1,9})\]")


def line_uptime(line: str) -> float | None:
    """Seconds since boot of a plain `dmesg` line (`[ 1234.567890] ...`), None for other formats."""
    m = _UPTIME.match(line[:64])
    return float(m.group(1)) if m else None


def relevant_lines(lines: Iterable[str]) -> list[str]:
    """Only the lines a bundle needs (NVRM, Xid, nvidia, OOM), each cut to MAX_LINE characters."""
    return [line[:MAX_LINE] for line in lines if _RELEVANT.search(line[:MAX_LINE])]


def parse_xid_events(lines: Iterable[str]) -> list[dict[str, Any]]:
    events = []
    for number, line in enumerate(lines, 1):
        m = _XID.search(line[:MAX_LINE])
        if not m:
            continue
        rest = m.group(3)
        pid = _XID_PID.search(rest)
        name = _XID_NAME.search(rest)
        events.append({
            "code": int(m.group(2)) if len(m.group(2)) < 6 else None, "pci": m.group(1),
            "pid": int(pid.group(1)) if pid and len(pid.group(1)) < 12 else None,
            "name": name.group(1).strip() if name else None,
            "text": rest.strip()[:500], "line": number,
        })
    return events


def parse_nvrm_errors(lines: Iterable[str]) -> list[dict[str, Any]]:
    """NVRM / nvidia-uvm error lines that are not Xid events."""
    out = []
    for number, line in enumerate(lines, 1):
        line = line[:MAX_LINE]
        if "Xid" in line:
            continue
        if _NVRM_ERROR.search(line):
            idx = max(line.find("NVRM:"), line.find("nvidia-uvm:"))
            out.append({"text": line[idx:].strip()[:500], "line": number})
    return out


def parse_oom_kills(lines: Iterable[str]) -> list[dict[str, Any]]:
    """One entry per `Killed process` line, enriched by the preceding `oom-kill:constraint=` line."""
    kills: list[dict[str, Any]] = []
    pending: dict[str, Any] = {}
    for number, line in enumerate(lines, 1):
        line = line[:MAX_LINE]
        c = _OOM_KILL_CONSTRAINT.search(line)
        if c:
            pending = {"constraint": c.group(1), "memcg": c.group(2) or c.group(3), "oom_memcg": c.group(2) or None,
                       "task_memcg": c.group(3) or None, "pid": c.group(5)}
            continue
        m = _KILLED.search(line) or _KILLED_ANY.search(line)
        if not m or len(m.group(1)) > 12:
            continue
        if pending.get("pid") != m.group(1):  # the constraint line of another kill (lines lost or interleaved)
            pending = {}
        rss = {k: int(v) for k, v in _RSS.findall(m.group(3)) if len(v) < 16}
        reason = _REASON.search(line)
        kills.append({
            "pid": int(m.group(1)), "comm": m.group(2)[:64],
            "anon_rss_kb": rss.get("anon-rss"), "file_rss_kb": rss.get("file-rss"), "shmem_rss_kb": rss.get("shmem-rss"),
            "reason": reason.group(1) if reason else None,
            "memcg": pending.get("memcg"), "constraint": pending.get("constraint"),
            # the killed task's cgroup, and the one whose limit was hit (a memcg OOM): which container it was in
            "task_memcg": pending.get("task_memcg"), "oom_memcg": pending.get("oom_memcg"),
            "line": number, "text": line.strip()[:500],
        })
        pending = {}
    return kills
