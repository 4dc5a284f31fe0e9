"""GIVEN the threaded reader (ring of buffers, index_block ahead in threads) WHEN logs have awkward
shapes (block edges, carried heads, over-long lines, lines longer than the ring, CRLF, no final
newline, stdin short reads, named pipes, errors in a worker, an early stop) THEN every thread count
gives what one thread and a plain split of the file give, and no span is overwritten before the
scanner has read it."""

from __future__ import annotations

import io
import os
import sys
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oomdoctor.explain import prefilter as PF
from oomdoctor.explain.events import LogScanner
from oomdoctor.explain.prefilter import index_block
from oomdoctor.explain.read import HEAD, MAX_LINE, TAIL, iter_prepared, iter_prepared_at

INSTALLED = [e for e in PF.ENGINES if PF.engine_installed(e)]

OOM = b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _collect(path: str, workers: int, block: int):
    """(absolute line number, candidate line text) per candidate; total lines; spans' offsets (given, and the sums
    of the spans' lengths before them); each span's offset and first bytes."""
    cands, line, offs, offset, starts = [], 0, [], 0, []
    for buf, s, e, (idx, off) in iter_prepared(path, lambda b, s, e, o: (index_block(b, s, e, o), o),
                                                   workers=workers, block_size=block):
        offs.append((off, offset))
        starts.append((off, bytes(buf[s:s + min(e - s, HEAD)])))
        for ls, before in idx.lines:
            le = buf.find(b"\n", ls, e)
            cands.append((line + before + 1, _as_read(bytes(buf[ls:e if le < 0 else le]))))
        line += idx.newlines + (0 if buf[e - 1:e] == b"\n" else 1)
        offset += e - s
    return cands, line, offs, starts


def _as_read(line: bytes) -> bytes:
    """What the scanner reads of a line: a line over MAX_LINE as its head and tail (the reader hands one that goes on
    past its window already so; one inside a window is cut by the scanner)."""
    return line if len(line) <= MAX_LINE else line[:HEAD] + b"\r" + line[-TAIL:]


def _scan(path: str, workers: int, block: int):
    """As explain reads: places in the log are its offsets (iter_prepared_at), whichever lines a reader shortened."""
    sc = LogScanner()
    sc.start_source("x")
    for buf, start, end, index, offset, length in iter_prepared_at(path, index_block, workers=workers,
                                                                   block_size=block):
        sc.feed(buf, start, end, index, offset, length)
    scan = sc.finish()
    if os.path.isfile(path):  # not a named pipe: reopening one would wait for a writer
        assert scan.bytes == os.path.getsize(path)
    return ([(e.kind, e.line, e.text, e.count) for e in scan.events], scan.lines, scan.bytes, scan.env,
            scan.readings)


def _ref_lines(data: bytes) -> list[bytes]:
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return lines


_LINE = st.one_of(
    st.just(OOM), st.just(OOM.replace(b"\n", b"\r\n")), st.just(b"Killed\n"), st.just(b"\n"), st.just(b"\r\n"),
    st.just(b"Driver Version: 535.104.05  NVIDIA A100-SXM4-80GB\n"), st.just(b"Exit Code:    137\n"),
    st.binary(min_size=0, max_size=64).map(lambda b: b.replace(b"\n", b"") + b"\n"),
    st.integers(1, 3 * MAX_LINE).map(lambda n: b"y" * n + b"\n"),
    st.integers(1, 3 * MAX_LINE).map(lambda n: b"Killed " + b"z" * n + b"\n"),
)


@SETTINGS
@given(lines=st.lists(_LINE, min_size=0, max_size=40), tail=st.binary(max_size=80).map(lambda b: b.replace(b"\n", b"")),
       block=st.sampled_from([256, 512, 1000, 4096]), workers=st.integers(2, 5))
def test_candidates_line_numbers_and_offsets_match_a_plain_split(tmp_path, lines, tail, block, workers):
    data = b"".join(lines) + tail
    p = tmp_path / "f.log"
    p.write_bytes(data)
    one = _collect(str(p), 1, block)
    many = _collect(str(p), workers, block)
    assert many[:2] == one[:2]  # spans differ (windows of a regular file vs one reader), lines do not
    cands, nlines, offs, _ = one
    ref = _ref_lines(data)
    assert nlines == len(ref)
    for off, head in one[3] + many[3]:  # an offset is where the span stands in the log, past a shortened line too
        assert data[off:off + len(head)] == head
    if max(map(len, ref), default=0) < MAX_LINE:  # no skipped tail: offsets are the spans' sums
        assert all(a == b for a, b in offs + many[2])
    else:
        assert all(a >= b for a, b in offs + many[2])
    for no, text in cands:
        assert _as_read(ref[no - 1]) == text


