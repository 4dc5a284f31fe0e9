"""Read log files (or standard input) as blocks of whole lines, in constant memory.

Binary, any encoding: the parser decodes candidate lines as UTF-8 with replacement. A line longer
than `MAX_LINE` is handed on as its first `HEAD` and its last `TAIL` bytes joined by a carriage return; the
middle is skipped without being held in memory. Why the tail: a progress bar redrawn with `\r` for an epoch is
one line of megabytes, and what was printed on it last (an error) is at its end.
Missing, unreadable or directory inputs raise InputError naming the path (exit 2, one line).

With `prepare`, the C-heavy per-block work (a pure function, e.g. parsers.oom_prefilter.index_block)
runs in a small thread pool on the next blocks while the consumer handles this one: reading and
the literal pass release the GIL (bench/explain_stream_profile.py: 1 thread 0.60 s, 4 threads
0.27 s for a 1 GB log on the 16-CPU host).
A regular file is cut into fixed windows that the threads read themselves (`pread`), each trimmed
to the whole lines that start in it (`line_span`), so reading runs in parallel too and the consumer
thread only scans; pipes and stdin go through one reader and a ring of buffers. Memory stays
constant: at most `depth` blocks in flight, their buffers reused once the consumer is done.
"""

from __future__ import annotations

import os
import queue
import stat
import sys
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, BinaryIO

from oomdoctor.errors import InputError

MAX_LINE = 64 * 1024
HEAD = MAX_LINE // 2  # of a longer line: its first HEAD bytes, b"\r", its last TAIL bytes (MAX_LINE in all)
TAIL = MAX_LINE - HEAD - 1
BLOCK = 8 << 20
MAX_WORKERS = 8  # the scan stops scaling at 4-8 threads (16-CPU host); more only adds buffers (8 MiB each)


def check_readable(path: str) -> None:
    """Fail early, before any output, for inputs that cannot be read."""
    if path == "-":
        return
    if not os.path.exists(path):
        raise InputError(f"{path}: no such file")
    if os.path.isdir(path):
        raise InputError(f"{path}: is a directory, not a log file")
    if not os.access(path, os.R_OK):
        raise InputError(f"{path}: permission denied")


def log_size(path: str) -> int:
    """Bytes of a regular file, 0 for standard input, pipes or anything stat cannot size."""
    if path == "-":
        return 0
    try:
        st = os.stat(path)
    except OSError:
        return 0
    return st.st_size if stat.S_ISREG(st.st_mode) else 0


# a rotated log (`train.log.1.gz`) was read as binary and answered "No OOM-like event found" (a walkthrough):
# compressed logs are read through the standard library's decompressors, up to MAX_DECOMPRESSED
_COMPRESSED = ((b"\x1f\x8b", "gzip"), (b"BZh", "bz2"), (b"\xfd7zXZ\x00", "lzma"))
MAX_DECOMPRESSED = 16 << 30


def _head(path: str, n: int) -> bytes | None:
    """The first n bytes of a regular file; None for stdin and pipes (opening one would wait for a writer, and
    reading would eat what the log's reader needs)."""
    if path == "-" or log_size(path) == 0:
        return None
    try:
        with open(path, "rb") as f:
            return f.read(n)
    except OSError:
        return None


def compression(path: str) -> str | None:
    """The standard-library module that decompresses this file (by its first bytes), or None."""
    head = _head(path, 6)
    return None if head is None else next((mod for magic, mod in _COMPRESSED if head.startswith(magic)), None)


class _Prefixed:
    """`inner` with `head`, already read from it, put back in front."""

    def __init__(self, inner: Any, head: bytes) -> None:
        self._inner, self._head = inner, head

    def read(self, n: int) -> bytes:
        if self._head:
            data, self._head = self._head[:n], self._head[n:]
            return data
        return self._inner.read(n)

    def close(self) -> None:
        self._inner.close()


