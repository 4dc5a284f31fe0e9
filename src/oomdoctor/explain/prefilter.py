"""The per-byte work of `explain`: find candidate lines and count lines, in C.

A 1 GB log must be explained within a few times `grep -c` (bench/explain_stream.py), so nothing here
runs Python per line. Candidate lines: `ahocorasick-rs` (Rust's aho-corasick crate, whose packed
SIMD "Teddy" searcher takes all the literals in one pass and releases the GIL), else one C
`bytes.find` pass per literal. Newlines: `stringzilla`'s SIMD count, else `bytes.count`. Both
libraries import in milliseconds (numpy took 0.2 s, a third of grep's time on 1 GB), and the
fallbacks give the same answers where no wheel exists. `index_block` is thread-safe, so the reader
runs it on several blocks at once (collectors.logs.iter_prepared). Pure.
"""

from __future__ import annotations

import bisect
import re
import threading
from typing import Any, NamedTuple

from oomdoctor.explain import patterns as P

ENGINES = ("ahocorasick", "find")  # preferred first; "auto" takes the first that imports


class _Prefilter:
    """End offsets of candidate matches in a block, sorted. Every line that holds one of `literals`
    or of `side` has at least one; how many more a line gets depends on the engine.

    ahocorasick: leftmost-longest, non-overlapping matches. That still reports every line with a
    literal: no literal holds a newline, so the leftmost match at or after a line's start lies in
    that line if the line has one. Only the crate's leftmost kinds use its SIMD searcher (the
    standard kind is ~8x slower here). `side` literals (shorter than 4 bytes) get their own
    automaton, so that the SIMD filter of the event literals keeps 4-byte fingerprints
    (oom_patterns). The head of a log adds the environment literals, some of 2-3 bytes, and more
    than Teddy takes (64): that automaton runs ~10x slower, on the first 8 MiB only (~16 ms); built as a full DFA
    (session 28) it runs ~2x faster than as the crate's default NFA (~12 against ~22 ms for 5 MB, loaded 2-CPU box).

    engine "auto" falls back to `find` where ahocorasick-rs cannot be imported; asking for
    "ahocorasick" by name raises instead."""

    def __init__(self, engine: str = "auto", literals: tuple[bytes, ...] = P.PREFILTER_LITERALS,
                 side: tuple[bytes, ...] = P.SIDE_LITERALS) -> None:
        if engine not in ("auto", *ENGINES):
            raise ValueError(f"unknown prefilter engine {engine!r}; one of auto, {', '.join(ENGINES)}")
        self._literals = literals + side
        self.engine = "find"
        self._automata: list[Any] = []
        if engine in ("auto", "ahocorasick"):
            try:
                import ahocorasick_rs  # type: ignore[import-not-found]

                kind = ahocorasick_rs.MATCHKIND_LEFTMOST_LONGEST
                dfa = {"implementation": ahocorasick_rs.Implementation.DFA}  # for a set Teddy cannot take
                self._automata = [ahocorasick_rs.BytesAhoCorasick(list(x), matchkind=kind, **(dfa if len(x) > 64 else {}))
                                  for x in (literals, side) if x]
                self.engine = "ahocorasick"
            except Exception:  # noqa: BLE001 - no wheel for this platform, or an old release: fall back
                if engine == "ahocorasick":  # asked for by name (tests, benches): say why it is missing
                    raise
                self._automata = []

    def ends(self, block: Any, start: int = 0, end: int | None = None) -> list[int]:
        end = len(block) if end is None else end
        out: list[int] = []
        if self._automata:
            with memoryview(block) as view, view[start:end] as span:
                for automaton in self._automata:
                    out += [start + e for _, _, e in automaton.find_matches_as_indexes(span)]
            if len(self._automata) > 1:
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
        out.sort()
        return out


_READINGS: list[_Prefilter] = []


def reading_line_starts(window: bytes) -> list[int]:
    """Starts, in order, of the lines of `window` that hold one of oom_patterns.READING_LITERALS:
    every READING_ANCHOR match does. One C pass instead of a find loop per literal."""
    if not _READINGS:
        with _PF_LOCK:
            if not _READINGS:
                _READINGS.append(_Prefilter(literals=tuple(x.encode() for x in P.READING_LITERALS), side=()))
    rfind = window.rfind
    return sorted({rfind(b"\n", 0, max(e - 1, 0)) + 1 for e in _READINGS[0].ends(window)})


