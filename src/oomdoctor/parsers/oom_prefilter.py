"""The per-byte work of `explain`: find candidate lines and count lines, in C.

A 1 GB log must be explained within a few times `grep -c` (bench/explain_stream.py), so nothing here
runs Python per line: Hyperscan finds every literal in one pass, else one `bytes.find` pass per
literal; numpy counts newlines in large blocks, else `bytes.count`. Both are dependencies where
wheels exist; the fallbacks keep other platforms working. Hyperscan and numpy release the GIL, so
`index_block` is thread-safe (per-thread scratch and buffers) and the reader runs it on several
blocks at once (collectors.logs.iter_prepared). Pure.
"""

from __future__ import annotations

import re
import threading
from typing import NamedTuple

from oomdoctor.parsers import oom_patterns as P

_PREFILTER_EXTRA = (rb"(?i:code|status)\W{0,8}137\b",)  # "Exit Code:    137" (kubectl describe)


class _Prefilter:
    """Offsets of candidate matches in a block: Hyperscan if present, else one C `find` pass per literal."""

    def __init__(self, use_hyperscan: bool = True, literals: tuple[bytes, ...] = P.PREFILTER_LITERALS) -> None:
        self._literals = literals
        self._extra = re.compile(b"|".join(_PREFILTER_EXTRA))
        self._hs = None
        self._local = threading.local()  # one Hyperscan scratch per thread: a scratch is single-use
        if not use_hyperscan:
            return
        try:  # a core dependency where a wheel exists; else the find loop below
            import hyperscan  # type: ignore[import-not-found]

            pats = [re.escape(x) for x in literals] + list(_PREFILTER_EXTRA)
            db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
            db.compile(expressions=[re.sub(rb"\(\?i:([^)]*)\)", rb"(?:\1)", p) for p in pats],
                       ids=list(range(len(pats))), elements=len(pats),
                       flags=[hyperscan.HS_FLAG_CASELESS if b"(?i" in p else 0 for p in pats])
            self._hs = db
            self._hs_mod = hyperscan
        except Exception:  # noqa: BLE001 - no wheel for this platform, or an old library: fall back
            self._hs = None

    @property
    def engine(self) -> str:
        return "hyperscan" if self._hs is not None else "find"

    def ends(self, block: bytes, start: int = 0, end: int | None = None) -> list[int]:
        end = len(block) if end is None else end
        out: list[int] = []
        if self._hs is not None:
            scratch = getattr(self._local, "scratch", None)
            if scratch is None:
                scratch = self._local.scratch = self._hs_mod.Scratch(self._hs)
            self._hs.scan(memoryview(block)[start:end], scratch=scratch,
                          match_event_handler=lambda _i, _f, to, _fl, _c: out.append(to + start))
            out.sort()
            return out
        # bytes.find is a C two-way/memchr search (GB/s); a regex alternation of these literals in
        # Python's re is ~100x slower (bench/explain_stream.py --fallback).
        find = block.find
        for lit in self._literals:
            n = len(lit)
            pos = find(lit, start, end)
            while pos >= 0:
                out.append(pos + n)
                pos = find(lit, pos + n, end)
        pos = find(b"137", start, end)  # exit code/status 137: check the words just before
        while pos >= 0:
            ls = block.rfind(b"\n", start, pos) + 1
            if self._extra.search(block, max(start, ls, pos - 24), min(end, pos + 4)):
                out.append(pos + 3)
            pos = find(b"137", pos + 3, end)
        out.sort()
        return out


_PREFILTERS: dict[bool, _Prefilter] = {}
_PF_LOCK = threading.Lock()


def prefilter_engine() -> str:
    return _prefilter().engine


_SMALL = 1 << 20  # a log this short is scanned with bytes.find: no Hyperscan import and compile (~40 ms)
_FIND: dict[bool, _Prefilter] = {}


def _prefilter(with_env: bool = True, small: bool = False) -> _Prefilter:
    """The pre-filter for event lines, plus environment-hint lines when `with_env`."""
    pf = _PREFILTERS.get(with_env)
    if pf is None and small:
        pf = _FIND.get(with_env)
        if pf is None:
            pf = _FIND[with_env] = _Prefilter(False, P.PREFILTER_LITERALS if with_env else P.EVENT_LITERALS)
        return pf
    if pf is None:
        with _PF_LOCK:  # reader threads may ask at once; compile one database
            pf = _PREFILTERS.get(with_env)
            if pf is None:
                pf = _PREFILTERS[with_env] = _Prefilter(
                    literals=P.PREFILTER_LITERALS if with_env else P.EVENT_LITERALS)
    return pf


class BlockIndex(NamedTuple):
    """What the scanner needs from the C passes over one span."""

    lines: list[tuple[int, int]]  # (start of a candidate line, newlines in block[start:that line])
    newlines: int  # in the whole span
    with_env: bool  # environment literals were looked for (the span starts within ENV_BYTES)


def index_block(block: bytes, start: int, end: int, src_offset: int) -> BlockIndex:
    """The per-byte work for block[start:end], which begins `src_offset` bytes into its log.

    Thread-safe and GIL-free in its C parts, so a reader can index the next blocks while the
    scanner handles this one's few candidate lines."""
    with_env = src_offset < P.ENV_BYTES
    lines: list[tuple[int, int]] = []
    last, pos, n = -1, start, 0
    rfind = block.rfind
    for hit in _prefilter(with_env, small=src_offset + end - start <= _SMALL).ends(block, start, end):
        ls = max(rfind(b"\n", start, max(hit - 1, start)) + 1, start)
        if ls != last:
            n += _count_newlines(block, pos, ls)
            lines.append((ls, n))
            last = pos = ls
    return BlockIndex(lines, n + _count_newlines(block, pos, end), with_env)  # each byte counted once


_NUMPY: list = []  # [numpy module or None], filled on the first large block
_NUMPY_MIN = 1 << 22  # below this, bytes.count (numpy costs ~0.1 s to import)
_NP_LOCAL = threading.local()  # a reusable bool buffer per thread
_NP_LOCK = threading.Lock()


def _numpy():
    if not _NUMPY:
        with _NP_LOCK:
            if not _NUMPY:
                try:
                    import numpy
                except ImportError:
                    numpy = None
                _NUMPY.append(numpy)
    return _NUMPY[0]


def _count_newlines(buf: bytes, start: int, end: int) -> int:
    """Newlines in buf[start:end]. numpy's vectorised compare (into a reused buffer) is 3x faster
    than bytes.count on large blocks and releases the GIL (bench/explain_stream.py); imported only
    for large logs."""
    n = end - start
    if n >= _NUMPY_MIN:
        np = _numpy()
        if np is not None:
            out = getattr(_NP_LOCAL, "buf", None)
            if out is None or out.size < n:
                out = _NP_LOCAL.buf = np.empty(n, dtype=bool)
            view = out[:n]
            np.equal(np.frombuffer(buf, np.uint8, count=n, offset=start), 10, out=view)
            return int(np.count_nonzero(view))
    return buf.count(b"\n", start, end)