class _Decompressed:
    """A decompressing reader that stops with one line past MAX_DECOMPRESSED (a bomb) or at a corrupt stream."""

    def __init__(self, path: str, module: str) -> None:
        import importlib

        self._path, self._left = path, MAX_DECOMPRESSED
        self._f = importlib.import_module(module).open(path, "rb")

    def read(self, n: int) -> bytes:
        try:
            data = self._f.read(min(n, self._left + 1))
        except (OSError, EOFError, ValueError) as exc:  # gzip.BadGzipFile, lzma.LZMAError are OSError / ValueError
            raise InputError(f"{self._path}: cannot decompress it ({exc})") from None
        self._left -= len(data)
        if self._left < 0:
            raise InputError(f"{self._path}: more than {MAX_DECOMPRESSED >> 30} GiB once decompressed; "
                             "decompress the part to read and give that")
        return data

    def close(self) -> None:
        self._f.close()


# Windows PowerShell's `>` and Out-File write UTF-16LE with a byte-order mark; a log read as bytes was all
# NUL-separated letters and answered "No OOM-like event found" (session 27 walkthrough). Such a log is decoded as it
# is read and handed on as UTF-8; so is UTF-8's own byte-order mark dropped (it is not text: "\ufeffTraceback").
_BOMS = ((b"\xef\xbb\xbf", "utf-8-sig"), (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"))


def text_encoding(head: bytes) -> str | None:
    """The encoding to decode a log from, by its first bytes: a byte-order mark, else UTF-16 without one (ASCII
    letters each followed, or preceded, by a NUL byte); None for UTF-8 and anything else (read as bytes)."""
    for bom, codec in _BOMS:
        if head.startswith(bom):
            return codec
    sample = head[:64] if len(head) >= 64 else head[: len(head) & ~1]
    if len(sample) < 8:
        return None
    even, odd = sample[0::2], sample[1::2]
    if not odd.strip(b"\0") and 0 not in even:
        return "utf-16-le-nobom"
    if not even.strip(b"\0") and 0 not in odd:
        return "utf-16-be-nobom"
    return None


class _Transcoded:
    """A reader of `inner` (raw bytes of `codec`) that hands on UTF-8, decoded incrementally (bounded memory);
    bytes that do not decode become U+FFFD, as the parser reads any other bad byte."""

    def __init__(self, inner: Any, codec: str, head: bytes = b"") -> None:
        import codecs

        name = codec.removesuffix("-nobom")
        self._inner, self._pending = inner, head
        self._decoder = codecs.getincrementaldecoder(name)(errors="replace")
        self._skip_bom = not codec.endswith("-nobom")  # the mark is not text
        self._out = b""
        self._done = False

    def read(self, n: int) -> bytes:
        while len(self._out) < n and not self._done:
            raw = self._pending + self._inner.read(max(n, 1 << 16))
            self._pending = b""
            if self._skip_bom:
                raw, self._skip_bom = raw[2:], False
            if not raw:
                self._done = True
                self._out += self._decoder.decode(b"", final=True).encode("utf-8")
                break
            self._out += self._decoder.decode(raw).encode("utf-8", errors="replace")
        data, self._out = self._out[:n], self._out[n:]
        return data

    def close(self) -> None:
        close = getattr(self._inner, "close", None)
        if close is not None:
            close()


def encoding(path: str) -> str | None:
    """text_encoding of a regular, uncompressed file (None for stdin and pipes: their first bytes cannot be
    looked at twice; a compressed log is looked at once decompressed, in _blocks_at)."""
    head = _head(path, 64)
    return None if head is None else text_encoding(head)


def one_stream(path: str) -> bool:
    """Whether the log must be read as one stream, not in windows at offsets: compressed or transcoded."""
    return compression(path) is not None or encoding(path) is not None


def iter_blocks(path: str, block_size: int = BLOCK, buffers: int = 1) -> Iterator[tuple[bytes, int, int]]:
    """(buffer, start, end) spans of whole lines from `path` ('-' = stdin), in order.

    Spans point into the reader's own buffers (a ring of `buffers`, see _spans), so a 1 GB log is
    not copied block by block; a line longer than MAX_LINE may come as its head and tail (see the module).
    """
    blocks = _blocks_at(path, block_size, buffers)
    try:
        for buf, start, end, _, _ in blocks:
            yield buf, start, end
    finally:
        blocks.close()  # the file closes when the consumer stops early


def _blocks_at(path: str, block_size: int = BLOCK, buffers: int = 1) -> Iterator[tuple[bytes, int, int, int, int]]:
    """As iter_blocks, each span with where it starts in the log and how many of the log's bytes it stands for
    (see _spans_at)."""
    check_readable(path)
    try:
        if path == "-":
            f = sys.stdin.buffer
            codec = text_encoding(f.peek(64)[:64]) if hasattr(f, "peek") else None  # one read at most, not consumed
            if codec == "utf-8-sig":
                f.read(3)
            yield from _spans_at(_Transcoded(f, codec) if codec and codec != "utf-8-sig" else f, block_size, buffers)
            return
        module = compression(path)
        if module is not None:
            d: Any = _Decompressed(path, module)
            head = d.read(64)
            codec = text_encoding(head)
            if codec == "utf-8-sig":
                d = _Prefixed(d, head[3:])
            else:
                d = _Transcoded(d, codec, head) if codec else _Prefixed(d, head)
            try:
                yield from _spans_at(d, block_size, buffers)
            finally:
                d.close()
            return
        codec = encoding(path)
        if codec == "utf-8-sig":  # UTF-8 after its mark: read as it is, past the mark
            with open(path, "rb") as f:
                f.read(3)
                yield from _spans_at(f, block_size, buffers)
            return
        if codec is not None:
            t = _Transcoded(open(path, "rb"), codec)
            try:
                yield from _spans_at(t, block_size, buffers)  # type: ignore[arg-type]
            finally:
                t.close()
            return
        with open(path, "rb") as f:
            yield from _spans_at(f, block_size, buffers)
    except OSError as exc:
        raise InputError(f"{path}: {exc.strerror or exc}") from exc


Prepare = Callable[[bytes, int, int, int], Any]


def usable_cpus() -> int:
    """CPUs this process may run on (taskset, cgroup cpusets), not the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # macOS, Windows
        return os.cpu_count() or 1


ALIGN = 64


def aligned_buffer(size: int) -> tuple[bytearray, int]:
    """A bytearray of at least `size` bytes from offset `base`, where `base` is on a 64-byte boundary.

    Why: copying from the page cache into a destination that is not cache-line aligned is 4-6x
    slower on the machines measured (0.43-0.59 s/GB against 0.09-0.12 s/GB on the CI box, every
    read of a 1 GB log), and a bytearray's data starts 16 bytes after a page boundary (malloc's
    header). grep aligns its buffer too. Anonymous memory maps (page-aligned, no zero fill) were
    measured as well: 0.65 s against 0.54 s for explain on a 1 GB log, in the same run."""
    buf = bytearray(size + ALIGN)
    try:
        import ctypes

        addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    except Exception:  # noqa: BLE001 - no ctypes (some embedded builds): unaligned, only slower
        return buf, 0
    return buf, -addr % ALIGN


def iter_prepared(path: str, prepare: Prepare, *, workers: int | None = None, block_size: int = BLOCK,
                  ) -> Iterator[tuple[bytes, int, int, Any]]:
    """Like iter_blocks, plus `prepare(buf, start, end, offset)` for each span, computed ahead in
    `workers` threads; `offset` is where the span starts in the log (past the middle of a line longer than
    MAX_LINE, more than the sum of the lengths of the earlier spans).

    A span (and its buffer) stays valid until the consumer asks for the next one."""
    spans = iter_prepared_at(path, prepare, workers=workers, block_size=block_size)
    try:
        for buf, start, end, prepared, _, _ in spans:
            yield buf, start, end, prepared
    finally:
        spans.close()


def iter_prepared_at(path: str, prepare: Prepare, *, workers: int | None = None, block_size: int = BLOCK,
                     ) -> Iterator[tuple[bytes, int, int, Any, int, int]]:
    """As iter_prepared, each span with its `offset` in the log and the `length` of the log it stands for: more
    than end - start when its last line is over MAX_LINE and handed on as its head and tail. Which lines are
    shortened depends on where reads fall (one reader's 8 MiB reads, the threads' windows); offsets and lengths
    do not, so a consumer that counts in them answers the same for every thread count."""
    workers = workers if workers is not None else max(1, min(MAX_WORKERS, usable_cpus()))
    size = 0 if one_stream(path) else log_size(path)  # a compressed or transcoded log is one stream: no windows
    if workers > 1 and 0 < size <= block_size:  # one block: threads would only cost start-up
        workers = 1
    if workers > 1 and size > 0 and hasattr(os, "preadv"):
        yield from _iter_windows(path, size, prepare, workers, block_size)
        return
    if workers <= 1:
        blocks = _blocks_at(path, block_size)
        try:
            for buf, start, end, offset, length in blocks:
                yield buf, start, end, prepare(buf, start, end, offset), offset, length
        finally:
            blocks.close()  # the file closes now when the consumer stops early, not when collected
        return
    depth = workers + 1  # blocks being prepared while the consumer works on one
    check_readable(path)
    with ThreadPoolExecutor(workers, thread_name_prefix="oomdoctor-log") as pool:
        pending: deque = deque()
        # depth + 2 buffers: `depth` in flight, one with the consumer, one being read. Read errors
        # become InputError in iter_blocks; an error of `prepare` (fut.result()) is raised as it
        # is, as on the one-thread path, even an OSError.
        blocks = _blocks_at(path, block_size, buffers=depth + 2)
        try:
            for buf, start, end, offset, length in blocks:
                pending.append((buf, start, end, pool.submit(prepare, buf, start, end, offset), offset, length))
                if len(pending) > depth:
                    b, s, e, fut, o, n = pending.popleft()
                    yield b, s, e, fut.result(), o, n
            while pending:
                b, s, e, fut, o, n = pending.popleft()
                yield b, s, e, fut.result(), o, n
        finally:
            blocks.close()  # closes the file (not stdin)
            for item in pending:  # the consumer stopped early: drop what is queued
                item[3].cancel()


EXT = MAX_LINE + 1  # a window reaches this far past its block: the rest of the block's last line


def line_span(buf: Any, base: int, w0: int, wlen: int, a: int, b: int, size: int) -> tuple[int, int] | None:
    """(start, end) in `buf` of the whole lines that start in the log's bytes [a, b), or None.

    `buf[base:base + wlen]` holds the log from byte `w0` (<= a - 1 when a > 0) to at least
    min(size, b + EXT) unless the file shrank. Every line belongs to the block it starts in, so
    adjacent blocks agree without talking to each other. A last line that goes on past the window
    ends the span unfinished: the scanner keeps its first MAX_LINE bytes and the blocks inside it own
    no line start."""
    at = base - w0  # buf index of log byte x: x + at
    hi = base + wlen
    if a == 0:
        s = base
    else:
        p = buf.find(b"\n", a - 1 + at, min(b - 1 + at, hi))
        if p < 0:
            return None
        s = p + 1
    e = hi
    if b < size:
        q = buf.find(b"\n", b - 1 + at, hi)
        e = q + 1 if q >= 0 else hi
    return (s, e) if e > s else None


def _iter_windows(path: str, size: int, prepare: Prepare, workers: int, block_size: int,
                  ) -> Iterator[tuple[bytes, int, int, Any]]:
    """Regular files: each thread reads its own window, so reading runs in parallel too."""
    check_readable(path)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise InputError(f"{path}: {exc.strerror or exc}") from exc
    free: queue.SimpleQueue = queue.SimpleQueue()  # buffers the consumer is done with

    def window(k: int):
        a = k * block_size
        b = min(size, a + block_size)
        w0 = max(0, a - 1)  # one byte before the block: is its first byte a line start?
        w1 = min(size, b + EXT)
        try:
            buf, base = item = free.get_nowait()
        except queue.Empty:
            buf, base = item = aligned_buffer(block_size + 1 + EXT)
        release = partial(free.put, item)
        try:
            wlen = _pread(fd, buf, base, w0, w1)
        except OSError as exc:
            release()
            raise _ReadError(exc.strerror or str(exc)) from exc
        span = line_span(buf, base, w0, wlen, a, b, size)
        if span is None:
            release()
            return None
        s, e = span
        offset, length = w0 + s - base, e - s
        if e == base + wlen and w0 + wlen < size:  # the span's last line goes on past the window
            try:
                e, stop = _head_and_tail(fd, buf, s, e, w0 + wlen)
            except OSError as exc:
                release()
                raise _ReadError(exc.strerror or str(exc)) from exc
            length = stop - offset
        try:
            return buf, s, e, prepare(buf, s, e, offset), release, offset, length
        except BaseException:
            release()
            raise

    blocks = (size + block_size - 1) // block_size
    depth = workers + 1
    pending: deque = deque()
    try:
        with ThreadPoolExecutor(workers, thread_name_prefix="oomdoctor-log") as pool:
            k = 0
            try:
                while k < blocks or pending:
                    while k < blocks and len(pending) <= depth:
                        pending.append(pool.submit(window, k))
                        k += 1
                    item = _read_result(pending.popleft(), path)
                    if item is None:
                        continue
                    buf, s, e, prepared, release, offset, length = item
                    try:
                        yield buf, s, e, prepared, offset, length
                    finally:
                        release()
            finally:
                for fut in pending:  # the consumer stopped early or failed: drop what is queued
                    if not fut.cancel():
                        try:
                            item = fut.result()
                        except BaseException:  # noqa: BLE001 - already failing or stopping
                            item = None
                        if item is not None:
                            item[4]()
    finally:
        os.close(fd)


def _head_and_tail(fd: int, buf: bytearray, s: int, e: int, offset: int) -> tuple[int, int]:
    """The span's last line, which goes on past the window at log byte `offset`, becomes its first HEAD bytes,
    b"\r" and its last TAIL bytes (read on from `offset` to its end, in bounded chunks), and a newline if it had
    one; returns the span's new end, and where the line ends in the log (past its newline). The blocks inside the
    line own no line start, so nobody else reads it."""
    nl = buf.rfind(b"\n", s, e)
    ls = nl + 1 if nl >= 0 else s
    if e - ls < MAX_LINE + 1:  # the window always holds more of it than this (EXT); never cut a short line
        return e, offset
    tail = bytes(buf[e - TAIL:e])
    ended = False
    while True:
        chunk = os.pread(fd, 1 << 20, offset)
        if not chunk:
            break
        i = chunk.find(b"\n")
        if i >= 0:
            tail, ended = (tail + chunk[max(0, i - TAIL):i])[-TAIL:], True
            offset += i + 1
            break
        tail = (tail + chunk[-TAIL:])[-TAIL:]
        offset += len(chunk)
    at = ls + HEAD
    buf[at:at + 1 + len(tail) + ended] = b"\r" + tail + (b"\n" if ended else b"")
    return at + 1 + len(tail) + ended, offset


def _pread(fd: int, buf: bytearray, base: int, w0: int, w1: int) -> int:
    """Bytes of the log from w0 to w1 into buf[base:]; fewer if the file shrank while it was read."""
    wlen = 0
    with memoryview(buf) as view:
        while w0 + wlen < w1:
            got = os.preadv(fd, [view[base + wlen:base + w1 - w0]], w0 + wlen)
            if not got:
                break
            wlen += got
    return wlen


def _read_result(fut: Any, path: str) -> Any:
    """A window's result; an OSError of the read itself names the file (InputError, exit 2)."""
    try:
        return fut.result()
    except _ReadError as exc:
        raise InputError(f"{path}: {exc.args[0]}") from None


class _ReadError(Exception):
    pass


def _spans(f: BinaryIO, block_size: int, buffers: int = 1) -> Iterator[tuple[bytes, int, int]]:
    """(buffer, start, end) spans of whole lines read from `f` (see _spans_at)."""
    for buf, start, end, _, _ in _spans_at(f, block_size, buffers):
        yield buf, start, end


def _spans_at(f: BinaryIO, block_size: int, buffers: int = 1) -> Iterator[tuple[bytes, int, int, int, int]]:
    """(buffer, start, end, offset, length): spans of whole lines, where each starts in the stream and how many of
    its bytes it stands for (an over-long line, handed on as its head and tail, stands for all of its bytes).

    Reused buffers (no fresh 8 MiB allocation, and its page faults, per read), taken in turn; a
    span is valid until `buffers - 1` more spans have been taken from the ring after it, which is how
    the scanner (one buffer) and iter_prepared (a ring) use them. A buffer moves on only when a span
    of it was handed out: reads inside one very long line (copied into `carry`) reuse the same
    buffer, or they would overwrite spans still waiting in iter_prepared's queue."""
    carry = b""  # the unfinished last line of the previous chunk
    carry_at = 0  # where that line starts in the stream
    read_at = 0  # where the next read starts in the stream
    skipping = False  # inside the middle of an over-long line
    head = tail = b""  # of the over-long line being skipped
    ring = [aligned_buffer(block_size) for _ in range(buffers)]
    turn = 0
    while True:
        buf, base = ring[turn]
        with memoryview(buf) as whole, whole[base:base + block_size] as view:
            got = f.readinto(view) if hasattr(f, "readinto") else None
            if got is None:
                data = f.read(block_size)
                got = len(data)
                view[:got] = data
        if not got:
            break
        at = read_at - base  # buf[p] is the stream's byte p + at
        read_at += got
        pos, end = base, base + got
        if skipping:
            nl = buf.find(b"\n", pos, end)
            if nl < 0:
                tail = (tail + bytes(buf[max(pos, end - TAIL):end]))[-TAIL:]
                continue
            tail = (tail + bytes(buf[max(pos, nl - TAIL):nl]))[-TAIL:]
            line = head + b"\r" + tail + b"\n"
            yield line, 0, len(line), carry_at, nl + 1 + at - carry_at
            pos, skipping, head, tail = nl + 1, False, b"", b""
        first = buf.find(b"\n", pos, end)
        if first < 0:  # no newline: the line goes on
            if not carry:
                carry_at = pos + at
            carry += buf[pos:end]
            if len(carry) > MAX_LINE:
                head, tail, carry, skipping = carry[:HEAD], carry[-TAIL:], b"", True
            continue
        if carry:  # finish the carried line: a small copy (the scanner reads a longer one as head and tail)
            line = carry + buf[pos:first + 1]
            yield line, 0, len(line), carry_at, len(line)
            carry = b""
            pos = first + 1
        last = buf.rfind(b"\n", pos, end)
        if last >= pos:
            turn = (turn + 1) % buffers  # a span of this ring buffer is out: the next read takes the next one
            yield buf, pos, last + 1, pos + at, last + 1 - pos
            pos = last + 1
        carry, carry_at = bytes(buf[pos:end]), pos + at
        if len(carry) > MAX_LINE:
            head, tail, carry, skipping = carry[:HEAD], carry[-TAIL:], b"", True
    if skipping:
        line = head + b"\r" + tail
        yield line, 0, len(line), carry_at, read_at - carry_at
    elif carry:
        yield carry, 0, len(carry), carry_at, len(carry)
