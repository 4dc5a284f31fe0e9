"""The on-disk layout of a recorded run (`oomdoctor record` / `oomdoctor.watch`).

Shared by the in-job recorder (writes) and the report (reads), so both sides name files and record
kinds the same way. A run directory holds:

    run.json                    the command, start/end, exit status (`oomdoctor record`), or how the
                                watched block ended (`oomdoctor.watch` and the callbacks: block,
                                ended_by, exception, exited_inside)
    timeline-<label>.jsonl      one per process: rank<N> when the rank is known, else pid<N>
    outside.jsonl               NVML + host samples taken by the parent, outside the job
    oom-<label>-<n>.json        post-mortem evidence at each OOM (stats, snapshot summary, trace tail)
    final-<label>.json          the same summary at a normal end of the run (live blocks, trace peak)
    env.json                    environment facts, when oomdoctor.collectors.machine is available
    errors-<label>.log          oomdoctor's own errors; never raised into the job

Every JSONL file starts with a header line {"kind": "header", "schema_version": 1, ...}. Records are
{"kind": "sample"|"step"|"oom"|"rank"|"exception"|"note", "t": unix seconds, ...}. Sizes are bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SCHEMA_VERSION = 1
FORMAT = "oomdoctor-record"

RUN_META = "run.json"
OUTSIDE = "outside.jsonl"
ENV = "env.json"
TIMELINE_PREFIX = "timeline-"
OOM_PREFIX = "oom-"
FINAL_PREFIX = "final-"
START_PREFIX = "start-"  # what was live, by source and by block size, early in the run

# allocator fields kept per sample: memory_stats() key -> short name in the timeline
ALLOCATOR_FIELDS = {
    "allocated_bytes.all.current": "allocated",
    "reserved_bytes.all.current": "reserved",
    "active_bytes.all.current": "active",
    "inactive_split_bytes.all.current": "inactive_split",
    "allocated_bytes.all.peak": "peak_allocated",
    "reserved_bytes.all.peak": "peak_reserved",
    "num_alloc_retries": "alloc_retries",
    "num_ooms": "ooms",
}


def timeline_name(label: str) -> str:
    return f"{TIMELINE_PREFIX}{label}.jsonl"


def oom_name(label: str, n: int) -> str:
    return f"{OOM_PREFIX}{label}-{n}.json"


def final_name(label: str) -> str:
    return f"{FINAL_PREFIX}{label}.json"


def start_name(label: str) -> str:
    return f"{START_PREFIX}{label}.json"


def label_for(rank: int | None, pid: int) -> str:
    return f"rank{rank}" if rank is not None else f"pid{pid}"


@dataclass(frozen=True)
class RunFiles:
    """The raw contents of a run directory, read by collectors.rundir, analysed by analysis.timeline."""

    path: str
    meta: dict[str, Any] | None = None
    timelines: dict[str, str] = field(default_factory=dict)  # label -> JSONL text
    outside: str | None = None  # JSONL text
    evidence: tuple[dict[str, Any], ...] = ()  # parsed oom-*, final-*, start-*.json, each with "file"
    env: dict[str, Any] | None = None
    errors: dict[str, str] = field(default_factory=dict)  # file name -> text (oomdoctor's own errors)
    problems: tuple[str, ...] = ()  # unreadable or malformed files, one line each