def engine_installed(engine: str) -> bool:
    """Whether `engine` can be built here (the `find` fallback always can)."""
    try:
        return _Prefilter(engine, literals=(b"test",), side=()).engine == engine
    except Exception:  # noqa: BLE001 - the reason does not matter here
        return False


_PREFILTERS: dict[bool, _Prefilter] = {}
_PF_LOCK = threading.Lock()


def prefilter_engine() -> str:
    return _prefilter().engine


def _prefilter(with_env: bool = True) -> _Prefilter:
    """The pre-filter for event lines, plus environment-hint lines when `with_env`."""
    pf = _PREFILTERS.get(with_env)
    if pf is None:
        with _PF_LOCK:  # reader threads may ask at once; build one automaton
            pf = _PREFILTERS.get(with_env)
            if pf is None:
                pf = _PREFILTERS[with_env] = _Prefilter(
                    literals=P.PREFILTER_LITERALS if with_env else P.EVENT_LITERALS)
    return pf


class BlockIndex(NamedTuple):
    """What the scanner needs from the C passes over one span."""

    # (start of a candidate line, newlines in block[start:that line]); in a dense span, those that hold a gate (_dense_lines)
    lines: list[tuple[int, int]]
    newlines: int  # in the whole span
    with_env: bool  # environment literals were looked for (the span starts within ENV_BYTES)
    # the span without its terminal escape sequences (strip_escapes), where it had any: `lines` index it, not the
    # reader's buffer
    clean: bytes | None = None


# Terminal escape sequences: colour and cursor codes (CSI "ESC [ ... m"), window titles and links (OSC "ESC ] ...
# BEL" or "ESC ] ... ESC \"), and two-byte escapes. A coloured traceback read as "\x1b[35mCUDA out of memory"
# matched no pattern (`\bCUDA` after "m"), so the walkthrough's rich/loguru log gave a generic OOM with no numbers
# (session 27). Never a newline: line numbers stay those of the log. One literal first byte, so the regex engine
# jumps from ESC to ESC (with the caret form "^[[31m" as a second branch it tried every byte, 2.8x slower); a log
# coloured on every line still reads at ~80 MB/s against ~500 MB/s plain (2 CPUs). The caret form, which `cat -v`,
# `less` and some CI viewers write, is taken out of candidate lines (CARET_ESCAPE).
_ESCAPES = re.compile(rb"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b\n]{0,4096}(?:\x07|\x1b\\)|[()][0-9A-Za-z]|[@-Z\\-_=>])")


CARET_ESCAPE = re.compile(r"\^\[\[[0-9;]*[A-HJKSTfm]")  # the caret form, in text (events._decode)


def strip_escapes(block: Any, start: int, end: int) -> bytes | None:
    """block[start:end] without terminal escape sequences, or None where it holds no ESC byte: one memchr pass
    (0.3 ms per 8 MiB block), no copy in the common case. The caret form ("^[[31m") is plain text that a C
    search for it would cost 10 ms a block to find (bench/explain_stream.py: 2x slower on 1 GB); it is taken out
    of candidate lines only, as they are decoded (events._decode)."""
    if block.find(b"\x1b", start, end) < 0:
        return None
    return _ESCAPES.sub(b"", bytes(block[start:end]))  # the caret form stays for _decode (a line at a time)


def index_block(block: bytes, start: int, end: int, src_offset: int) -> BlockIndex:
    """The per-byte work for block[start:end], which begins `src_offset` bytes into its log.

    Thread-safe, and its literal pass runs without the GIL, so a reader can index the next blocks
    while the scanner handles this one's few candidate lines. A span holding terminal escape sequences is
    indexed without them (BlockIndex.clean): a colour code inside a message splits the literals looked for."""
    clean = strip_escapes(block, start, end)
    if clean is not None:
        return _index(clean, 0, len(clean), src_offset)._replace(clean=clean)
    return _index(block, start, end, src_offset)


def _index(block: Any, start: int, end: int, src_offset: int) -> BlockIndex:
    with_env = src_offset < P.ENV_BYTES
    hits = _prefilter(with_env).ends(block, start, end)
    dense = _dense_lines(block, start, end, hits) if len(hits) >= DENSE_FROM and len(hits) * DENSE_BYTES >= end - start \
        else None
    if dense is not None:
        return BlockIndex(dense[0], dense[1], with_env)
    lines: list[tuple[int, int]] = []
    last, pos, n = -1, start, 0
    rfind = block.rfind
    for hit in hits:
        ls = max(rfind(b"\n", start, max(hit - 1, start)) + 1, start)
        if ls != last:
            n += _count_newlines(block, pos, ls)
            lines.append((ls, n))
            last = pos = ls
    return BlockIndex(lines, n + _count_newlines(block, pos, end), with_env)  # each byte counted once