@SETTINGS
@given(lines=st.lists(_LINE, min_size=1, max_size=40), tail=st.sampled_from([b"", b"Killed", OOM[:-1]]),
       block=st.sampled_from([256, 1000, 4096]), workers=st.integers(2, 5))
def test_scan_is_the_same_for_every_thread_count(tmp_path, lines, tail, block, workers):
    p = tmp_path / "f.log"
    p.write_bytes(b"".join(lines) + tail)
    assert _scan(str(p), workers, block) == _scan(str(p), 1, block)


def test_newline_counters_agree_in_threads(tmp_path, monkeypatch):
    """stringzilla's SIMD count and the bytes.count fallback give the same lines, with any thread count."""
    data = b"".join((b"step %d ok\r\n" % i) if i % 97 else OOM for i in range(20000))
    p = tmp_path / "f.log"
    p.write_bytes(data)
    ref = _collect(str(p), 1, 4096)[:2]  # candidates and line count (spans differ between readers)
    monkeypatch.setattr(PF, "_sz_count", None)
    assert _collect(str(p), 1, 4096)[:2] == ref
    for w in (2, 3, 5):
        assert _collect(str(p), w, 1000)[:2] == ref
    monkeypatch.undo()
    for w in (2, 3, 5):
        assert _collect(str(p), w, 4096)[:2] == ref
        assert _collect(str(p), w, 1000)[:2] == ref


def _with_engine(monkeypatch, engine: str) -> None:
    """Every later scan uses `engine` for the pre-filter (head and tail literal sets alike)."""
    from oomdoctor.explain import patterns as P

    monkeypatch.setattr(PF, "_PREFILTERS", {True: PF._Prefilter(engine, P.PREFILTER_LITERALS),
                                            False: PF._Prefilter(engine, P.EVENT_LITERALS)})


def test_engines_agree(tmp_path, monkeypatch):
    """The C engine may report more hits on a line than `find`, never other lines."""
    data = b"".join([OOM, b"Exit Code:\n137\n", b"status 137\n", b"code=137x\n", b"Driver Version: 535.1\n",
                     b"Killed\n", b"x\r\n", b"batch 137 done\n", b"exited with status:137\n", b"OOM\n"] * 50)
    p = tmp_path / "f.log"
    p.write_bytes(data)
    found = {}
    for engine in INSTALLED:
        _with_engine(monkeypatch, engine)
        found[engine] = _collect(str(p), 1, 512)
    assert all(v == found["find"] for v in found.values())
    assert any(b"status:137" in text for _, text in found["find"][0])
    assert any(text == b"OOM" for _, text in found["find"][0])  # the 3-byte side literal
    assert not any(b"batch 137" in text for _, text in found["find"][0])


class _ShortReads(io.RawIOBase):
    def __init__(self, data: bytes, sizes):
        self._data, self._pos, self._sizes, self._i = data, 0, sizes, 0

    def readable(self):
        return True

    def readinto(self, b):
        n = min(len(b), self._sizes[self._i % len(self._sizes)], len(self._data) - self._pos)
        self._i += 1
        b[:n] = self._data[self._pos:self._pos + n]
        self._pos += n
        return n


@SETTINGS
@given(lines=st.lists(_LINE, min_size=1, max_size=30), sizes=st.lists(st.integers(1, 5000), min_size=1, max_size=8),
       block=st.sampled_from([256, 1000, 4096]), workers=st.integers(2, 5))
def test_stdin_short_reads(tmp_path, monkeypatch, lines, sizes, block, workers):
    data = b"".join(lines)
    p = tmp_path / "f.log"
    p.write_bytes(data)
    ref = _collect(str(p), 1, block)

    class _In:
        pass

    def run(w):
        stdin = _In()
        stdin.buffer = _ShortReads(data, sizes)
        monkeypatch.setattr(sys, "stdin", stdin)
        return _collect("-", w, block)

    got1, got = run(1), run(workers)
    assert got == got1
    assert got[:2] == ref[:2]  # offsets differ: a carried head is cut at MAX_LINE only when its carry is over it


class Boom(ValueError):
    pass


