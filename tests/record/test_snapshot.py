"""Snapshot summaries (JSON, no pickle): live blocks, source lines, and the peak replayed from the ring."""

from __future__ import annotations

from oomdoctor.injob.record import snapshot

MiB = 1 << 20


def _frames(line: int) -> list[dict]:
    return [{"filename": "/x/site-packages/torch/nn/functional.py", "line": 10, "name": "conv"},
            {"filename": "/home/u/train.py", "line": line, "name": "step"},
            {"filename": "/home/u/train.py", "line": 99, "name": "<module>"}]


SNAP = {
    "segments": [{"device": 0, "total_size": 20 * MiB, "allocated_size": 6 * MiB, "blocks": [
        {"address": 1, "size": 6 * MiB, "requested_size": 6 * MiB, "state": "active_allocated", "frames": _frames(5)},
        {"address": 2, "size": 14 * MiB, "state": "inactive"}]}],
    "device_traces": [[
        {"action": "alloc", "addr": 1, "size": 6 * MiB, "frames": _frames(5), "time_us": 1},
        {"action": "alloc", "addr": 2, "size": 8 * MiB, "frames": _frames(7), "time_us": 2},
        {"action": "alloc", "addr": 3, "size": 4 * MiB, "frames": _frames(8), "time_us": 3},
        {"action": "free_requested", "addr": 2, "size": 8 * MiB, "time_us": 4},
        {"action": "free_completed", "addr": 2, "size": 8 * MiB, "time_us": 4},
        {"action": "free_completed", "addr": 3, "size": 4 * MiB, "time_us": 5},
    ]],
}


def test_user_frame_skips_library_frames():
    assert snapshot.user_frame(_frames(5)) == "/home/u/train.py:5 in step"
    assert snapshot.user_frame([]) is None


def test_summary_live_blocks_and_segments():
    s = snapshot.summarise(SNAP, 0)
    assert s["segments"] == {"segments": 1, "reserved": 20 * MiB, "allocated": 6 * MiB, "largest_free_block": 14 * MiB}
    assert s["largest_live"][0]["source"] == "/home/u/train.py:5 in step"
    assert s["largest_live"][0]["stack"][0].endswith("functional.py:10 in conv")
    assert s["live_by_source"] == [{"source": "/home/u/train.py:5 in step", "bytes": 6 * MiB, "blocks": 1}]


def test_peak_is_replayed_from_the_ring():
    peak = snapshot.summarise(SNAP, 0)["trace_peak"]
    assert peak["allocated"] == 18 * MiB  # after the third alloc, before any free
    sources = {g["source"]: g["bytes"] for g in peak["live_by_source"]}
    assert sources == {"/home/u/train.py:5 in step": 6 * MiB, "/home/u/train.py:7 in step": 8 * MiB,
                       "/home/u/train.py:8 in step": 4 * MiB}


def test_no_history_no_peak():
    s = snapshot.summarise({"segments": SNAP["segments"]}, 0)
    assert "trace_peak" not in s and s["trace_tail"] == []
