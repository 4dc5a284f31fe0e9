"""Short runs judged by what they leave live, grouped by source line or block size, against their start."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

from oomdoctor.analysis import live_growth, timeline
from oomdoctor.collectors import rundir

MiB = 1 << 20
T0 = 1_700_000_000.0


def _src(groups: dict[str, tuple[int, int]]) -> list[dict]:
    return [{"source": k, "bytes": b, "blocks": n} for k, (b, n) in groups.items()]


def _size(groups: dict[int, int]) -> list[dict]:
    return [{"size": s, "bytes": s * n, "blocks": n} for s, n in groups.items()]


def _start(looks: list[dict[str, tuple[int, int]]], times=(0.25, 0.5, 1.0, 2.0), history=True) -> dict:
    points = []
    for t, groups in zip(times, looks):
        points.append({"t": T0 + t, "step": 0, "allocated": sum(b for b, _ in groups.values()),
                       "live_by_source": _src(groups), "live_by_size": []})
    return {"kind": "start", "label": "pid1", "pid": 1, "history": history, "points": points}


def _end(groups: dict[str, tuple[int, int]], history=True) -> dict:
    return {"history": history, "live_by_source": _src(groups), "live_by_size": []}


MODEL = ("model.py:12 in build", (300 * MiB, 100))


def test_a_line_that_keeps_adding_blocks_is_a_leak_and_named():
    looks = [dict([MODEL]), dict([MODEL, ("eval.py:9 in <module>", (400 * MiB, 40))]),
             dict([MODEL, ("eval.py:9 in <module>", (1200 * MiB, 120))])]
    end = _end(dict([MODEL, ("eval.py:9 in <module>", (4000 * MiB, 400))]))
    live = live_growth.assess(_start(looks), end, end_t=T0 + 2.5)
    assert live["leak"] and live["by"] == "source"
    assert live["accumulating"][0]["key"] == "eval.py:9 in <module>"
    assert live_growth.sites(live)[0]["source"] == "eval.py:9 in <module>"


def test_a_model_loaded_in_the_first_second_is_not_a_leak_and_vetoes_a_rising_curve():
    looks = [{"model.py:12 in build": (100 * MiB, 30)}, {"model.py:12 in build": (200 * MiB, 70)},
             {"model.py:12 in build": (300 * MiB, 100)}, {"model.py:12 in build": (300 * MiB, 100)}]
    live = live_growth.assess(_start(looks), _end({"model.py:12 in build": (300 * MiB, 100)}), end_t=T0 + 3)
    assert not live["leak"]
    curve = {"pattern": "short_run_growth", "leak": True, "confidence": "low", "growth_bytes": 200 * MiB}
    out = live_growth.combine(curve, live)
    assert out["leak"] is False and out["decided_by"] == "live_growth"


def test_a_cache_filled_once_is_one_block_not_a_leak():
    looks = [dict([MODEL]), dict([MODEL, ("cache.py:3 in fill", (2048 * MiB, 1))]),
             dict([MODEL, ("cache.py:3 in fill", (2048 * MiB, 1))])]
    live = live_growth.assess(_start(looks), _end(dict([MODEL, ("cache.py:3 in fill", (2048 * MiB, 1))])),
                              end_t=T0 + 2)
    assert not live["leak"]


def test_without_history_a_block_size_whose_count_keeps_rising_is_a_leak():
    start = {"kind": "start", "label": "pid1", "pid": 1, "history": False, "points": [
        {"t": T0 + t, "allocated": 300 * MiB + n * 4 * MiB, "live_by_source": [], "live_by_size": _size({4 * MiB: n, MiB: 50})}
        for t, n in ((0.25, 10), (0.5, 40), (1.0, 90))]}
    end = {"history": False, "live_by_source": [{"source": "(no stack recorded)", "bytes": 1, "blocks": 1}],
           "live_by_size": _size({4 * MiB: 300, MiB: 50})}
    live = live_growth.assess(start, end, end_t=T0 + 2)
    assert live["leak"] and live["by"] == "size" and live["accumulating"][0]["key"] == 4 * MiB


def test_an_oom_end_needs_the_rise_before_the_oom_not_only_into_it():
    # activations of the fatal forward pass appear only in the OOM snapshot: the model's size, not a leak
    looks = [dict([MODEL]), dict([MODEL]), dict([MODEL])]
    end = _end(dict([MODEL, ("model.py:40 in forward", (70000 * MiB, 900))]))
    assert not live_growth.assess(_start(looks), end, end_t=T0 + 2, end_is_oom=True)["leak"]
    grow = [dict([MODEL, ("eval.py:9 in <module>", (b * MiB, b // 10))]) for b in (100, 800, 1600)]
    end = _end(dict([MODEL, ("eval.py:9 in <module>", (9000 * MiB, 900))]))
    assert live_growth.assess(_start(grow), end, end_t=T0 + 2, end_is_oom=True)["leak"]


def test_a_group_below_a_truncated_start_list_has_no_known_block_count():
    filler = {f"lib{i}.py:1 in f": (500 * MiB, 5) for i in range(live_growth.GROUP_CAP)}
    looks = [filler, filler, filler]
    end = _end({**filler, "x.py:1 in g": (2000 * MiB, 100)})
    live = live_growth.assess(_start(looks), end, end_t=T0 + 2)
    g = next(g for g in live["grown"] if g["key"] == "x.py:1 in g")
    assert g["new_blocks"] is None and not live["leak"]


def test_a_long_run_keeps_the_curve_verdict():
    looks = [dict([MODEL]), dict([MODEL, ("e.py:1 in f", (400 * MiB, 40))]), dict([MODEL, ("e.py:1 in f", (800 * MiB, 80))])]
    live = live_growth.assess(_start(looks), _end(dict([MODEL, ("e.py:1 in f", (8000 * MiB, 800))])), end_t=T0 + 600)
    curve = {"pattern": "flat", "leak": False}
    assert live["leak"] and live_growth.combine(curve, live)["leak"] is False


def _timeline(path: Path, ys: list[int], dt: float = 0.05) -> None:
    lines = [{"kind": "header", "schema_version": 1, "format": "oomdoctor-record", "t": T0, "pid": 1, "rank": None,
              "label": "pid1"}]
    lines += [{"kind": "sample", "t": T0 + 0.2 + i * dt, "step": 0, "allocated": y, "reserved": y + 64 * MiB}
              for i, y in enumerate(ys)]
    (path / "timeline-pid1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    (path / "run.json").write_text(json.dumps({"schema_version": 1, "start": T0, "argv": ["python", "e.py"],
                                               "returncode": 0}))


def test_report_of_a_fast_eval_leak_names_the_line(tmp_path):
    """A one-second run sampled 5 times (too few baselines for a trend): the start looks decide."""
    run = tmp_path / "run"
    run.mkdir()
    _timeline(run, [300 * MiB, 700 * MiB, 1500 * MiB, 1400 * MiB, 4300 * MiB], dt=0.2)
    looks = [dict([MODEL]), dict([MODEL, ("eval.py:9 in <module>", (400 * MiB, 40))]),
             dict([MODEL, ("eval.py:9 in <module>", (1200 * MiB, 120))])]
    (run / "start-pid1.json").write_text(json.dumps(_start(looks)))
    (run / "final-pid1.json").write_text(json.dumps({"kind": "final", "label": "pid1", "t": T0 + 1.3, "step": 0,
                                                     "snapshot": _end(dict([MODEL, ("eval.py:9 in <module>", (4000 * MiB, 400))]))}))
    doc = timeline.analyse(rundir.load(str(run)))
    assert doc["verdict"]["category"] == "leak_in_code"
    assert any("eval.py:9" in e for e in doc["verdict"]["evidence"])
    leak = doc["processes"][0]["leak"]
    assert leak["decided_by"] == "live_growth" and leak["sites"][0]["source"] == "eval.py:9 in <module>"


def test_hostile_start_file_only_loses_fields(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    _timeline(run, [300 * MiB] * 5, dt=0.2)
    (run / "start-pid1.json").write_text(json.dumps({"kind": "start", "label": "pid1", "points": [
        {"t": "x"}, {"t": T0, "allocated": True}, 7, {"t": T0, "allocated": 1, "live_by_source": [{"bytes": "9"}, 3],
                                                       "live_by_size": [{"size": 1}]}]}))
    (run / "final-pid1.json").write_text(json.dumps({"kind": "final", "label": "pid1", "t": T0 + 1,
                                                     "snapshot": {"live_by_source": "nope", "live_by_size": [None]}}))
    doc = timeline.analyse(rundir.load(str(run)))
    assert doc["verdict"]["category"] != "leak_in_code"


def test_recorder_writes_start_looks_after_cuda_comes_up(tmp_path, monkeypatch):
    from oomdoctor.injob.record import probes
    from oomdoctor.injob.record import recorder as rmod

    blocks = []
    seg = {"device": 0, "total_size": 1 << 30, "allocated_size": 0, "blocks": blocks}
    fake = SimpleNamespace(cuda=SimpleNamespace(memory=SimpleNamespace(_snapshot=lambda: {"segments": [seg]})),
                           _C=SimpleNamespace(_cuda_isHistoryEnabled=lambda: False))
    monkeypatch.setattr(probes, "cuda_ready", lambda: fake)
    monkeypatch.setattr(probes, "busiest_device", lambda torch: 0)
    monkeypatch.setattr(probes, "allocator", lambda torch, dev: {"allocated": len(blocks) * MiB})

    def attach(self, torch):
        self._cuda_attached, self._attached_at = True, time.monotonic()
    monkeypatch.setattr(rmod.Recorder, "_attach", attach)
    monkeypatch.setattr(rmod, "LOOK_FIRST_S", 0.05)
    monkeypatch.setattr(rmod, "LOOK_GAP_S", 0.05)
    monkeypatch.setattr(rmod, "LOOK_GROWTH", 4 * MiB)
    monkeypatch.setattr(rmod, "LOOK_SETTLED_S", 0.3)
    rec = rmod.Recorder(str(tmp_path / "run"), every_ms=20).start()
    for i in range(40):  # grows for 0.8 s, then holds
        blocks.append({"state": "active_allocated", "address": i, "size": MiB, "requested_size": MiB,
                       "frames": [{"filename": "/home/u/eval.py", "line": 9, "name": "<module>"}]})
        time.sleep(0.02)
    time.sleep(0.8)
    rec.stop(final_snapshot=False)
    doc = json.loads(next((tmp_path / "run").glob("start-*.json")).read_text())
    counts = [p["live_by_size"][0]["blocks"] for p in doc["points"]]
    whys = [p["why"] for p in doc["points"]]
    assert whys[0] == "first" and "growth" in whys and whys[-1] == "settled", whys
    assert counts == sorted(counts) and counts[0] < counts[-1] == 40
    assert doc["points"][-1]["live_by_source"][0]["source"].startswith("/home/u/eval.py:9")


def test_no_looks_from_the_sampler_with_history_on(tmp_path, monkeypatch):
    """With history on a snapshot symbolises stacks: never from the sampler thread (see recorder)."""
    from oomdoctor.injob.record import probes
    from oomdoctor.injob.record import recorder as rmod

    calls = []
    fake = SimpleNamespace(cuda=SimpleNamespace(memory=SimpleNamespace(_snapshot=lambda: calls.append(1) or {"segments": []})))
    monkeypatch.setattr(probes, "cuda_ready", lambda: fake)
    monkeypatch.setattr(probes, "busiest_device", lambda torch: 0)
    monkeypatch.setattr(probes, "allocator", lambda torch, dev: {"allocated": len(calls) * 0 + int(time.time() * 1e9) % (1 << 40)})

    def attach(self, torch):
        self._cuda_attached, self._attached_at, self._history_on = True, time.monotonic(), True
    monkeypatch.setattr(rmod.Recorder, "_attach", attach)
    monkeypatch.setattr(rmod, "LOOK_FIRST_S", 0.0)
    rec = rmod.Recorder(str(tmp_path / "run"), every_ms=20).start()
    time.sleep(0.3)
    rec.stop(final_snapshot=False, restore=False)
    assert not calls and not list((tmp_path / "run").glob("start-*.json"))


def _ring_snapshot(leak: bool) -> dict:
    """A history ring: a model loaded at t=0, then 50 steps, each allocating and freeing a temporary
    and (leak) keeping one 16 MiB output from eval.py:9."""
    model = [{"filename": "/home/u/model.py", "line": 12, "name": "build"}]
    line = [{"filename": "/home/u/eval.py", "line": 9, "name": "<module>"}]
    tmp = [{"filename": "/home/u/eval.py", "line": 8, "name": "<module>"}]
    events, blocks, addr = [], [], 1000
    for i in range(20):
        events.append({"action": "alloc", "addr": i, "size": 8 * MiB, "time_us": 1_000_000 + i, "frames": model})
        blocks.append({"state": "active_allocated", "address": i, "size": 8 * MiB, "frames": model})
    for s in range(50):
        t = 2_000_000 + s * 100_000
        events.append({"action": "alloc", "addr": addr, "size": 32 * MiB, "time_us": t, "frames": tmp})
        events.append({"action": "free_completed", "addr": addr, "size": 32 * MiB, "time_us": t + 10, "frames": tmp})
        addr += 1
        if leak:
            events.append({"action": "alloc", "addr": addr, "size": 16 * MiB, "time_us": t + 20, "frames": line})
            blocks.append({"state": "active_allocated", "address": addr, "size": 16 * MiB, "frames": line})
            addr += 1
    return {"segments": [{"device": 0, "total_size": 1 << 34, "allocated_size": 0, "blocks": blocks}],
            "device_traces": [events]}


def test_ring_looks_replay_what_was_live_and_decide_with_history_on(tmp_path):
    from oomdoctor.injob.record import snapshot

    for leak in (True, False):
        snap = _ring_snapshot(leak)
        summary = snapshot.summarise(snap, 0)
        looks = summary["ring_looks"]["points"]
        assert len(looks) == 8 and looks[0]["allocated"] == 8 * MiB  # the ring's first event
        assert looks[-1]["allocated"] >= 160 * MiB and all(p["allocated"] <= 160 * MiB + 32 * MiB + (800 * MiB if leak else 0)
                                                           for p in looks)
        run = tmp_path / f"run{leak}"
        run.mkdir()
        _timeline(run, [160 * MiB] * 4, dt=0.3)
        (run / "final-pid1.json").write_text(json.dumps({"kind": "final", "label": "pid1", "t": T0 + 1.3, "step": 0,
                                                         "snapshot": {**summary, "history": True}}))
        doc = timeline.analyse(rundir.load(str(run)))
        leak_doc = doc["processes"][0]["leak"]
        assert leak_doc["live_growth"]["by"] == "source"
        assert (doc["verdict"]["category"] == "leak_in_code") is leak
        if leak:
            assert leak_doc["sites"][0]["source"] == "/home/u/eval.py:9 in <module>"



def test_no_looks_when_the_job_records_history_itself_or_torch_cannot_say(tmp_path, monkeypatch):
    from oomdoctor.injob.record import probes
    from oomdoctor.injob.record import recorder as rmod

    for c in (SimpleNamespace(_cuda_isHistoryEnabled=lambda: True), SimpleNamespace()):
        calls = []
        fake = SimpleNamespace(cuda=SimpleNamespace(memory=SimpleNamespace(_snapshot=lambda calls=calls: calls.append(1) or {"segments": []})),
                               _C=c)
        monkeypatch.setattr(probes, "cuda_ready", lambda fake=fake: fake)
        monkeypatch.setattr(probes, "busiest_device", lambda torch: 0)
        monkeypatch.setattr(probes, "allocator", lambda torch, dev: {"allocated": int(time.time() * 1e9) % (1 << 40)})

        def attach(self, torch):
            self._cuda_attached, self._attached_at = True, time.monotonic()
        monkeypatch.setattr(rmod.Recorder, "_attach", attach)
        monkeypatch.setattr(rmod, "LOOK_FIRST_S", 0.0)
        run = tmp_path / f"run{len(vars(c))}"
        rec = rmod.Recorder(str(run), every_ms=20).start()
        time.sleep(0.3)
        rec.stop(final_snapshot=False, restore=False)
        assert not calls and not list(run.glob("start-*.json"))


def test_a_start_file_with_a_million_groups_is_cut_to_a_bounded_view(tmp_path):
    from oomdoctor.analysis import evidence

    huge = [{"source": f"x.py:{i} in f", "bytes": i, "blocks": 1} for i in range(1_000_000)]
    doc = evidence.start_file({"kind": "start", "label": "pid1",
                               "points": [{"t": T0 + i, "allocated": 1, "live_by_source": huge} for i in range(100)]})
    assert len(doc["points"]) == 32 and all(len(p["live_by_source"]) == evidence.MAX_GROUPS for p in doc["points"])
