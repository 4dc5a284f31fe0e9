"""Parsers for /proc and /etc text files: meminfo, mounts, cgroup membership, os-release, version, environ.

Every function takes whatever bytes were in the file (possibly truncated, binary or hostile) and
returns what it could understand; none of them raises on bad input.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_MEMINFO_LINE = re.compile(r"^([A-Za-z0-9_()]+):\s+(\d{1,20})(?:\s+(kB))?\s*$")


def parse_meminfo(text: str) -> dict[str, int]:
    """`/proc/meminfo` as {field: bytes} (the kernel's "kB" means KiB)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        m = _MEMINFO_LINE.match(line.strip())
        if m:
            out[m.group(1)] = int(m.group(2)) * (1024 if m.group(3) else 1)
    return out


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    fstype: str
    options: tuple[str, ...]

    def option(self, name: str) -> str | None:
        for opt in self.options:
            key, _, value = opt.partition("=")
            if key == name:
                return value
        return None


_OCTAL = re.compile(r"\\([0-7]{3})")


def _unescape(field: str) -> str:
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse_mounts(text: str) -> list[Mount]:
    """`/proc/mounts` (or /proc/self/mounts) lines; spaces in paths come escaped as `\\040`."""
    mounts = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        mounts.append(Mount(_unescape(parts[0]), _unescape(parts[1]), parts[2], tuple(parts[3].split(","))))
    return mounts


def find_mount(mounts: list[Mount], target: str) -> Mount | None:
    """The mount visible at `target` (the last one wins: later mounts hide earlier ones)."""
    found = None
    for m in mounts:
        if m.target == target:
            found = m
    return found


def cgroup_version(mounts: list[Mount]) -> int | None:
    """2 when /sys/fs/cgroup is cgroup2 (unified); 1 when v1 controllers are mounted; else None."""
    if any(m.fstype == "cgroup2" and m.target == "/sys/fs/cgroup" for m in mounts):
        return 2
    if any(m.fstype == "cgroup" for m in mounts):
        return 1
    if any(m.fstype == "cgroup2" for m in mounts):
        return 2
    return None


@dataclass(frozen=True)
class CgroupEntry:
    hierarchy: str
    controllers: tuple[str, ...]
    path: str


def parse_proc_cgroup(text: str) -> list[CgroupEntry]:
    """`/proc/self/cgroup`: `hierarchy-ID:controller-list:path` (v2: `0::/path`)."""
    out = []
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3 or not parts[2].startswith("/"):
            continue
        controllers = tuple(c for c in parts[1].split(",") if c)
        out.append(CgroupEntry(parts[0], controllers, parts[2]))
    return out


def cgroup_path_for(entries: list[CgroupEntry], controller: str | None) -> str | None:
    """The path of the v1 hierarchy holding `controller`, or of the v2 entry when controller is None."""
    for e in entries:
        if controller is None and e.hierarchy == "0" and not e.controllers:
            return e.path
        if controller is not None and controller in e.controllers:
            return e.path
    return None


def parse_os_release(text: str) -> dict[str, str]:
    """`/etc/os-release` KEY=value pairs, quotes removed."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        if not re.fullmatch(r"[A-Z0-9_]+", key):
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        out[key] = value.replace('\\"', '"')
    return out


_PROC_VERSION = re.compile(r"Linux version (\S+)")


def parse_proc_version(text: str) -> str | None:
    """The kernel release from `/proc/version` ('Linux version 3.10.0-1062.9.1.el7.x86_64 (...)')."""
    m = _PROC_VERSION.search(text)
    return m.group(1) if m else None


def parse_environ(data: bytes | str) -> dict[str, str]:
    """NUL-separated KEY=VALUE (`/proc/<pid>/environ`); newline-separated text is accepted too."""
    if isinstance(data, bytes):
        data = data.decode("utf-8", errors="replace")
    sep = "\0" if "\0" in data else "\n"
    out: dict[str, str] = {}
    for item in data.split(sep):
        key, eq, value = item.partition("=")
        if eq and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.\-]*", key):
            out[key] = value
    return out


def parse_cpu_list(text: str) -> int | None:
    """Count of CPUs in a list like `0-3,8,10-11` (cpuset.cpus.effective)."""
    total = 0
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        lo, dash, hi = part.partition("-")
        if not (lo.isascii() and lo.isdigit()) or (dash and not (hi.isascii() and hi.isdigit())):
            return None
        total += (int(hi) - int(lo) + 1) if dash else 1
    return total or None
