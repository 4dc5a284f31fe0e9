"""Kernel log: Xid events, NVRM errors, OOM-killer kills.

Live: `dmesg` with a time limit (often denied inside containers: then the facts are unavailable,
and the cgroup counters carry the OOM evidence). Bundle: commands/dmesg.txt.
"""

from __future__ import annotations

from oomdoctor.collectors.context import CollectContext, CommandRunner
from oomdoctor.facts import Fact, Unavailable
from oomdoctor.facts.base import Entry
from oomdoctor.parsers.kernlog import parse_nvrm_errors, parse_oom_kills, parse_xid_events

DMESG_TIMEOUT_S = 5.0
_KEYS = ("driver.xid_events", "driver.nvrm_errors", "kernel.oom_kills")


def read_kernel_log(ctx: CollectContext) -> tuple[list[str] | None, str, str]:
    """(lines, source, why-not)."""
    if ctx.bundle:
        text, why = ctx.read_text("commands/dmesg.txt")
        return (text.splitlines() if text is not None else None), ctx.label("commands/dmesg.txt"), why
    lines, why = read_dmesg(ctx.runner)
    return lines, "dmesg", why


def read_dmesg(runner: CommandRunner, timeout: float = DMESG_TIMEOUT_S) -> tuple[list[str] | None, str]:
    """(lines, why-not) of one `dmesg` run with a time limit; also `record`'s look after a SIGKILL."""
    res = runner.run(["dmesg"], timeout=timeout)
    if res.error:
        return None, res.error
    if res.returncode != 0:
        first = (res.stderr.strip() or f"exit {res.returncode}").splitlines()[0]
        return None, f"dmesg denied: {first[:200]}"
    return res.stdout.splitlines(), ""


def collect_kernel_log(ctx: CollectContext) -> list[Entry]:
    lines, src, why = read_kernel_log(ctx)
    if lines is None:
        return [Unavailable(k, why, src) for k in _KEYS]
    return [
        Fact("driver.xid_events", parse_xid_events(lines), src),
        Fact("driver.nvrm_errors", parse_nvrm_errors(lines), src),
        Fact("kernel.oom_kills", parse_oom_kills(lines), src),
    ]
