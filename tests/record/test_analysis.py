"""The report's analysis on synthetic timelines: leaks are flagged only when they are real."""

from __future__ import annotations

import json

import pytest

from oomdoctor.analysis import timeline
from oomdoctor.analysis.postmortem import classify_oom
from oomdoctor.analysis.robust import kendall_tau, theil_sen, window_minima
from oomdoctor.collectors import rundir
from oomdoctor.errors import InputError

from .synth import MiB, write_run

GiB = 1 << 30


def test_theil_sen_ignores_one_outlier():
    xs = list(range(20))
    ys = [2.0 * x + 1 for x in xs]
    ys[7] = 1000.0
    slope, intercept = theil_sen(xs, ys)
    assert slope == pytest.approx(2.0)
    assert intercept == pytest.approx(1.0)


def test_kendall_tau_plateau_after_jump_is_low():
    xs = list(range(40))
    ys = [0.0] * 2 + [100.0] * 38  # optimizer state appears once, then flat
    assert kendall_tau(xs, ys) < 0.1
    assert kendall_tau(xs, [float(x) for x in xs]) == 1.0


def test_window_minima_removes_sawtooth():
    pts = [(float(i), (i % 5) * 100.0 + i) for i in range(100)]
    mins = window_minima(pts, 20)
    assert mins == [(5.0 * k + 2, 5.0 * k) for k in range(20)]


def test_leak_flagged_on_a_leaking_timeline(tmp_path):
    run = write_run(tmp_path / "leak", leak_per_step=24 * MiB)
    doc = timeline.analyse(rundir.load(run))
    leak = doc["processes"][0]["leak"]
    assert leak["leak"] is True
    assert leak["slope_bytes"] == pytest.approx(24 * MiB, rel=0.2)
    assert doc["verdict"]["category"] == "leak_in_code"
    assert doc["verdict"]["severity"] == "warning"


def test_flat_noisy_timeline_is_not_a_leak(tmp_path):
    run = write_run(tmp_path / "flat", leak_per_step=0, noise=300 * MiB)
    doc = timeline.analyse(rundir.load(run))
    assert doc["processes"][0]["leak"]["leak"] is False
    assert doc["verdict"]["category"] is None


def test_small_growth_below_noise_is_not_a_leak(tmp_path):
    run = write_run(tmp_path / "slow", leak_per_step=MiB // 8, noise=64 * MiB)
    assert timeline.analyse(rundir.load(run))["processes"][0]["leak"]["leak"] is False


def _oom(**kw):
    base = {"requested": 2 * GiB, "device_limit": 80 * GiB,
            "stats": {"allocated_bytes.all.current": 70 * GiB, "reserved_bytes.all.current": 71 * GiB}}
    base.update(kw)
    return base


def test_oom_true_capacity():
    assert classify_oom(_oom(), None)[0] == "true_capacity"


def test_oom_fragmentation_when_cache_has_the_bytes_but_not_a_block():
    oom = _oom(requested=GiB, stats={"allocated_bytes.all.current": 1 * GiB + GiB // 3,
                                      "reserved_bytes.all.current": 4 * GiB})
    category, evidence = classify_oom(oom, None)
    assert category == "fragmentation"
    assert any("free inside the cache" in e for e in evidence)


def test_oom_other_process_from_nvml():
    oom = _oom(outside={"nvml": {"gpu_proc_used": 20 * GiB, "devices": [
        {"index": 0, "used": 79 * GiB, "total": 80 * GiB, "proc_used": 20 * GiB, "others_used": 59 * GiB}]}})
    assert classify_oom(oom, None)[0] == "other_process"


def test_oom_after_steady_growth_is_a_leak(tmp_path):
    run = write_run(tmp_path / "leakoom", leak_per_step=200 * MiB, oom=_oom())
    doc = timeline.analyse(rundir.load(run))
    assert doc["verdict"]["oom"] is True
    assert doc["verdict"]["category"] == "leak_in_code"


def test_sigkill_without_cuda_oom_is_host_oom(tmp_path):
    run = write_run(tmp_path / "killed", meta={"returncode": -9, "signal": "SIGKILL"})
    assert timeline.analyse(rundir.load(run))["verdict"]["category"] == "host_oom"


def test_two_ranks_are_merged(tmp_path):
    run = write_run(tmp_path / "ddp", label="rank0", rank=0)
    write_run(run, label="rank1", rank=1, leak_per_step=32 * MiB, seed=2)
    doc = timeline.analyse(rundir.load(run))
    assert [p["name"] for p in doc["processes"]] == ["rank 0", "rank 1"]
    assert doc["processes"][1]["leak"]["leak"] and not doc["processes"][0]["leak"]["leak"]
    assert "rank1" in doc["verdict"]["evidence"][0]


def test_truncated_last_line_is_tolerated(tmp_path):
    run = write_run(tmp_path / "cut")
    with open(run / "timeline-rank0.jsonl", "a") as f:
        f.write('{"kind": "step", "t": 17000')
    doc = timeline.analyse(rundir.load(run))
    assert doc["processes"][0]["bad_lines"] == 1
    assert any("unreadable line" in p for p in doc["problems"])


def test_bad_run_dirs_are_input_errors(tmp_path):
    with pytest.raises(InputError, match="no such run directory"):
        rundir.load(tmp_path / "missing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="not a directory"):
        rundir.load(tmp_path / "file")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="not an oomdoctor run directory"):
        rundir.load(tmp_path / "empty")


def test_malformed_evidence_is_noted_not_fatal(tmp_path):
    run = write_run(tmp_path / "bad")
    (run / "oom-rank0-1.json").write_bytes(b"\x00\x01binary")
    (run / "oom-rank0-2.json").write_text("[1, 2")
    doc = timeline.analyse(rundir.load(run))
    assert len(doc["problems"]) == 2
    json.dumps(doc)


def test_explain_decides_without_allocator_state_and_is_quoted_otherwise(tmp_path, monkeypatch):
    """explain reads the OOM message: it decides when no allocator state was recorded; with state, the
    recorded numbers decide and a different reading is quoted as a second opinion."""
    import sys
    import types
    from dataclasses import dataclass, field

    @dataclass
    class Hyp:
        category: str
        evidence: list = field(default_factory=lambda: ["NVIDIA MPS limit reached"])
        fixes: list = field(default_factory=lambda: ["raise CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"])

    seen = []
    fake = types.ModuleType("oomdoctor.explain.rank")
    fake.explain_text = lambda lines, facts: (seen.append(list(lines)) or
                                              types.SimpleNamespace(hypotheses=[Hyp("gpu_sharing_limit")]))
    monkeypatch.setitem(sys.modules, "oomdoctor.explain.rank", fake)
    exc = {"kind": "exception", "t": 1_700_000_100.0, "type": "OutOfMemoryError",
           "message": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."}
    for name, oom in (("stateless", {"source": "exception"}), ("stats", _oom())):
        run = write_run(tmp_path / name, oom=oom)
        with open(run / "timeline-rank0.jsonl", "a") as f:
            f.write(json.dumps(exc) + "\n")
        v = timeline.analyse(rundir.load(run))["verdict"]
        if name == "stateless":
            assert v["category"] == "gpu_sharing_limit" and v["source"] == "explain"
            assert "NVIDIA MPS limit reached" in v["evidence"]
        else:
            assert v["category"] == "true_capacity" and v["source"] == "recorded allocator state"
            assert any("second opinion" in e and "gpu_sharing_limit" in e for e in v["evidence"])
    assert seen and "CUDA out of memory" in seen[0][0]
