"""The Prometheus exporter: scraped over HTTP on 127.0.0.1 and parsed with prometheus_client's parser."""

from __future__ import annotations

import socket
import urllib.request

import pytest

from .synth import MiB, write_run

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from oomdoctor.injob.record import exporter  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(port: int) -> dict[tuple[str, str], float]:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {}
    for fam in text_string_to_metric_families(body):
        for s in fam.samples:
            out[(s.name, s.labels.get("rank", ""))] = s.value
    return out


def test_metrics_per_rank_over_http(tmp_path):
    run = write_run(tmp_path / "run", label="rank0", rank=0, steps=10, noise=0, base=1 << 30)
    write_run(run, label="rank1", rank=1, steps=10, noise=0, base=2 << 30)
    registry = prometheus_client.CollectorRegistry()
    port = _free_port()
    server = exporter.serve(str(run), port=port, registry=registry)
    try:
        m = _scrape(port)
    finally:
        server.stop()
    # the last record of each file is a tick sample at alloc + 900 MiB, reserved alloc + 1200 MiB
    assert m[("oomdoctor_allocator_allocated_bytes", "0")] == (1 << 30) + 900 * MiB
    assert m[("oomdoctor_allocator_reserved_bytes", "1")] == (2 << 30) + 1200 * MiB
    assert m[("oomdoctor_allocator_fragmentation_bytes", "0")] == 300 * MiB
    assert m[("oomdoctor_allocator_alloc_retries_total", "1")] == 0
    assert m[("oomdoctor_step", "1")] == 10
    assert ("oomdoctor_process_rss_bytes", "0") in m


def test_new_lines_are_picked_up_between_scrapes(tmp_path):
    run = write_run(tmp_path / "run", steps=3, noise=0)
    tail = exporter.TimelineTail(str(run))
    collector = exporter.RunCollector(tail)
    registry = prometheus_client.CollectorRegistry()
    registry.register(collector)
    assert registry.get_sample_value("oomdoctor_step", {"rank": "0"}) == 3
    with open(run / "timeline-rank0.jsonl", "a") as f:
        f.write('{"kind": "step", "t": 1700000100.0, "step": 4, "allocated": 5, "ooms": 1}\n{"kind": "st')
    assert registry.get_sample_value("oomdoctor_step", {"rank": "0"}) == 4
    assert registry.get_sample_value("oomdoctor_allocator_ooms_total", {"rank": "0"}) == 1


def test_metrics_are_declared_once():
    names = [m[0] for m in exporter.METRICS]
    assert len(names) == len(set(names))
    assert all(n.startswith("oomdoctor_") for n in names)