# In a log's head the environment literals make candidates of lines that name a GPU ("device cuda:0", "GPU 0"): in a
# log that prints one on every step, every line, and the scanner ran the gate tests of every pattern on each (session
# 28: ~3 s/MB). A span with a hit every DENSE_BYTES or less (DENSE_FROM in all) keeps only its candidate lines that
# hold a gate of some pattern (patterns.GATE_LITERALS), found in two C passes (~5 ms/MiB): no other line can open a
# pattern, so the scan is the same (tests/test_explain_gpu_lines_s28.py), and the per-hit loop above is not run.
DENSE_FROM = 256
DENSE_BYTES = 256
_GATES: list[Any] = []


def _dense_lines(block: Any, start: int, end: int, hits: list[int]) -> tuple[list[tuple[int, int]], int] | None:
    """As _index's loop, for the lines holding a hit and a gate: (start, newlines before it in the span), and the
    span's newlines; None without the ahocorasick-rs wheel (every candidate line is then handed on)."""
    gated = _gated(block, start, end)
    if gated is None:
        return None
    lines: list[tuple[int, int]] = []
    pos, n = start, 0
    for ls in sorted(gated):
        le = block.find(b"\n", ls, end)
        i = bisect.bisect_right(hits, ls)  # a hit is the end of a match: in this line when ls < hit <= le
        if i < len(hits) and hits[i] <= (end if le < 0 else le):
            n += _count_newlines(block, pos, ls)
            lines.append((ls, n))
            pos = ls
    return lines, n + _count_newlines(block, pos, end)


def _gated(block: Any, start: int, end: int) -> frozenset[int] | None:
    """Starts of the lines of block[start:end] holding one of patterns.GATE_LITERALS, or GATE_LITERALS_CASELESS in
    their lower case (ASCII letters: the characters whose lower case is ASCII are GATE_LITERALS); None without the
    ahocorasick-rs wheel."""
    if not _GATES:
        with _PF_LOCK:
            if not _GATES:
                try:
                    import ahocorasick_rs  # type: ignore[import-not-found]

                    kind = ahocorasick_rs.MATCHKIND_LEFTMOST_LONGEST  # one match at least on each line that has any
                    # too many literals for Teddy: a full DFA (~4 ms to build, ~2 MB) runs 2.5x faster than the NFAs
                    _GATES.extend(ahocorasick_rs.BytesAhoCorasick(list(lits), matchkind=kind,
                                                                  implementation=ahocorasick_rs.Implementation.DFA)
                                  for lits in (P.GATE_LITERALS, P.GATE_LITERALS_CASELESS))
                except Exception:  # noqa: BLE001 - no wheel for this platform
                    _GATES.append(None)
    if _GATES[0] is None:
        return None
    with memoryview(block) as view, view[start:end] as span:
        ends = [start + e for _, _, e in _GATES[0].find_matches_as_indexes(span)]
    a = start
    while a < end:  # lowered a MiB at a time, cut at a line's end (no gate holds a newline): no copy of the span
        b = end if end - a <= 1 << 20 else (block.rfind(b"\n", a, a + (1 << 20)) + 1
                                           or block.find(b"\n", a + (1 << 20), end) + 1 or end)
        ends += [a + e for _, _, e in _GATES[1].find_matches_as_indexes(block[a:b].lower())]
        a = b
    rfind = block.rfind
    return frozenset(max(rfind(b"\n", start, max(e - 1, start)) + 1, start) for e in ends)


try:  # SIMD newline count, ~4x bytes.count; it holds the GIL, but for ~1 ms per 8 MiB block
    from stringzilla import count as _sz_count  # type: ignore[import-not-found]

    COUNTER = "stringzilla"
except Exception:  # noqa: BLE001 - no wheel for this platform: bytes.count gives the same numbers
    _sz_count = None
    COUNTER = "bytes.count"


def _count_newlines(buf: Any, start: int, end: int) -> int:
    """Newlines in buf[start:end] (bytes or bytearray)."""
    if end <= start:
        return 0
    if _sz_count is not None:
        return _sz_count(buf, b"\n", start, end)
    return buf.count(b"\n", start, end)
