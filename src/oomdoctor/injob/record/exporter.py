"""Prometheus metrics dcgm-exporter cannot see: the caching allocator's view, per rank.

The exporter runs in `oomdoctor record`'s parent process and tails the run's timeline files, so the
job itself opens no port and any number of ranks share one endpoint. Metrics are declared as data
(METRICS); the registry is injectable (tests use their own). Binds 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import glob
import json
import os
import threading
from collections.abc import Iterator
from typing import Any

from oomdoctor.facts import recording

# (name, type, help, how to read it from the latest record of a process)
METRICS: tuple[tuple[str, str, str, Any], ...] = (
    ("oomdoctor_allocator_allocated_bytes", "gauge", "Bytes in live tensors (torch allocated_bytes.all.current)",
     lambda r: r.get("allocated")),
    ("oomdoctor_allocator_reserved_bytes", "gauge", "Bytes held by the caching allocator (reserved_bytes.all.current)",
     lambda r: r.get("reserved")),
    ("oomdoctor_allocator_active_bytes", "gauge", "Bytes in active blocks (active_bytes.all.current)",
     lambda r: r.get("active")),
    ("oomdoctor_allocator_inactive_split_bytes", "gauge",
     "Free bytes inside partly used segments, not releasable (inactive_split_bytes.all.current)",
     lambda r: r.get("inactive_split")),
    ("oomdoctor_allocator_fragmentation_bytes", "gauge", "Reserved minus allocated bytes",
     lambda r: r["reserved"] - r["allocated"] if "reserved" in r and "allocated" in r else None),
    ("oomdoctor_allocator_peak_allocated_bytes", "gauge", "Peak allocated bytes (allocated_bytes.all.peak)",
     lambda r: r.get("peak_allocated")),
    ("oomdoctor_allocator_alloc_retries", "counter", "cudaMalloc failures that flushed the cache and retried",
     lambda r: r.get("alloc_retries")),
    ("oomdoctor_allocator_ooms", "counter", "Out-of-memory errors raised by the allocator",
     lambda r: r.get("ooms")),
    ("oomdoctor_process_gpu_used_bytes", "gauge", "GPU memory NVML attributes to the process (context included)",
     lambda r: r.get("gpu_proc_used")),
    ("oomdoctor_process_rss_bytes", "gauge", "Host resident memory of the process", lambda r: r.get("rss")),
    ("oomdoctor_step", "gauge", "Last training step marked by the process", lambda r: r.get("step")),
)


class TimelineTail:
    """Reads new complete lines of every timeline in a run dir; keeps the latest values per process."""

    def __init__(self, run_dir: str):
        self.run_dir = run_dir
        self._offsets: dict[str, int] = {}
        self._latest: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def poll(self) -> None:
        for path in glob.glob(os.path.join(self.run_dir, recording.TIMELINE_PREFIX + "*.jsonl")):
            label = os.path.basename(path)[len(recording.TIMELINE_PREFIX):-len(".jsonl")]
            try:
                with open(path, "rb") as f:
                    f.seek(self._offsets.get(path, 0))
                    chunk = f.read(4 << 20)
            except OSError:
                continue
            end = chunk.rfind(b"\n")
            if end < 0:
                continue
            self._offsets[path] = self._offsets.get(path, 0) + end + 1
            for line in chunk[:end].splitlines():
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if isinstance(rec, dict):
                    self._update(label, rec)

    def _update(self, label: str, rec: dict[str, Any]) -> None:
        with self._lock:
            cur = self._latest.setdefault(label, {"rank": label})
            if rec.get("kind") == "header" or rec.get("kind") == "rank":
                if rec.get("rank") is not None:
                    cur["rank"] = str(rec["rank"])
                return
            if rec.get("kind") in ("sample", "step"):
                cur.update({k: v for k, v in rec.items() if isinstance(v, (int, float)) and k != "t"})

    def latest(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return {k: dict(v) for k, v in self._latest.items()}


class RunCollector:
    """A prometheus_client custom collector over a TimelineTail (values are read at scrape time)."""

    def __init__(self, tail: TimelineTail):
        self.tail = tail

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        try:
            self.tail.poll()
        except Exception:
            pass
        latest = self.tail.latest()
        for name, kind, doc, read in METRICS:
            cls = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
            family = cls(name, doc, labels=["rank"])
            for rec in latest.values():
                try:
                    value = read(rec)
                except Exception:
                    value = None
                if value is not None:
                    family.add_metric([str(rec.get("rank"))], float(value))
            yield family


class Server:
    def __init__(self, httpd: Any, thread: Any):
        self.httpd, self.thread = httpd, thread

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def serve(run_dir: str, *, port: int, addr: str = "127.0.0.1", registry: Any = None) -> Server:
    """Serve the run's metrics on http://addr:port/metrics; returns a handle with stop()."""
    from prometheus_client import CollectorRegistry, start_http_server

    registry = registry if registry is not None else CollectorRegistry()
    registry.register(RunCollector(TimelineTail(run_dir)))
    result = start_http_server(port, addr=addr, registry=registry)
    if isinstance(result, tuple):
        return Server(*result)
    raise RuntimeError("prometheus_client too old: start_http_server returned no server handle (need >= 0.17)")
