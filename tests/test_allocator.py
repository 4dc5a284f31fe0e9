"""The caching-allocator model: hand-computed cases from CUDACachingAllocator.cpp's rules, properties,
and a replay of real allocator traces recorded on an H100 (validation/results)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oomdoctor.errors import UsageError
from oomdoctor.estimate.alloc_conf import AllocConf, parse_alloc_conf
from oomdoctor.estimate.allocator import (
    AllocatorOOM,
    CachingAllocatorModel,
    allocation_size,
    replay,
    round_size,
)

MiB = 1 << 20
ROOT = Path(__file__).resolve().parents[1]


def test_round_size_and_segment_sizes():
    conf = AllocConf()
    assert round_size(1, conf) == 512
    assert round_size(513, conf) == 1024
    assert round_size(MiB + 1, conf) == MiB + 512
    assert allocation_size(512) == 2 * MiB  # small pool segment
    assert allocation_size(MiB + 512) == 20 * MiB  # 1-10 MiB -> 20 MiB segment
    assert allocation_size(10 * MiB) == 10 * MiB  # >= 10 MiB -> 2 MiB multiple
    assert allocation_size(11 * MiB + 512) == 12 * MiB


def test_roundup_power2_divisions_doc_example():
    conf = parse_alloc_conf("roundup_power2_divisions:4")
    # the docs' example (1200 -> 1280 with 4 divisions), in KiB: round_size applies divisions only above
    # kMinBlockSize * divisions bytes, and powers of two stay as they are
    assert round_size(1200 * 1024, conf) == 1280 * 1024
    assert round_size(1 << 20, conf) == 1 << 20
    assert round_size(1200, conf) == 1536


def test_small_request_packs_into_2mib_segment():
    m = CachingAllocatorModel()
    a = m.malloc(100)
    b = m.malloc(100)
    assert m.state.allocated == 1024 and m.state.reserved == 2 * MiB
    assert b - a == 512  # split from the same segment


def test_large_block_split_only_if_remainder_over_1mib():
    m = CachingAllocatorModel()
    m.malloc(11 * MiB + 1)  # 12 MiB segment, remainder 1 MiB - 512: not split, whole block counts
    assert m.state.allocated == 12 * MiB and m.state.reserved == 12 * MiB
    m2 = CachingAllocatorModel()
    m2.malloc(MiB + 1)  # 20 MiB segment split
    assert m2.state.allocated == MiB + 512 and m2.state.reserved == 20 * MiB


def test_free_coalesces_and_is_reused():
    m = CachingAllocatorModel()
    a, b = m.malloc(4 * MiB), m.malloc(4 * MiB)
    m.free(a)
    m.free(b)
    m.malloc(15 * MiB)  # served by the coalesced 20 MiB block, no new segment
    assert m.state.reserved == 20 * MiB


def test_cap_releases_cached_segments_then_retries():
    m = CachingAllocatorModel(limit=30 * MiB)
    a = m.malloc(12 * MiB)
    m.free(a)
    m.malloc(20 * MiB)
    assert m.state.reserved == 20 * MiB and m.state.num_alloc_retries == 1
    with pytest.raises(AllocatorOOM):
        CachingAllocatorModel(limit=10 * MiB).malloc(12 * MiB)


def test_max_split_size_keeps_oversize_blocks_for_big_requests():
    default, capped = CachingAllocatorModel(), CachingAllocatorModel(parse_alloc_conf("max_split_size_mb:40"))
    for m in (default, capped):
        m.free(m.malloc(50 * MiB))
        m.malloc(30 * MiB)
    assert default.state.reserved == 50 * MiB
    assert capped.state.reserved == 80 * MiB


def test_expandable_segments_grow_one_segment():
    m = CachingAllocatorModel(parse_alloc_conf("expandable_segments:True"))
    m.malloc(15 * MiB)
    m.malloc(15 * MiB)
    assert m.state.reserved == 40 * MiB and len(m.state.segments) == 1
    plain = CachingAllocatorModel()
    plain.malloc(15 * MiB)
    plain.malloc(15 * MiB)
    assert plain.state.reserved == 32 * MiB


@pytest.mark.parametrize("bad", ["max_split_size_mb:10", "bogus:1", "roundup_power2_divisions:3", "backend:x"])
def test_bad_alloc_conf(bad):
    with pytest.raises(UsageError):
        parse_alloc_conf(bad)


def test_interval_divisions():
    conf = parse_alloc_conf("roundup_power2_divisions:[256:1,512:2,1024:4,>:8]")
    # c10 fills every interval below the first key, then sets one interval (size in [key, 2*key)) per key
    assert conf.divisions_for(100 * MiB) == 1 and conf.divisions_for(400 * MiB) == 1
    assert conf.divisions_for(600 * MiB) == 2 and conf.divisions_for(1500 * MiB) == 4
    assert conf.divisions_for(4096 * MiB) == 8


ops = st.lists(st.tuples(st.booleans(), st.integers(1, 64 * MiB), st.integers(0, 1000)), min_size=1, max_size=80)


@settings(max_examples=200, deadline=None)
@given(ops, st.sampled_from(["", "expandable_segments:True", "max_split_size_mb:32", "roundup_power2_divisions:4"]))
def test_properties(seq, conf_text):
    m = CachingAllocatorModel(parse_alloc_conf(conf_text))
    live: list[int] = []
    for is_alloc, size, pick in seq:
        if is_alloc or not live:
            live.append(m.malloc(size))
        else:
            m.free(live.pop(pick % len(live)))
        assert m.state.reserved >= m.state.allocated >= 0
        assert m.state.peak_reserved >= m.state.reserved
    for addr in live:
        m.free(addr)
    assert m.state.allocated == 0
    m.release_cached_blocks()
    assert m.state.reserved == 0


def test_replays_real_h100_traces():
    """Real allocation traces (record_memory_history on the H100) replayed through the model give the
    measured max_memory_reserved: exactly for all but one configuration, that one within 2%."""
    traces = json.load(gzip.open(ROOT / "validation/results/estimate_zoo_traces_run1.json.gz", "rt"))
    measured = {f"{z['workload']}@{z['batch_size']}": z
                for z in json.load(open(ROOT / "validation/results/estimate_zoo_run1.json"))["zoo"] if "peak_reserved" in z}
    exact = 0
    for key, trace in traces.items():
        events, live, n = [], {}, 0
        for action, size, addr, stream in trace:
            if action == 0:
                n += 1
                live[addr] = n
                events.append(("a", n, size, stream))
            elif action == 1 and addr in live:
                events.append(("f", live.pop(addr), 0, stream))
        r = replay(events)
        m = measured[key]
        assert r.peak_allocated == pytest.approx(m["peak_allocated"], rel=0.001), key
        assert r.peak_reserved == pytest.approx(m["peak_reserved"], rel=0.02), key
        exact += r.peak_reserved == m["peak_reserved"]
    assert exact >= len(traces) - 1


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("abcdefghijklmnopqrstuvwxyz_:,[]>0123456789 -.TrueFals")), max_size=60))
def test_alloc_conf_parser_never_crashes(text):
    try:
        conf = parse_alloc_conf(text)
    except UsageError:
        return
    assert conf.max_split_size > 20 * MiB


@settings(max_examples=200, deadline=None)
@given(ops, st.lists(st.integers(0, 200), max_size=6),
       st.sampled_from(["", "expandable_segments:True", "max_split_size_mb:32"]))
def test_phase_peaks_give_the_replay_answer(seq, cuts, conf_text):
    """estimate --model replays once (phase_peaks) and takes replay()'s answer from it: the same peak
    allocated, peak reserved and first index of the allocated peak, whatever the phase marks."""
    from oomdoctor.estimate.allocator import phase_peaks, replay_of

    conf = parse_alloc_conf(conf_text)
    events, live, sid = [], [], 0
    for is_alloc, size, pick in seq:
        if is_alloc or not live:
            events.append(("a", sid, size, 0))
            live.append(sid)
            sid += 1
        else:
            events.append(("f", live.pop(pick % len(live)), 0, 0))
    marks = sorted((c % (len(events) + 1), f"step1/p{i % 3}") for i, c in enumerate(cuts))
    want, got = replay(events, conf), replay_of(phase_peaks(events, marks, conf))
    assert (got.peak_allocated, got.peak_reserved, got.peak_index) == \
        (want.peak_allocated, want.peak_reserved, want.peak_index)
