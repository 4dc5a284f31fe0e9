"""PYTORCH_CUDA_ALLOC_CONF parser: validation rules, and hypothesis fuzzing (never raises)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oomdoctor.parsers.alloc_conf import KNOWN_KEYS, parse_alloc_conf


def messages(text):
    return [(i.severity, i.key, i.message) for i in parse_alloc_conf(text).issues]


def test_valid_conf_has_no_issues_and_keeps_options():
    c = parse_alloc_conf("expandable_segments:True, max_split_size_mb:512,roundup_power2_divisions:[256:1,512:2,>:8]")
    assert c.issues == () and c.ok and c.expandable_segments
    assert c.options["roundup_power2_divisions"] == "[256:1,512:2,>:8]"
    assert c.options["max_split_size_mb"] == "512" and c.backend == "native"


@pytest.mark.parametrize("text,severity,needle", [
    ("expandable_segments:true", "error", "True or False"),
    ("expandable_segments:1", "error", "True or False"),
    ("max_split_size_mb:19", "error", "at least 20"),
    ("max_split_size_mb:big", "error", "whole number"),
    ("garbage_collection_threshold:1.2", "error", "between 0.0 and 1.0"),
    ("garbage_collection_threshold:0.8", "warning", "per-process memory fraction"),
    ("roundup_power2_divisions:3", "error", "power of 2"),
    ("roundup_power2_divisions:[256:3]", "error", "not a power of 2"),
    ("backend:async", "error", "native or cudaMallocAsync"),
    ("backend:cudaMallocAsync,expandable_segments:True", "warning", "ignored with backend:cudaMallocAsync"),
    ("backend:cudaMallocAsync,roundup_power2_divisions:4", "warning", "ignored"),
    ("max_split_size:128", "error", "unknown option"),
    ("expandable_segments", "error", "not option:value"),
    ("max_split_size_mb:128,max_split_size_mb:256", "warning", "twice"),
    ("per_process_memory_fraction:0", "error", "(0.0, 1.0]"),
])
def test_rules(text, severity, needle):
    found = [m for m in messages(text) if needle in m[2]]
    assert found and found[0][0] == severity, messages(text)


def test_gc_threshold_with_fraction_is_quiet():
    assert messages("garbage_collection_threshold:0.6,per_process_memory_fraction:0.8") == []


def test_typo_gets_a_suggestion():
    assert "did you mean 'expandable_segments'" in messages("expandable_segmnets:True")[0][2]


_token = st.one_of(st.sampled_from(sorted(KNOWN_KEYS)), st.text(max_size=12))
_value = st.one_of(st.sampled_from(["True", "False", "0", "20", "0.5", "[256:1,>:8]", "native", "cudaMallocAsync"]),
                   st.text(max_size=12))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(_token, _value), max_size=6), st.sampled_from([",", ", ", ",,", ",[", "]"]))
def test_fuzz_structured(pairs, sep):
    text = sep.join(f"{k}:{v}" for k, v in pairs)
    conf = parse_alloc_conf(text)
    assert set(conf.options) <= KNOWN_KEYS
    for issue in conf.issues:
        assert issue.severity in ("error", "warning", "info") and issue.message


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=300))
def test_fuzz_arbitrary_text_never_raises(text):
    conf = parse_alloc_conf(text)
    assert conf.raw == text
