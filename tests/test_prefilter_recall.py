"""Every line that a detailed pattern classifies must be a candidate of the C pre-filter.

The pre-filter decides which lines the patterns ever see, so a literal missing from it silently
loses a whole kind of event. Hypothesis generates strings from each pattern of
oom_patterns.LINE_PATTERNS (and from the exit-137 rule); every installed engine (ahocorasick-rs and the
`find` fallback) must flag the line.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oomdoctor.explain import patterns as P
from oomdoctor.explain.prefilter import ENGINES as ALL_ENGINES
from oomdoctor.explain.prefilter import _Prefilter, engine_installed

INSTALLED = [e for e in ALL_ENGINES if engine_installed(e)]
ENGINES = {e: _Prefilter(e, literals=P.EVENT_LITERALS) for e in INSTALLED}

_ALPHABET = st.characters(min_codepoint=32, max_codepoint=126)


def _lines(pattern) -> st.SearchStrategy[str]:
    return st.from_regex(pattern, alphabet=_ALPHABET).map(lambda s: s.replace("\n", " "))


@pytest.mark.parametrize("engine", sorted(ENGINES))
@pytest.mark.parametrize("kind,pattern", P.LINE_PATTERNS, ids=[k for k, _ in P.LINE_PATTERNS])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data())
def test_every_classified_line_is_a_candidate(engine, kind, pattern, data) -> None:
    line = data.draw(_lines(pattern))
    if P.classify_line(line) is None:  # an earlier pattern may claim it, or none after normalising
        return
    block = ("INFO step 1 loss 0.5\n" + line + "\nINFO step 2 loss 0.4\n").encode()
    ends = ENGINES[engine].ends(block)
    ls, le = block.index(b"\n") + 1, block.index(b"\n", block.index(b"\n") + 1)
    assert any(ls < e <= le for e in ends), f"{kind}: {line!r} is not a pre-filter candidate"


@pytest.mark.parametrize("kind,pattern", P.LINE_PATTERNS, ids=[k for k, _ in P.LINE_PATTERNS])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data())
def test_every_pattern_match_passes_its_gate(kind, pattern, data) -> None:
    """classify_line only runs a pattern when the line holds one of its gate substrings."""
    line = data.draw(_lines(pattern))
    m = pattern.search(line)
    if m is None:  # the newline replacement can break a match; nothing to check
        return
    assert any(n in line for n in P.LINE_GATES[kind]), f"{kind}: {line!r} passes no gate"


@pytest.mark.parametrize("name", sorted(P.ENV_PATTERNS))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data())
def test_every_env_match_passes_its_gate(name, data) -> None:
    pattern = P.ENV_PATTERNS[name]
    line = data.draw(_lines(pattern))
    if pattern.search(line) is None:
        return
    assert P.env_gate_passes(name, line), f"{name}: {line!r} passes no gate"  # (paired gates: both sets)


def test_gates_name_every_pattern() -> None:
    assert set(P.LINE_GATES) == {k for k, _ in P.LINE_PATTERNS}
    assert set(P.ENV_GATES) == set(P.ENV_PATTERNS)


def test_memory_reading_lines_are_cheap_to_reject() -> None:
    """A log that prints GPU memory every step is all pre-filter candidates: none is an event."""
    from oomdoctor.explain.events import LogScanner

    lines = [f"step {i} loss 0.{i % 97:02d} gpu memory allocated: {10 + i % 7 * 0.1:.2f} GiB\n" for i in range(2000)]
    scanner = LogScanner()
    scanner.start_source("steps.log")
    scanner.feed("".join(lines).encode())
    scan = scanner.finish()
    assert scan.events == [] and scan.lines == 2000
    assert scan.readings  # the same lines still give the leak detector its series


_ENV_ENGINES = {e: _Prefilter(e, literals=P.PREFILTER_LITERALS) for e in INSTALLED}


@pytest.mark.parametrize("engine", sorted(_ENV_ENGINES))
@pytest.mark.parametrize("name", sorted(P.ENV_PATTERNS))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data())
def test_every_env_hint_is_a_candidate_in_the_head(engine, name, data) -> None:
    """Environment hints (GPU names, sharing layers, 'memory keeps growing') are read from candidate
    lines in the head of a log; caseless patterns are checked in lower case (how people write)."""
    pattern = P.ENV_PATTERNS[name]
    line = data.draw(_lines(pattern))
    if name in P.ENV_CASELESS:
        line = line.lower()
    if pattern.search(line) is None:
        return
    block = ("x\n" + line + "\ny\n").encode()
    ends = _ENV_ENGINES[engine].ends(block)
    assert any(2 < e <= 2 + len(line.encode()) for e in ends), f"{name}: {line!r} is not a candidate"
