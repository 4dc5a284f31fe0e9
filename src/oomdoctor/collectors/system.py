"""Host basics: RAM, CPUs, host name, kernel release, OS release."""

from __future__ import annotations

import os
import platform
import socket

from oomdoctor.collectors.context import CollectContext
from oomdoctor.facts import Fact, Unavailable
from oomdoctor.facts.base import Entry
from oomdoctor.parsers.procfs import parse_meminfo, parse_os_release, parse_proc_version


def collect_system(ctx: CollectContext) -> list[Entry]:
    out: list[Entry] = []
    out += _meminfo(ctx)
    out += _host(ctx)
    out += _kernel(ctx)
    out += _os_release(ctx)
    return out


def _meminfo(ctx: CollectContext) -> list[Entry]:
    text, why = ctx.read_text("proc/meminfo")
    src = ctx.label("proc/meminfo")
    fields = parse_meminfo(text) if text is not None else {}
    out: list[Entry] = []
    for key, field in (("host.mem_total_bytes", "MemTotal"), ("host.mem_available_bytes", "MemAvailable"),
                       ("host.swap_total_bytes", "SwapTotal")):
        if field in fields:
            out.append(Fact(key, fields[field], src))
        else:
            out.append(Unavailable(key, why or f"no {field} line", src))
    return out


def _host(ctx: CollectContext) -> list[Entry]:
    out: list[Entry] = []
    if ctx.bundle:
        name = ctx.meta.get("hostname")
        cpus = ctx.meta.get("cpu_count")
        src = ctx.label("meta.json")
        out.append(Fact("host.name", name, src) if isinstance(name, str) and name
                   else Unavailable("host.name", "no hostname in meta.json", src))
        out.append(Fact("host.cpu_count", cpus, src) if isinstance(cpus, int)
                   else Unavailable("host.cpu_count", "no cpu_count in meta.json", src))
        return out
    node = ctx.env.get("NODE_NAME", "").strip()  # set from spec.nodeName by deploy/ (pod hostname = pod name)
    out.append(Fact("host.name", node, "env:NODE_NAME") if node
               else Fact("host.name", socket.gethostname(), "gethostname()"))
    try:
        cpus = len(os.sched_getaffinity(0))
        out.append(Fact("host.cpu_count", cpus, "sched_getaffinity"))
    except (AttributeError, OSError):
        count = os.cpu_count()
        out.append(Fact("host.cpu_count", count, "os.cpu_count()") if count
                   else Unavailable("host.cpu_count", "unknown", "os.cpu_count()"))
    return out


def _kernel(ctx: CollectContext) -> list[Entry]:
    text, why = ctx.read_text("proc/version")
    src = ctx.label("proc/version")
    release = parse_proc_version(text) if text is not None else None
    if release:
        return [Fact("kernel.release", release, src)]
    if not ctx.bundle and platform.system() == "Linux":
        return [Fact("kernel.release", platform.release(), "uname -r")]
    return [Unavailable("kernel.release", why or "no 'Linux version' in /proc/version", src)]


def _os_release(ctx: CollectContext) -> list[Entry]:
    # deploy/ mounts the node's file at /etc/host-os-release: in a pod, /etc/os-release is the image's.
    src = ctx.label("etc/host-os-release")
    text, why = ctx.read_text("etc/host-os-release")
    if text is None:
        src = ctx.label("etc/os-release")
        text, why = ctx.read_text("etc/os-release")
    if text is None:
        text2, _ = ctx.read_text("usr/lib/os-release")
        if text2 is not None:
            text, src = text2, ctx.label("usr/lib/os-release")
    fields = parse_os_release(text) if text is not None else {}
    out: list[Entry] = []
    if fields.get("PRETTY_NAME"):
        out.append(Fact("os.name", fields["PRETTY_NAME"], src))
    else:
        out.append(Unavailable("os.name", why or "no PRETTY_NAME", src))
    if fields.get("ID"):
        out.append(Fact("os.id", f"{fields['ID']} {fields.get('VERSION_ID', '')}".strip(), src))
    else:
        out.append(Unavailable("os.id", why or "no ID", src))
    return out