@pytest.mark.parametrize("workers", [1, 2, 4])
@pytest.mark.parametrize("at", [0, 1, 5])
def test_an_error_in_prepare_surfaces_unchanged(tmp_path, workers, at):
    p = tmp_path / "f.log"
    p.write_bytes(b"".join(b"line %d\n" % i for i in range(2000)))
    offsets = [o for *_, o in iter_prepared(str(p), lambda b, s, e, o: o, workers=workers, block_size=512)]

    def prep(b, s, e, o):  # the at-th span fails, whichever thread gets to it first
        if o == offsets[at]:
            raise Boom("no")
        return o

    seen = []
    done = threading.Event()

    def go():
        with pytest.raises(Boom):
            for *_, o in iter_prepared(str(p), prep, workers=workers, block_size=512):
                seen.append(o)
        done.set()

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(20)
    assert done.is_set()
    assert len(seen) == at


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_early_stop_closes_the_file_and_cancels(tmp_path, monkeypatch, workers):
    """Whichever reader (one thread's file object, or the windows' descriptor), nothing stays open."""
    import os

    p = tmp_path / "f.log"
    p.write_bytes(b"".join(b"line %d\n" % i for i in range(20000)))
    opened, fds = [], []
    real_open, real_os_open = open, os.open

    def spy(*a, **k):
        f = real_open(*a, **k)
        opened.append(f)
        return f

    def os_spy(*a, **k):
        fd = real_os_open(*a, **k)
        if str(a[0]) == str(p):  # another thread may open files meanwhile, and reuse a closed fd
            fds.append(fd)
        return fd

    monkeypatch.setattr("builtins.open", spy)
    monkeypatch.setattr(os, "open", os_spy)
    started = []
    baseline = threading.active_count()
    gen = iter_prepared(str(p), lambda b, s, e, o: started.append(o) or o, workers=workers, block_size=512)
    next(gen)
    next(gen)
    gen.close()
    opened = [f for f in opened if getattr(f, "name", None) == str(p)]  # another thread may open files meanwhile
    assert opened or fds
    assert all(f.closed for f in opened)
    for fd in fds:
        with pytest.raises(OSError):
            os.fstat(fd)  # closed
    assert len(started) <= 2 + workers + 2
    assert threading.active_count() == baseline


_ENGINE_LINE = st.one_of(
    _LINE, st.sampled_from([b"Exit Code:\n", b"137\n", b"status 137\n", b"STATUS:\t137 A100\n", b"code=1370\n",
                            b"exit code 137", b"Status 137 MiB\n", b"x" * 20 + b"code" + b" " * 9 + b"137\n"]),
    st.binary(min_size=0, max_size=30).map(lambda b: b + b"137\n"),
)


@SETTINGS
@given(lines=st.lists(_ENGINE_LINE, min_size=1, max_size=40), block=st.sampled_from([256, 1000, 4096]))
def test_every_engine_gives_the_same_scan(tmp_path, monkeypatch, lines, block):
    """ahocorasick-rs where its wheel exists, `find` elsewhere: the same events, lines and hints."""
    p = tmp_path / "f.log"
    p.write_bytes(b"".join(lines))
    scans = []
    for engine in INSTALLED:
        with monkeypatch.context() as m:
            _with_engine(m, engine)
            scans.append(_scan(str(p), 1, block))
    assert all(s == scans[0] for s in scans)


@pytest.mark.parametrize("workers", [1, 3])
def test_an_oserror_in_prepare_is_not_reported_as_a_read_error(tmp_path, workers):
    p = tmp_path / "f.log"
    p.write_bytes(b"".join(b"line %d\n" % i for i in range(2000)))

    def prep(b, s, e, o):
        raise PermissionError(13, "denied by prepare")

    with pytest.raises(PermissionError):
        for _ in iter_prepared(str(p), prep, workers=workers, block_size=512):
            pass


def test_empty_stdin_with_threads(monkeypatch):
    class _In:
        buffer = io.BytesIO(b"")

    monkeypatch.setattr(sys, "stdin", _In())
    assert list(iter_prepared("-", index_block, workers=3, block_size=256)) == []


# -- lines longer than the buffer ring (a regression: queued spans were overwritten) ------------
@pytest.mark.parametrize("ring", [True, False], ids=["ring", "windows"])
@pytest.mark.parametrize("workers", [2, 3, 5])
def test_a_line_longer_than_the_ring_does_not_overwrite_pending_spans(tmp_path, monkeypatch, workers, ring):
    if ring:  # without preadv (Windows) regular files go through the ring too
        monkeypatch.delattr(os, "preadv")
    head = b"".join(b"step %d ok\n" % i for i in range(300)) + OOM  # several blocks, OOM at the end
    giant = b"x" * (200 * 1024) + b"\n"  # 50 reads of 4 KiB without a newline
    p = tmp_path / "log"
    p.write_bytes(head + giant + OOM + b"done\n")
    assert _scan(str(p), workers, 4096) == _scan(str(p), 1, 4096)
    events, *_ = _scan(str(p), workers, 4096)
    # the same message twice is one event counted twice (the giant line is not part of either message)
    assert [(e[1], e[3]) for e in events if e[0] == "torch_oom"] == [(301, 2)]


