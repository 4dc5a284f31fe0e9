"""GIVEN reader threads and a ring of reused buffers WHEN a log holds lines longer than the ring
THEN no span is overwritten before the scanner has read it (same events as without threads)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oomdoctor.collectors.logs import iter_prepared
from oomdoctor.parsers.oom_events import LogScanner
from oomdoctor.parsers.oom_prefilter import index_block

OOM = b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"


def _scan(path: str, workers: int, block: int):
    sc = LogScanner()
    sc.start_source("x")
    for buf, start, end, index in iter_prepared(path, index_block, workers=workers, block_size=block):
        sc.feed(buf, start, end, index)
    scan = sc.finish()
    return [(e.kind, e.line, e.text) for e in scan.events], scan.lines


@pytest.mark.parametrize("workers", [2, 3, 5])
def test_a_line_longer_than_the_ring_does_not_overwrite_pending_spans(tmp_path, workers):
    head = b"".join(b"step %d ok\n" % i for i in range(300)) + OOM  # several blocks, OOM at the end
    giant = b"x" * (200 * 1024) + b"\n"  # 50 reads of 4 KiB without a newline
    p = tmp_path / "log"
    p.write_bytes(head + giant + OOM + b"done\n")
    assert _scan(str(p), workers, 4096) == _scan(str(p), 1, 4096)
    events, _ = _scan(str(p), workers, 4096)
    assert [e[1] for e in events if e[0] == "torch_oom"] == [301, 303]


_LINE = st.one_of(
    st.just(OOM), st.just(b"Killed\n"), st.just(b"\n"),
    st.binary(min_size=0, max_size=64).map(lambda b: b.replace(b"\n", b"") + b"\n"),
    st.integers(1, 40_000).map(lambda n: b"y" * n + b"\n"),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(_LINE, min_size=1, max_size=60), block=st.sampled_from([512, 1024, 4096]),
       workers=st.integers(2, 5))
def test_threads_and_ring_never_change_the_scan(tmp_path, lines, block, workers):
    p = tmp_path / "fuzz.log"
    p.write_bytes(b"".join(lines))
    assert _scan(str(p), workers, block) == _scan(str(p), 1, block)


def test_a_named_pipe_gets_reader_threads(tmp_path, monkeypatch):
    """A FIFO (e.g. `explain <(zcat big.log.gz)`) has no size: it is not mistaken for a one-block file."""
    import os
    import threading

    import oomdoctor.collectors.logs as logs

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    data = b"".join(b"line %d\n" % i for i in range(3000)) + OOM
    writer = threading.Thread(target=lambda: fifo.write_bytes(data))
    writer.start()
    used: list[int] = []
    real = logs.ThreadPoolExecutor

    def spy(n, **kw):
        used.append(n)
        return real(n, **kw)

    monkeypatch.setattr(logs, "ThreadPoolExecutor", spy)
    events, lines = _scan(str(fifo), 3, 4096)
    writer.join()
    assert used == [3] and lines == 3001 and events[0][:2] == ("torch_oom", 3001)
