"""A bounded, flushed JSONL writer that never raises into the job.

Lines are buffered in memory (at most `buffer_lines`) and written when the buffer fills, on flush(), or at once
with write(now=True) (step records: a job killed by SIGKILL keeps the steps it made).
Past `max_lines` the writer keeps one record in 2, then 1 in 4, ... so a week-long run stays bounded.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any


class JsonlWriter:
    def __init__(self, path: str, header: dict[str, Any], *, buffer_lines: int = 256, max_lines: int = 500_000):
        self.path = path
        self._buf: list[str] = []
        self._lock = threading.Lock()
        self._buffer_lines = buffer_lines
        self._max_lines = max_lines
        self._written = 0
        self._keep_every = 1
        self._seen = 0
        self._f = open(path, "a", encoding="utf-8")
        self.write(header, force=True)
        self.flush()

    def write(self, record: dict[str, Any], *, force: bool = False, now: bool = False) -> None:
        """`now`: hand the line to the kernel at once (one write(2)), so a SIGKILL of the process cannot lose it."""
        line = json.dumps(record, separators=(",", ":"), default=str)
        with self._lock:
            self._seen += 1
            if not force and self._seen % self._keep_every:
                return
            self._buf.append(line)
            full = len(self._buf) >= self._buffer_lines
        if full or now:
            self.flush()

    def flush(self) -> None:
        with self._lock:
            if not self._buf or self._f is None:
                return
            lines, self._buf = self._buf, []
            self._f.write("\n".join(lines) + "\n")
            self._f.flush()
            self._written += len(lines)
            if self._written >= self._max_lines * self._keep_every.bit_length():
                self._keep_every *= 2
                self._f.write(json.dumps({"kind": "note", "t": time.time(),
                                          "note": f"decimating: keeping 1 record in {self._keep_every}"}) + "\n")

    def rename(self, new_path: str) -> bool:
        """Rename the file in place (Linux keeps the open handle valid)."""
        with self._lock:
            if os.path.exists(new_path):
                return False
            os.rename(self.path, new_path)
            self.path = new_path
            return True

    def close(self) -> None:
        self.flush()
        with self._lock:
            if self._f is not None:
                self._f.close()
                self._f = None
