"""Every line that a detailed pattern classifies must be a candidate of the C pre-filter.

The pre-filter decides which lines the patterns ever see, so a literal missing from it silently
loses a whole kind of event. Hypothesis generates strings from each pattern of
oom_patterns.LINE_PATTERNS (and from the exit-137 rule); both the Hyperscan and the `find` engines
must flag the line.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oomdoctor.parsers import oom_patterns as P
from oomdoctor.parsers.oom_prefilter import _Prefilter

ENGINES = {"find": _Prefilter(use_hyperscan=False, literals=P.EVENT_LITERALS)}
_hs = _Prefilter(use_hyperscan=True, literals=P.EVENT_LITERALS)
if _hs.engine == "hyperscan":
    ENGINES["hyperscan"] = _hs

_ALPHABET = st.characters(min_codepoint=32, max_codepoint=126)


def _lines(pattern) -> st.SearchStrategy[str]:
    return st.from_regex(pattern, alphabet=_ALPHABET).map(lambda s: s.replace("\n", " "))


@pytest.mark.parametrize("engine", sorted(ENGINES))
@pytest.mark.parametrize("kind,pattern", P.LINE_PATTERNS, ids=[k for k, _ in P.LINE_PATTERNS])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data())
def test_every_classified_line_is_a_candidate(engine, kind, pattern, data) -> None:
    line = data.draw(_lines(pattern))
    if P.classify_line(line) is None:  # an earlier pattern may claim it, or none after normalising
        return
    block = ("INFO step 1 loss 0.5\n" + line + "\nINFO step 2 loss 0.4\n").encode()
    ends = ENGINES[engine].ends(block)
    ls, le = block.index(b"\n") + 1, block.index(b"\n", block.index(b"\n") + 1)
    assert any(ls < e <= le for e in ends), f"{kind}: {line!r} is not a pre-filter candidate"