_RING_LINE = st.one_of(
    st.just(OOM), st.just(b"Killed\n"), st.just(b"\n"),
    st.binary(min_size=0, max_size=64).map(lambda b: b.replace(b"\n", b"") + b"\n"),
    st.integers(1, 40_000).map(lambda n: b"y" * n + b"\n"),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(_RING_LINE, min_size=1, max_size=60), block=st.sampled_from([512, 1024, 4096]),
       workers=st.integers(2, 5), ring=st.booleans())
def test_threads_and_ring_never_change_the_scan(tmp_path, lines, block, workers, ring):
    p = tmp_path / "fuzz.log"
    p.write_bytes(b"".join(lines))
    with pytest.MonkeyPatch.context() as m:
        if ring:
            m.delattr(os, "preadv")
        assert _scan(str(p), workers, block) == _scan(str(p), 1, block)


def test_a_named_pipe_gets_reader_threads(tmp_path, monkeypatch):
    """A FIFO (e.g. `explain <(zcat big.log.gz)`) has no size: it is not mistaken for a one-block file."""
    import os
    import threading

    import oomdoctor.explain.read as logs

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
    events, lines, *_ = _scan(str(fifo), 3, 4096)
    writer.join()
    assert used == [3] and lines == 3001 and events[0][:2] == ("torch_oom", 3001)


def test_readings_do_not_depend_on_the_reader(tmp_path, monkeypatch):
    """Readings past the first 2 MiB are sampled at offsets of the log, not of the reader's spans:
    one thread, several threads (pread windows) and a pipe's short reads sample the same lines, so
    they give the same series (and the same verdict; a leak was once seen with 2 threads only)."""
    rows = []
    for i in range(330_000):  # ~24 MiB: three 8 MiB windows, a reading every 7 lines
        rows.append(b"step %d gpu memory allocated: %d.%02d GiB\n" % (i, 10 + i // 20_000, i % 100) if i % 7 == 0
                    else b"2026-11-22 03:04:05 INFO rank0 processed batch %d tokens/s 11370 loss=0.123\n" % i)
    data = b"".join(rows) + OOM
    p = tmp_path / "big.log"
    p.write_bytes(data)
    one = _scan(str(p), 1, 8 << 20)
    assert len(data) > 3 * (8 << 20) - (1 << 20)
    steps = [x for v in one[4].values() for x, _ in v]
    head_lines = data[:2 << 20].count(b"\n")
    assert any(x > head_lines + 50_000 for x in steps)  # sampled past the fully read head ...
    assert max(steps) > data[:16 << 20].count(b"\n")  # ... into the third window
    for workers in (2, 4):
        assert _scan(str(p), workers, 8 << 20) == one
    for sizes in ([65536], [1, 4093, 70_000, 3 << 20]):
        class _In:
            buffer = io.BufferedReader(_ShortReads(data, sizes), buffer_size=1 << 16)

        monkeypatch.setattr(sys, "stdin", _In())
        got = _scan("-", 3, 8 << 20)
        assert got[:2] == one[:2] and got[3:] == one[3:]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edges=st.lists(st.tuples(st.integers(-3, 3), st.integers(1, 3 * MAX_LINE)), min_size=1, max_size=6),
       workers=st.integers(2, 4))
def test_windows_wider_than_a_long_line(tmp_path, edges, workers):
    """The production shape: blocks much larger than EXT (a window reaches MAX_LINE + 1 bytes into
    the next block), with long lines starting just before, at and after block edges."""
    block = 3 * (MAX_LINE + 1)
    data = bytearray()
    for k, (shift, length) in enumerate(edges):
        target = (k + 1) * block + shift
        while len(data) < target - 80:
            data += b"step %d ok\n" % len(data)
        data += b"z" * max(0, target - len(data)) + b"\n"
        data += b"q" * length + b"\n" + OOM
    p = tmp_path / "edges.log"
    p.write_bytes(bytes(data))
    one, many = _collect(str(p), 1, block), _collect(str(p), workers, block)
    assert many[:2] == one[:2]
    ref = _ref_lines(bytes(data))
    assert one[1] == len(ref)
    for no, text in many[0]:
        assert _as_read(ref[no - 1]) == text
