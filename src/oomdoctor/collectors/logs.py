"""Read log files (or standard input) as blocks of whole lines, in constant memory.

Binary, any encoding: the parser decodes candidate lines as UTF-8 with replacement. A line longer
than `MAX_LINE` keeps its first 64 KiB; the rest of it is skipped without being held in memory.
Missing, unreadable or directory inputs raise InputError naming the path (exit 2, one line).

With `prepare`, the C-heavy per-block work (a pure function, e.g. parsers.oom_prefilter.index_block)
runs in a small thread pool on the next blocks while the consumer handles this one: reading,
Hyperscan and numpy release the GIL, so two cores explain a 1 GB log in about half the time.
Memory stays constant: a fixed ring of read buffers, at most `depth` blocks in flight.
"""

from __future__ import annotations

import os
import stat
import sys
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, BinaryIO

from oomdoctor.errors import InputError

MAX_LINE = 64 * 1024
BLOCK = 8 << 20
MAX_WORKERS = 8  # Hyperscan scales to ~8 threads on a 1 GB log; more only adds buffers (8 MiB each)


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


def iter_blocks(path: str, block_size: int = BLOCK, buffers: int = 1) -> Iterator[tuple[bytes, int, int]]:
    """(buffer, start, end) spans of whole lines from `path` ('-' = stdin), in order.

    Spans point into the reader's own buffers (a ring of `buffers`, see _spans), so a 1 GB log is
    not copied block by block; lines longer than MAX_LINE keep their first MAX_LINE bytes.
    """
    check_readable(path)
    try:
        if path == "-":
            yield from _spans(sys.stdin.buffer, block_size, buffers)
            return
        with open(path, "rb") as f:
            yield from _spans(f, block_size, buffers)
    except OSError as exc:
        raise InputError(f"{path}: {exc.strerror or exc}") from exc


Prepare = Callable[[bytes, int, int, int], Any]


def usable_cpus() -> int:
    """CPUs this process may run on (taskset, cgroup cpusets), not the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # macOS, Windows
        return os.cpu_count() or 1


def iter_prepared(path: str, prepare: Prepare, *, workers: int | None = None, block_size: int = BLOCK,
                  ) -> Iterator[tuple[bytes, int, int, Any]]:
    """Like iter_blocks, plus `prepare(buf, start, end, offset)` for each span, computed ahead in
    `workers` threads; `offset` is the sum of the lengths of the earlier spans of this log.

    A span (and its buffer) stays valid until the consumer asks for the next one."""
    workers = workers if workers is not None else max(1, min(MAX_WORKERS, usable_cpus()))
    if workers > 1 and 0 < log_size(path) <= block_size:  # one block: threads would only cost start-up
        workers = 1
    if workers <= 1:
        offset = 0
        for buf, start, end in iter_blocks(path, block_size):
            yield buf, start, end, prepare(buf, start, end, offset)
            offset += end - start
        return
    depth = workers + 1  # blocks being prepared while the consumer works on one
    check_readable(path)
    with ThreadPoolExecutor(workers, thread_name_prefix="oomdoctor-log") as pool:
        pending: deque = deque()
        offset = 0
        # depth + 2 buffers: `depth` in flight, one with the consumer, one being read. Read errors
        # become InputError in iter_blocks; an error of `prepare` (fut.result()) is raised as it
        # is, as on the one-thread path, even an OSError.
        blocks = iter_blocks(path, block_size, buffers=depth + 2)
        try:
            for buf, start, end in blocks:
                pending.append((buf, start, end, pool.submit(prepare, buf, start, end, offset)))
                offset += end - start
                if len(pending) > depth:
                    b, s, e, fut = pending.popleft()
                    yield b, s, e, fut.result()
            while pending:
                b, s, e, fut = pending.popleft()
                yield b, s, e, fut.result()
        finally:
            blocks.close()  # closes the file (not stdin)
            for *_, fut in pending:  # the consumer stopped early: drop what is queued
                fut.cancel()


def _spans(f: BinaryIO, block_size: int, buffers: int = 1) -> Iterator[tuple[bytes, int, int]]:
    """Reused buffers (no fresh 8 MiB allocation, and its page faults, per read), taken in turn; a
    span is valid until `buffers - 1` more spans have been taken from the ring after it, which is how
    the scanner (one buffer) and iter_prepared (a ring) use them. A buffer moves on only when a span
    of it was handed out: reads inside one very long line (copied into `carry`) reuse the same
    buffer, or they would overwrite spans still waiting in iter_prepared's queue."""
    carry = b""  # the unfinished last line of the previous chunk
    skipping = False  # inside the tail of an over-long line
    ring = [bytearray(block_size) for _ in range(buffers)]
    turn = 0
    while True:
        buf = ring[turn]
        view = memoryview(buf)
        got = f.readinto(view) if hasattr(f, "readinto") else None
        if got is None:
            data = f.read(block_size)
            got = len(data)
            view[:got] = data
        if not got:
            break
        chunk = buf if got == block_size else buf[:got]
        pos = 0
        if skipping:
            nl = chunk.find(b"\n")
            if nl < 0:
                continue
            pos, skipping = nl + 1, False
        first = chunk.find(b"\n", pos)
        if first < 0:  # no newline: the line goes on
            carry += chunk[pos:]
            if len(carry) > MAX_LINE:
                yield carry[:MAX_LINE] + b"\n", 0, MAX_LINE + 1
                carry, skipping = b"", True
            continue
        if carry:  # finish the carried line: a small copy
            head = (carry + chunk[pos:first + 1]) if len(carry) <= MAX_LINE else carry[:MAX_LINE] + b"\n"
            yield head, 0, len(head)
            carry = b""
            pos = first + 1
        last = chunk.rfind(b"\n", pos)
        if last >= pos:
            if chunk is buf:  # a span of the ring buffer: the next read takes the next buffer
                turn = (turn + 1) % buffers
            yield chunk, pos, last + 1
            pos = last + 1
        carry = chunk[pos:]
        if len(carry) > MAX_LINE:
            yield carry[:MAX_LINE] + b"\n", 0, MAX_LINE + 1
            carry, skipping = b"", True
    if carry:
        yield carry, 0, len(carry)
