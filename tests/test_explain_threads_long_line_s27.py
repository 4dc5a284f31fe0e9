"""GIVEN a log with a line over 64 KiB across the 8 MiB block boundary WHEN `oomdoctor explain` reads it with
--threads 1 and --threads 4 THEN the readings, the environment hints, the bytes and the report are the same, and the
bytes are the log's size.

A review found the scanner advanced its place in the log by each span's length, not by where the span stood: a
line over 64 KiB is handed on as its first and last 32 KiB, and the one-thread reader (reads of 8 MiB) and the
threads' windows (8 MiB, reaching 64 KiB past their end) shorten different lines. The sample points of the
readings (every 8 MiB), the end of the head where hints are looked for everywhere (8 MiB) and LogScan.bytes
then depended on --threads. Places are now offsets in the log, as the reader knows them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oomdoctor.cli import main
from oomdoctor.cli.explain import _scan_files
from oomdoctor.explain import patterns as P
from oomdoctor.explain.events import FULL_READING_BYTES, SAMPLE_EVERY_BYTES, LogScanner, index_block
from oomdoctor.explain.read import BLOCK, MAX_LINE, iter_prepared_at

OOM = b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB\n"
HINT = b"export XLA_PYTHON_CLIENT_MEM_FRACTION=0.5\n"  # a hint looked for in the log's head only


def _filler(upto: int, at: int) -> bytes:
    """Lines of no interest from log byte `at` to `upto`."""
    out, i = [], 0
    while at < upto:
        line = b"epoch 3 batch %07d loss 0.51\n" % i
        line = line if at + len(line) <= upto else b"x" * (upto - at - 1) + b"\n"
        out.append(line)
        at += len(line)
        i += 1
    return b"".join(out)


def _log(before: int, after: int, ended: bool = True) -> bytes:
    """A log whose line over MAX_LINE starts `before` bytes before the 8 MiB boundary and ends `after` bytes past it;
    a hint right after it, memory readings on every line around the second sample point (10 MiB), an OOM."""
    assert before + after > MAX_LINE and BLOCK == P.ENV_BYTES == SAMPLE_EVERY_BYTES
    data = _filler(BLOCK - before, 0)
    data += b"progress " + b"#" * (before + after - len(b"progress \n")) + (b"\n" if ended else b"")
    if not ended:
        return data
    data += HINT
    point = FULL_READING_BYTES + SAMPLE_EVERY_BYTES  # where the second sample of readings is taken
    data += _filler(point - 160 * 1024, len(data))
    step = 0
    while len(data) < point + 160 * 1024:
        data += b"step %d | max_memory_allocated: %d.%02d GiB\n" % (step, 10 + step % 7, step % 100)
        step += 1
    return data + OOM


CASES = {
    "one reader shortens the line": (100 * 1024, 20 * 1024, True),  # > 64 KiB before the boundary, < 64 KiB after
    "the windows shorten the line": (10 * 1024, 150 * 1024, True),  # < 64 KiB before, > 64 KiB after
    "both shorten it": (100 * 1024, 100 * 1024, True),
    "the log ends with it": (100 * 1024, 100 * 1024, False),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def log(request, tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("long") / "train.log"
    p.write_bytes(_log(*CASES[request.param]))
    return p


def _scan(path: Path, threads: int):
    scanner = LogScanner()
    _scan_files(scanner, [str(path)], None, threads)
    return scanner.finish()


def test_readings_hints_and_bytes_do_not_depend_on_threads(log):
    one, four = _scan(log, 1), _scan(log, 4)
    assert one.bytes == four.bytes == log.stat().st_size
    assert one.env == four.env
    assert one.readings == four.readings
    assert [(e.kind, e.line, e.text, e.count) for e in one.events] == [(e.kind, e.line, e.text, e.count)
                                                                       for e in four.events]
    assert one.lines == four.lines and one.samples == four.samples


def test_the_hint_past_the_head_is_not_read_as_the_heads(log):
    """The hint stands past ENV_BYTES in the log: it is not looked for there (no OOM within 40 lines after it)."""
    assert "mem_fraction" not in _scan(log, 1).env


def test_the_report_does_not_depend_on_threads(log, capsys):
    outs = []
    for threads in (1, 4):
        main(["explain", "--format", "json", "--threads", str(threads), str(log)])
        outs.append(json.loads(capsys.readouterr().out))
    assert outs[0] == outs[1]


# --- the same with the log's places scaled down, so that small logs cross every threshold --------------------------

def _readings(first: int, n: int) -> bytes:
    return b"".join(b"step %d | max_memory_allocated: %d.%02d GiB\n" % (i, 10 + i % 7, i % 100)
                    for i in range(first, first + n))


_SMALL_LINES = st.one_of(
    st.builds(_readings, st.integers(0, 999), st.integers(1, 300)),
    st.just(HINT), st.builds(lambda n: b"epoch 1 loss 0.5\n" * n, st.integers(1, 2000)), st.just(OOM), st.just(b"\r\n"),
    st.integers(MAX_LINE - 8, 3 * MAX_LINE).map(lambda n: b"#" * n + b"\n"),
    st.integers(MAX_LINE - 8, 3 * MAX_LINE).map(lambda n: b"#" * n + b" step 7 allocated 3.5 GiB\n"),
)


def _small_places(monkeypatch) -> None:
    """Places a few long lines reach: the head's end, the readings' sample points and windows."""
    from oomdoctor.explain import events

    monkeypatch.setattr(events, "FULL_READING_BYTES", 100_000)
    monkeypatch.setattr(events, "SAMPLE_READING_BYTES", 3_000)
    monkeypatch.setattr(events, "SAMPLE_EVERY_BYTES", 120_000)
    monkeypatch.setattr(events, "DENSE_SAMPLING_BYTES", 1_000_000)
    monkeypatch.setattr(P, "ENV_BYTES", 150_000)


def _scan_with(path: Path, threads: int, block: int):
    scanner = LogScanner()
    scanner.start_source("x")
    for buf, s, e, index, offset, length in iter_prepared_at(str(path), index_block, workers=threads, block_size=block):
        scanner.feed(buf, s, e, index, offset, length)
    scan = scanner.finish()
    return (scan.bytes, scan.env, scan.readings, scan.lines, scan.samples,
            [(e.kind, e.line, e.text, e.count) for e in scan.events])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(_SMALL_LINES, min_size=1, max_size=30), block=st.sampled_from([1000, 4096, 3 * (MAX_LINE + 1)]),
       threads=st.integers(2, 4))
def test_every_thread_count_and_block_reads_the_same_places(tmp_path, monkeypatch, lines, block, threads):
    _small_places(monkeypatch)
    p = tmp_path / "f.log"
    p.write_bytes(b"".join(lines))
    one = _scan_with(p, 1, block)
    assert one[0] == p.stat().st_size
    assert _scan_with(p, threads, block) == one
