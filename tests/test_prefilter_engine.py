"""GIVEN explain's C pre-filter (ahocorasick-rs, or the bytes.find fallback) WHEN it reads any block
THEN the lines it flags are exactly the lines that hold one of its literals, its literal sets keep
the shape its speed depends on, and the cheap checks in front of the reading regexes are exact."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oomdoctor.explain import patterns as P
from oomdoctor.explain.prefilter import (
    ENGINES,
    _Prefilter,
    engine_installed,
    index_block,
    prefilter_engine,
    reading_line_starts,
)

INSTALLED = [e for e in ENGINES if engine_installed(e)]

# Pieces that make literals, their near misses (shared prefixes, other casings), newlines, CRLF and
# bytes that are not UTF-8.
_PIECES = st.sampled_from([
    *P.EVENT_LITERALS, *P.SIDE_LITERALS, b"OO", b"OOMK", b"oom", b"rro", b"error", b"ERR", b"illegall",
    b"memory", b"f memor", b"Exi", b"exited", b"return", b"\n", b"\r\n", b" ", b"137", b"\xff\xfe", b"\xe2\x94\x81",
])
_BLOCK = st.lists(st.one_of(_PIECES, st.binary(max_size=12)), max_size=60).map(b"".join)


def _lines_with_literals(block: bytes, literals: tuple[bytes, ...]) -> set[int]:
    out, pos = set(), 0
    for line in block.split(b"\n"):
        if any(lit in line for lit in literals):
            out.add(pos)
        pos += len(line) + 1
    return out


@pytest.mark.parametrize("engine", INSTALLED)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(block=_BLOCK, cut=st.integers(0, 40))
def test_flagged_lines_are_exactly_the_lines_with_a_literal(engine, block, cut):
    """Leftmost-longest non-overlapping matches still flag every such line (no literal holds a
    newline), and nothing else: also inside a span that does not start at 0."""
    pf = _Prefilter(engine, literals=P.EVENT_LITERALS)
    lits = P.EVENT_LITERALS + P.SIDE_LITERALS
    start = min(cut, len(block))
    start = block.rfind(b"\n", 0, start) + 1  # spans start at a line start
    ends = pf.ends(block, start, len(block))
    assert ends == sorted(ends)
    got = {block.rfind(b"\n", start, e - 1) + 1 if block.rfind(b"\n", start, e - 1) >= 0 else start for e in ends}
    want = {start + ls for ls in _lines_with_literals(block[start:], lits)}
    assert got == want


def test_event_literals_keep_the_shape_teddy_needs():
    """aho-corasick's SIMD Teddy searcher fingerprints the first min(4, shortest) bytes of each
    literal and refuses more than 64 literals: one 3-byte literal would blunt all of them."""
    assert all(len(x) >= 4 for x in P.EVENT_LITERALS), [x for x in P.EVENT_LITERALS if len(x) < 4]
    assert len(P.EVENT_LITERALS) <= 64
    assert all(len(x) < 4 for x in P.SIDE_LITERALS)
    assert len(set(P.EVENT_LITERALS)) == len(P.EVENT_LITERALS)
    assert not any(b"\n" in x or b"\r" in x for x in P.EVENT_LITERALS + P.SIDE_LITERALS + P.ENV_LITERALS)


def test_an_unknown_engine_is_refused():
    with pytest.raises(ValueError, match="unknown prefilter engine"):
        _Prefilter("hyperscan")


@settings(max_examples=200, deadline=None)
@given(block=_BLOCK, head=st.booleans())
def test_index_lines_hold_every_classifiable_line(block, head):
    """The reading sampler asks classify_line only of these lines, so that no OOM message counts as
    a memory reading: in the head of a log (with environment literals) and after it."""
    starts = {ls for ls, _ in index_block(block, 0, len(block), 0 if head else P.ENV_BYTES).lines}
    pos = 0
    for line in block.split(b"\n"):
        text = line.decode("utf-8", errors="replace").rstrip("\r")
        if P.classify_line(text) is not None:
            assert pos in starts, text
        pos += len(line) + 1


_READING_TEXT = st.lists(st.sampled_from([
    "mem", "Mem", "MEM", "mEm", "alloc", "Alloc", "ALLOC", "reserv", "Reserved", "memory_allocated", "G ", "g ",
    "12/300 ", "3.52G ", " 1", "2", "0", ".", "/", " ", "GiB", "MB", "M", "step", "=", ":", ",", "\t", "é",
]), max_size=25).map("".join)


@settings(max_examples=500, deadline=None)
@given(line=_READING_TEXT)
def test_reading_anchor_shortcut_is_the_regex(line):
    assert P.has_reading_anchor(line) == (P.READING_ANCHOR.search(line) is not None)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data())
def test_every_reading_has_a_number_and_unit(data):
    """parse_reading rules a line out when _NUMBER_UNIT finds nothing: READING must need it."""
    line = data.draw(st.from_regex(P.READING, alphabet=st.characters(min_codepoint=32, max_codepoint=126)))
    if P.READING.search(line):
        assert P._NUMBER_UNIT.search(line)


@settings(max_examples=100, deadline=None)
@given(block=_BLOCK)
def test_reading_line_starts_cover_the_anchor(block):
    starts = set(reading_line_starts(block))
    pos = 0
    for line in block.split(b"\n"):
        if P.READING_ANCHOR.search(line.decode("utf-8", errors="replace")):
            assert pos in starts
        pos += len(line) + 1


@pytest.mark.parametrize("line", [
    "Exit Code:    137", "command terminated with exit code 137", "exitCode: 137", "EXIT_CODE=137",
    "returncode=137", "Return code 137", "exited with status 137", "Process finished with exit code 137",
])
def test_exit_137_in_the_casings_programs_print(line):
    assert P.classify_line(line) == "exit_137"
    assert _Prefilter("find").ends(line.encode())


@pytest.mark.parametrize("line", ["status 137", "batch 137 done", "tokens/s 11370", "code 137"])
def test_a_137_without_exit_or_return_is_not_an_event(line):
    assert P.classify_line(line) is None


def test_a_bare_card_number_is_not_a_gpu():
    """'tokens/s 4090' next to an OOM must not name an RTX 4090 (and fake a 24 GB 'slice')."""
    from oomdoctor.explain.rank import explain_text

    log = ["step 10 tokens/s 4090 loss 0.3",
           "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
           "79.19 GiB of which 1.00 GiB is free. Of the allocated memory 70.00 GiB is allocated by PyTorch, and "
           "1.00 GiB is reserved by PyTorch but unallocated."]
    assert P.ENV_PATTERNS["gpu_name"].search(log[0]) is None
    assert P.ENV_PATTERNS["gpu_name"].search("GPU 0: NVIDIA GeForce RTX 4090").group(1) == "GeForce RTX 4090"
    ex = explain_text(log)
    assert not any("4090" in e for h in ex.hypotheses for e in h.evidence)


def test_aligned_buffers():
    import ctypes

    from oomdoctor.explain.read import ALIGN, aligned_buffer

    for size in (1, 4096, 1 << 20):
        buf, base = aligned_buffer(size)
        assert len(buf) - base >= size
        assert (ctypes.addressof(ctypes.c_char.from_buffer(buf)) + base) % ALIGN == 0


def test_the_fast_engine_is_the_default_where_its_wheel_is_installed():
    """A renamed constant or a broken wheel must not silently leave explain on `find` (~50x slower)."""
    import importlib.util

    assert re.fullmatch(r"ahocorasick|find", _Prefilter().engine)
    if importlib.util.find_spec("ahocorasick_rs") is not None:
        assert engine_installed("ahocorasick")
        assert prefilter_engine() == "ahocorasick"


def test_asking_for_a_missing_engine_fails_loudly(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_ahocorasick(name, *a, **k):
        if name == "ahocorasick_rs":
            raise ImportError("no wheel here")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_ahocorasick)
    assert _Prefilter().engine == "find"  # auto: the fallback
    assert not engine_installed("ahocorasick")
    with pytest.raises(ImportError):
        _Prefilter("ahocorasick")


def _bench():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "bench" / "prefilter_literals.py"
    spec = importlib.util.spec_from_file_location("prefilter_literals", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_literal_stands_for_a_requirement_of_the_bench():
    """bench/prefilter_literals.py documents where each literal comes from: keep the two in step."""
    pytest.importorskip("numpy")
    reqs = list(_bench().REQUIREMENTS.values())
    assert len(reqs) == len(P.EVENT_LITERALS)
    assert all(any(lit in r for lit in P.EVENT_LITERALS) for r in reqs), [r for r in reqs if not any(lit in r for lit in P.EVENT_LITERALS)]
    assert all(any(lit in r for r in reqs) for lit in P.EVENT_LITERALS)


def test_literals_leave_teddy_little_to_verify():
    """The simulated Teddy model (no timing): on training logs of three shapes the event literals
    leave almost no positions to verify; the set before this tuning left thousands a MiB."""
    pytest.importorskip("numpy")
    bench = _bench()
    for style in ("train", "hf", "json"):
        text = bench.sample(1 << 20, style, seed=3)
        assert bench.simulate(list(P.EVENT_LITERALS), text)["positions"] < 100, style
        assert bench.simulate(list(bench.BEFORE), text)["positions"] > 1000, style
