"""Minimal text edits on YAML, placed with positions from ruamel.yaml's round-trip parser.

Why not re-emit with ruamel: a round-trip dump normalises indentation per document and moves
end-of-line comments to its own column, so a one-line fix would rewrite half a manifest. Here
ruamel only tells us *where* nodes are; new keys and items are inserted as lines in the file's own
indentation style and scalars are replaced in place, so every other byte stays as the user wrote it.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_SCALAR_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\']|\'\')*\'|[^\s,}\]#][^,}\]#]*?(?=\s*(?:#|,|}|]|$))')


class FixUnsupported(Exception):
    """The YAML is shaped in a way the text editor does not handle (e.g. a multi-line flow map)."""


@dataclass
class _Edit:
    line: int
    col: int  # -1: insert whole lines after `line`
    end: int
    text: Any
    seq: int


class Editor:
    def __init__(self, text: str):
        self.lines = text.splitlines(keepends=True)
        self.nl = "\r\n" if self.lines and self.lines[0].endswith("\r\n") else "\n"
        self._edits: list[_Edit] = []
        self._starts: list[int] | None = None

    def locate(self, offset: int) -> tuple[int, int]:
        """(line, column) of a character offset in the text, in this editor's own lines: split as
        `str.splitlines` splits, so a form feed or U+2028 ends a line here too (counting `\\n` put an
        edit on the wrong line), and found by bisection (counting from the file's start per edit was
        quadratic in a script of many commands)."""
        if self._starts is None:
            self._starts = list(itertools.accumulate((len(s) for s in self.lines), initial=0))
        line = bisect.bisect_right(self._starts, offset) - 1
        return line, offset - self._starts[line]

    def insert_after(self, line: int, new_lines: list[str]) -> None:
        self._edits.append(_Edit(line, -1, -1, new_lines, len(self._edits)))

    def replace(self, line: int, col: int, end: int, text: str) -> None:
        self._edits.append(_Edit(line, col, end, text, len(self._edits)))

    @property
    def changed(self) -> bool:
        return bool(self._edits)

    def apply(self) -> str:
        lines = list(self.lines)
        # bottom-up, so earlier positions stay valid; inserts after the same line keep their order
        order = sorted(self._edits, key=lambda e: (e.line, e.col, -e.seq), reverse=True)
        i = 0
        while i < len(order):
            e = order[i]
            if e.col < 0:
                if e.line >= 0 and not lines[e.line].endswith(("\n", "\r")):
                    lines[e.line] += self.nl
                lines[e.line + 1:e.line + 1] = [s + self.nl for s in e.text]
                i += 1
                continue
            j = i + 1
            while j < len(order) and order[j].line == e.line and order[j].col >= 0:
                j += 1
            lines[e.line] = _spliced(lines[e.line], order[i:j])
            i = j
        return "".join(lines)

    def indent(self, line: int) -> int:
        s = self.lines[line]
        return len(s) - len(s.lstrip(" "))

    def is_filler(self, line: int) -> bool:
        s = self.lines[line].strip()
        return not s or s.startswith("#")

    def block_end(self, first: int, col: int, is_map: bool, limit: int) -> int:
        """Last content line of the block (map keys or sequence dashes at column `col`) starting at
        line `first`; lines up to `limit` (exclusive) are considered."""
        last = first
        for i in range(first + 1, min(limit, len(self.lines))):
            if self.is_filler(i):
                continue
            ind = self.indent(i)
            dash = self.lines[i].lstrip(" ").startswith("-")
            if ind > col or (ind == col and (is_map or dash)):
                last = i
                continue
            break
        return last

    def scalar_span(self, line: int, col: int) -> tuple[int, int, str]:
        m = _SCALAR_TOKEN.match(self.lines[line].rstrip("\r\n"), col)
        if not m:
            raise FixUnsupported(f"cannot locate the value on line {line + 1}")
        return m.start(), m.end(), m.group(0)


@dataclass(frozen=True)
class Style:
    step: int = 2  # mapping indent
    seq_offset: int = 2  # dash column relative to the parent key


def _spliced(s: str, edits: list[_Edit]) -> str:
    """`s` with `edits` (right to left) applied: in one pass when all lie within the line and none overlaps
    the one applied before it (rebuilding the line per edit was quadratic in a line of many commands), else
    one after another."""
    if edits[0].col <= len(s) and all(b.end <= a.col for a, b in zip(edits, edits[1:])):
        pieces, right = [], len(s)
        for e in edits:
            pieces += (s[e.end:right], e.text)
            right = e.col
        pieces.append(s[:right])
        return "".join(reversed(pieces))
    for e in edits:
        s = s[:e.col] + e.text + s[e.end:]
    return s


def detect_style(text: str) -> Style:
    """The file's indentation: first nested mapping gives the step, first block sequence the dash offset."""
    lines = [ln.rstrip("\r\n") for ln in text.splitlines()]
    step = seq = None
    for i, ln in enumerate(lines[:-1]):
        s = ln.strip()
        if not s.endswith(":") or s.startswith(("#", "-")) and not s[2:].rstrip().endswith(":"):
            continue
        j = i + 1
        while j < len(lines) and (not lines[j].strip() or lines[j].strip().startswith("#")):
            j += 1
        if j >= len(lines):
            break
        key_col = len(ln) - len(ln.lstrip(" ")) + (2 if s.startswith("- ") else 0)
        nxt = lines[j]
        ncol = len(nxt) - len(nxt.lstrip(" "))
        if nxt.lstrip().startswith("- ") and seq is None and ncol >= key_col:
            seq = ncol - key_col
        elif not nxt.lstrip().startswith("-") and step is None and ncol > key_col:
            step = ncol - key_col
        if step is not None and seq is not None:
            break
    return Style(step or 2, 2 if seq is None else seq)


def emit(value: Any, col: int, style: Style) -> list[str]:
    """Block YAML for small dicts/lists of scalars, starting at column `col`."""
    pad = " " * col
    out: list[str] = []
    if isinstance(value, Mapping):
        for k, v in value.items():
            if isinstance(v, Mapping):
                out.append(f"{pad}{k}:")
                out += emit(v, col + style.step, style)
            elif isinstance(v, list):
                out.append(f"{pad}{k}:")
                out += emit(v, col + style.seq_offset, style)
            else:
                out.append(f"{pad}{k}: {v}")
    elif isinstance(value, list):
        for item in value:
            sub = emit(item, col + 2, style)
            out.append(f"{pad}- {sub[0].lstrip(' ')}")
            out += sub[1:]
    else:
        out.append(f"{pad}{value}")
    return out


def flow(value: Any) -> str:
    """Flow-style YAML for small dicts/lists of plain scalars: `[{name: dshm, mountPath: /dev/shm}]`."""
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(flow(v) for v in value) + "]"
    return str(value)
