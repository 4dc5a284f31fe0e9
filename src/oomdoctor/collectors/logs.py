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


def iter_blocks(path: str, block_size: int = BLOCK) -> Iterator[bytes]:
    """Blocks of whole lines from `path` ('-' = stdin); over-long lines are cut at MAX_LINE."""
    check_readable(path)
    try:
        if path == "-":
            yield from _blocks(sys.stdin.buffer, block_size)
            return
        with open(path, "rb") as f:
            yield from _blocks(f, block_size)
    except OSError as exc:
        raise InputError(f"{path}: {exc.strerror or exc}") from exc


def _blocks(f: BinaryIO, block_size: int) -> Iterator[bytes]:
    carry = b""
    skipping = False  # inside the tail of an over-long line
    while True:
        chunk = f.read(block_size)
        if not chunk:
            break
        if skipping:
            nl = chunk.find(b"\n")
            if nl < 0:
                continue
            chunk, skipping = chunk[nl + 1:], False
        data = carry + chunk if carry else chunk
        cut = data.rfind(b"\n")
        if cut < 0:
            if len(data) > MAX_LINE:
                yield data[:MAX_LINE] + b"\n"
                carry, skipping = b"", True
            else:
                carry = data
            continue
        body, carry = data[:cut + 1], data[cut + 1:]
        if len(carry) > MAX_LINE:
            body += carry[:MAX_LINE] + b"\n"
            carry, skipping = b"", True
        yield body
    if carry:
        yield carry
