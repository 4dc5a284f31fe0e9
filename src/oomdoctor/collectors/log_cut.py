"""The head and the tail of a log too big to keep whole, read in one bounded pass.

A job's log says how it started at its top and why it died at its bottom (the OOM traceback is the
last thing it wrote), so `bundle --log` keeps both and leaves out the middle, cut at line ends. The
file is streamed: at most the kept bytes plus one chunk are in memory, whatever the log's size, and a
pipe (`--log <(kubectl logs pod)`) works as a file does. The lines of the middle are counted as they
pass, so the marker can say how far the tail's line numbers are from the original's.
"""

from __future__ import annotations

import os
import stat
from collections import deque
from dataclasses import dataclass
from typing import Any, BinaryIO

CHUNK = 1 << 20
# Past this much read, a regular file's middle is skipped by seeking (its lines are not counted) and a stream
# (a pipe, /dev/zero) is read no further: its tail is then the end of what was read.
MAX_SCAN_BYTES = 1 << 30


@dataclass(frozen=True)
class LogCut:
    head: bytes
    tail: bytes  # empty when the log was kept whole (then `head` is all of it)
    total_bytes: int | None  # the log's size; None when a stream was read no further than MAX_SCAN_BYTES
    omitted_bytes: int
    omitted_lines: int | None  # None when the middle was skipped unread

    def summary(self) -> str:
        size = f"{self.total_bytes:,} bytes" if self.total_bytes is not None else "over " + f"{MAX_SCAN_BYTES:,} bytes"
        lines = f" ({self.omitted_lines:,} lines)" if self.omitted_lines is not None else ""
        return f"log of {size} cut: {self.omitted_bytes:,} bytes{lines} in its middle left out"

    def marker(self, line: int) -> str:
        """The line that stands for the left-out middle, at line `line` of the kept text."""
        if self.omitted_lines is None:
            shift = "line numbers below it are not the original log's"
        else:
            shift = (f"a line number below it is {self.omitted_lines - 1:,} less than in the original log"
                     if self.omitted_lines != 1 else "line numbers below it are the original log's")
        unread = "" if self.total_bytes is not None else "; the stream was read no further"
        return (f"[oomdoctor bundle: {self.omitted_bytes:,} bytes"
                + (f" ({self.omitted_lines:,} lines)" if self.omitted_lines is not None else "")
                + f" of this log left out here (it kept the first {len(self.head):,} and the last {len(self.tail):,}"
                + f" bytes){unread}; {shift}]")

    def note(self, line: int) -> dict[str, Any]:
        """meta.json's record of the cut (`log_cuts`): the marker's line in the kept text and the offsets."""
        return {"original_bytes": self.total_bytes, "head_bytes": len(self.head), "tail_bytes": len(self.tail),
                "omitted_bytes": self.omitted_bytes, "omitted_lines": self.omitted_lines, "marker_line": line,
                "tail_line_offset": None if self.omitted_lines is None else self.omitted_lines - 1}


def read_head_and_tail(fh: BinaryIO, limit: int, head_limit: int) -> LogCut:
    """At most `limit` bytes of the log open in `fh`: all of it when it fits, else about `head_limit` bytes of its
    head and the rest of `limit` from its tail, each cut at a line end (a part with no line end is cut where it
    must be)."""
    first = fh.read(limit + 1)
    if len(first) <= limit:
        return LogCut(first, b"", len(first), 0, 0)
    head_limit = min(head_limit, limit // 2)  # the tail is what matters most: never less than half
    end = first.rfind(b"\n", 0, head_limit) + 1 or head_limit
    head = first[:end]
    budget = limit - len(head)
    chunks: deque[bytes] = deque([first[end:]])
    del first
    held = len(chunks[0])
    omitted_bytes = omitted_lines = 0
    read = limit + 1
    lines_known = True
    scanned_far = False
    while True:
        if read >= MAX_SCAN_BYTES and not scanned_far:
            scanned_far = True
            size = _regular_size(fh)
            if size is None:
                return _finish(head, chunks, budget, None, omitted_bytes, omitted_lines, lines_known)
            if size - read > budget:  # skip the unread middle: its lines are not counted
                omitted_bytes += held + (size - budget - read)
                lines_known = False
                chunks.clear()
                held = 0
                fh.seek(size - budget)
                read = size - budget
        chunk = fh.read(CHUNK)
        if not chunk:
            break
        read += len(chunk)
        chunks.append(chunk)
        held += len(chunk)
        while chunks and held - len(chunks[0]) >= budget:
            gone = chunks.popleft()
            held -= len(gone)
            omitted_bytes += len(gone)
            omitted_lines += gone.count(b"\n")
    return _finish(head, chunks, budget, read, omitted_bytes, omitted_lines, lines_known)


def _finish(head: bytes, chunks: deque[bytes], budget: int, total: int | None, omitted_bytes: int,
            omitted_lines: int, lines_known: bool) -> LogCut:
    tail = b"".join(chunks)
    excess = len(tail) - budget
    start = 0
    if excess > 0:
        start = tail.find(b"\n", excess - 1) + 1 or excess  # the first whole line that fits
    start = _past_key_end(tail, start)
    omitted_bytes += start
    omitted_lines += tail.count(b"\n", 0, start)
    return LogCut(head, tail[start:], total, omitted_bytes, omitted_lines if lines_known else None)


def _past_key_end(tail: bytes, start: int) -> int:
    """Where a tail that starts inside a private key (its BEGIN line left out) must start: after the key's END
    line. The redactor hides a key from its BEGIN line on, and the lines before its END would show."""
    end = tail.find(b"-----END ", start, start + (1 << 16))
    if end < 0 or b"PRIVATE KEY" not in tail[end:end + 64] or tail.find(b"-----BEGIN ", start, end) >= 0:
        return start
    line_end = tail.find(b"\n", end)
    return len(tail) if line_end < 0 else line_end + 1


def _regular_size(fh: BinaryIO) -> int | None:
    """A regular file's size (it can seek past a middle); None for a stream."""
    try:
        st = os.fstat(fh.fileno())
    except (OSError, ValueError, AttributeError):
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None
