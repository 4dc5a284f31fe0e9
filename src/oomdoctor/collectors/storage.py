"""/dev/shm: the mount, its size and use, and torch_* segments left by DataLoader workers.

Live: statvfs and a directory listing. Bundle: the size= option of the mount in proc/mounts, and
commands/shm.json (written by `oomdoctor bundle`) for use and segments.
"""

from __future__ import annotations

import json
import os

from oomdoctor.collectors.context import CollectContext
from oomdoctor.facts import Fact, Unavailable
from oomdoctor.facts.base import Entry
from oomdoctor.parsers.procfs import find_mount, parse_mounts

_SUFFIX = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def tmpfs_size(option: str | None) -> int | None:
    """tmpfs `size=` in /proc/mounts: '65536k', '64m' or bytes. (Percent sizes never appear there.)"""
    if not option:
        return None
    opt = option.strip().lower()
    suffix = opt[-1] if opt and opt[-1] in "kmgt" else ""
    number = opt[:-1] if suffix else opt
    return int(number) * _SUFFIX[suffix] if number.isdigit() and len(number) < 20 else None


def shm_usage_live(ctx: CollectContext) -> dict[str, int] | None:
    try:
        st = os.statvfs(ctx.path("dev/shm"))
    except OSError:
        return None
    return {"size_bytes": st.f_blocks * st.f_frsize, "used_bytes": (st.f_blocks - st.f_bfree) * st.f_frsize}


def count_torch_segments(names: list[str] | None) -> int | None:
    return None if names is None else sum(1 for n in names if n.startswith("torch_"))


def collect_storage(ctx: CollectContext) -> list[Entry]:
    text, why = ctx.read_text("proc/mounts")
    msrc = ctx.label("proc/mounts")
    mount = find_mount(parse_mounts(text), "/dev/shm") if text is not None else None
    out: list[Entry] = []
    if text is None:
        out.append(Unavailable("shm.mount", why, msrc))
    else:
        out.append(Fact("shm.mount", {"fstype": mount.fstype, "options": ",".join(mount.options),
                                      "source": mount.source} if mount else None, msrc))
    size = tmpfs_size(mount.option("size")) if mount else None
    if ctx.bundle:
        extra_text, extra_why = ctx.read_text("commands/shm.json", limit=65536)
        try:
            extra = json.loads(extra_text) if extra_text else {}
        except (ValueError, RecursionError):
            extra = {}
        extra = extra if isinstance(extra, dict) else {}
        xsrc = ctx.label("commands/shm.json")
        if size is None and isinstance(extra.get("size_bytes"), int):
            size, msrc = extra["size_bytes"], xsrc
        used, segments = extra.get("used_bytes"), extra.get("torch_segments")
        size_why = ("no size= on the /dev/shm mount" if mount else "no /dev/shm mount" if text is not None
                    else f"{why}; {extra_why or 'no size_bytes in commands/shm.json'}")
        missing = extra_why or "not recorded in the bundle"
        out.append(Fact("shm.size_bytes", size, msrc) if size is not None
                   else Unavailable("shm.size_bytes", size_why, msrc))
        out.append(Fact("shm.used_bytes", used, xsrc) if isinstance(used, int)
                   else Unavailable("shm.used_bytes", missing, xsrc))
        out.append(Fact("shm.torch_segments", segments, xsrc) if isinstance(segments, int)
                   else Unavailable("shm.torch_segments", missing, xsrc))
        return out
    usage = shm_usage_live(ctx) if mount is not None or text is None else None
    if usage:
        out.append(Fact("shm.size_bytes", usage["size_bytes"], "statvfs(/dev/shm)"))
        out.append(Fact("shm.used_bytes", usage["used_bytes"], "statvfs(/dev/shm)"))
    else:
        out.append(Fact("shm.size_bytes", size, msrc) if size is not None
                   else Unavailable("shm.size_bytes", "no /dev/shm", "statvfs(/dev/shm)"))
        out.append(Unavailable("shm.used_bytes", "no /dev/shm", "statvfs(/dev/shm)"))
    segments = count_torch_segments(ctx.listdir("dev/shm"))
    out.append(Fact("shm.torch_segments", segments, "/dev/shm") if segments is not None
               else Unavailable("shm.torch_segments", "cannot list /dev/shm", "/dev/shm"))
    return out
