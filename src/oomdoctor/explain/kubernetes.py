"""What Kubernetes' own record of a container's end says beside its exit code 137.

kubectl describe prints "Last State: Terminated / Reason: Error / Exit Code: 137", a pod's YAML `terminated:
{exitCode: 137, reason: Error}`. Kubernetes says `Reason: OOMKilled` when the container's cgroup OOM killer ended it
(that line is an event of its own, k8s_oomkilled); with `Error` the SIGKILL came from something else: the kubelet
after failed liveness probes, a preemption, a stop past its grace period (a new user's walkthrough, session 28:
kubernetes#122256 was told host_oom and to rerun with CUDA_LAUNCH_BLOCKING). Pure: events and the scanner's samples in.
"""

from __future__ import annotations

import re
from typing import Any

# the exit code as Kubernetes prints it: kubectl describe's field, or the pod's YAML
K8S_EXIT_LINE = re.compile(r"^\s*(?:Exit Code:\s+|exitCode:\s*)137\s*$")
_REASON = re.compile(r"^\s*(?:Reason:\s+|reason:\s*)[\"']?(\w+)[\"']?\s*$")
RECORD_LINES = 6  # fields of one termination record looked at on each side of the exit code


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _reason(lines: list[str], at: int) -> str | None:
    """The Reason field of the record that holds lines[at]: its neighbours at the same indentation (a record's
    fields), up to where the indentation changes (describe's "State: Running" record above it has its own)."""
    ind = _indent(lines[at])
    for step in (-1, 1):
        i = at + step
        while 0 <= i < len(lines) and abs(i - at) <= RECORD_LINES and lines[i].strip() and _indent(lines[i]) == ind:
            m = _REASON.match(lines[i])
            if m:
                return m.group(1)
            i += step
    return None


def k8s_reasons(events: list[Any], samples: list[tuple[str, int, str]]) -> None:
    """Each exit-137 event printed as Kubernetes' record gets that record's reason (details["k8s_reason"]), where a
    sample of the log (its head or tail) holds it."""
    for e in events:
        if e.kind != "exit_137" or not K8S_EXIT_LINE.match(e.text):
            continue
        for source, first, text in samples:
            lines = text.split("\n")
            if source == e.source and first <= e.line < first + len(lines):
                reason = _reason(lines, e.line - first)
                if reason is not None:
                    e.details["k8s_reason"] = reason
                break
