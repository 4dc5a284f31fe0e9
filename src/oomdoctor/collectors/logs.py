"""Read log files (or standard input) as blocks of whole lines, in constant memory.

Binary, any encoding: the parser decodes candidate lines as UTF-8 with replacement. A line longer
than `MAX_LINE` keeps its first 64 KiB; the rest of it is skipped without being held in memory.
Missing, unreadable or directory inputs raise InputError naming the path (exit 2, one line).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import BinaryIO

from oomdoctor.errors import InputError

MAX_LINE = 64 * 1024
BLOCK = 8 << 20


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


def iter_blocks(path: str, block_size: int = BLOCK) -> Iterator[tuple[bytes, int, int]]:
    """(buffer, start, end) spans of whole lines from `path` ('-' = stdin), in order.

    Spans point into the reader's own buffer, so a 1 GB log is not copied block by block; lines
    longer than MAX_LINE keep their first MAX_LINE bytes.
    """
    check_readable(path)
    try:
        if path == "-":
            yield from _spans(sys.stdin.buffer, block_size)
            return
        with open(path, "rb") as f:
            yield from _spans(f, block_size)
    except OSError as exc:
        raise InputError(f"{path}: {exc.strerror or exc}") from exc


def _spans(f: BinaryIO, block_size: int) -> Iterator[tuple[bytes, int, int]]:
    """One reused buffer (no fresh 8 MiB allocation, and its page faults, per read); a span is only
    valid until the consumer asks for the next one, which is how the scanner uses it."""
    carry = b""  # the unfinished last line of the previous chunk
    skipping = False  # inside the tail of an over-long line
    buf = bytearray(block_size)
    view = memoryview(buf)
    while True:
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
            yield chunk, pos, last + 1
            pos = last + 1
        carry = chunk[pos:]
        if len(carry) > MAX_LINE:
            yield carry[:MAX_LINE] + b"\n", 0, MAX_LINE + 1
            carry, skipping = b"", True
    if carry:
        yield carry, 0, len(carry)
