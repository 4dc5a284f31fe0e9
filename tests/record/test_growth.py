"""The growth model on synthetic timelines (one per pattern) and on real recorded H100 runs."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from oomdoctor.analysis import growth, timeline
from oomdoctor.collectors import rundir

MiB, GiB = 1 << 20, 1 << 30
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "recorded"


def stepped(baseline, steps=150, step_s=0.2, noise=40 * MiB, activ=3 * GiB, seed=1, samples_per_step=1):
    """Step markers plus samples inside each step (the forward/backward saw-tooth on top of the baseline)."""
    rnd = random.Random(seed)
    recs, t = [], 1000.0
    for s in range(1, steps + 1):
        b = baseline(s) + rnd.randint(0, noise)
        for k in range(samples_per_step):
            recs.append({"kind": "sample", "t": t + (k + 1) * step_s / (samples_per_step + 1), "step": s - 1,
                         "allocated": b + rnd.randint(activ // 4, activ)})
        t += step_s
        recs.append({"kind": "step", "t": t, "step": s, "allocated": b})
    return recs


def unmarked(baseline, seconds=30.0, every=0.5, noise=40 * MiB, activ=3 * GiB, seed=2, step_s=0.037):
    """No markers, sampled slower than the steps: each sample lands at a random phase of a step."""
    rnd = random.Random(seed)
    recs, t = [], 1000.0
    while t < 1000.0 + seconds:
        s = (t - 1000.0) / step_s
        recs.append({"kind": "sample", "t": t, "step": 0,
                     "allocated": baseline(s) + rnd.randint(0, noise) + rnd.random() * activ})
        t += every
    return recs


def sawtooth(baseline, cycles=60, per_cycle=8, dt=0.05, activ=2 * GiB, noise=8 * MiB, seed=3):
    """No markers, sampled faster than the steps: forward raises, backward lowers, a visible cycle."""
    rnd = random.Random(seed)
    recs, t = [], 1000.0
    for c in range(cycles):
        for k in range(per_cycle):
            phase = k / per_cycle
            recs.append({"kind": "sample", "t": t, "step": 0,
                         "allocated": baseline(c) + activ * math.sin(math.pi * phase) + rnd.randint(0, noise)})
            t += dt
    return recs


def verdict(recs, **kw):
    return growth.assess(recs, "allocated", device_total=80 * GiB, **kw)


# -- healthy patterns ---------------------------------------------------------------------------------------

def test_adamw_state_at_the_first_steps_is_warmup_not_growth():
    g = verdict(stepped(lambda s: 2 * GiB + (4 * GiB if s >= 2 else 0)))
    assert g["leak"] is False and g["warmup_points"] >= 3


def test_cache_filled_once_is_a_step_change_not_a_leak():
    # the case: a fixed 2 GiB cache filled at step 15, then 135 healthy steps
    g = verdict(stepped(lambda s: 3 * GiB + (2 * GiB if s >= 15 else 0)))
    assert g["leak"] is False
    assert g["pattern"] == "step_change"
    assert g["level_shifts"] and g["level_shifts"][0]["bytes"] == pytest.approx(2 * GiB, rel=0.05)


def test_cache_filled_over_two_steps_is_still_one_shift():
    g = verdict(stepped(lambda s: 3 * GiB + (GiB if s >= 40 else 0) + (GiB if s >= 41 else 0)))
    assert g["leak"] is False and g["pattern"] == "step_change"


def test_train_eval_cycles_are_periodic_not_a_leak():
    g = verdict(stepped(lambda s: 3 * GiB + (GiB if s % 20 >= 15 else 0)))
    assert g["leak"] is False and g["pattern"] in ("fluctuating", "step_change")


def test_variable_shapes_fluctuate_without_a_trend():
    rnd = random.Random(9)
    g = verdict(stepped(lambda s: 3 * GiB + rnd.randint(0, 800 * MiB)))
    assert g["leak"] is False and g["pattern"] == "fluctuating"


def test_flat_unmarked_run_sampled_slowly_is_healthy():
    g = verdict(unmarked(lambda s: 5 * GiB))
    assert g["steps_from"] == "time" and g["leak"] is False


def test_model_load_then_training_without_markers_is_not_a_leak():
    # weights move to the GPU during the first 3 s (monotone), then 30 s of flat training
    g = verdict(unmarked(lambda s: min(s * 0.037, 3.0) / 3.0 * 6 * GiB, seconds=33))
    assert g["leak"] is False


def test_healthy_sawtooth_gives_inferred_steps():
    g = verdict(sawtooth(lambda c: 4 * GiB))
    assert g["steps_from"] == "cycles" and g["leak"] is False and g["points"] >= 40


# -- leaks --------------------------------------------------------------------------------------------------

def test_slow_leak_4mib_per_step_is_caught_with_rate_and_projection():
    g = verdict(stepped(lambda s: 3 * GiB + 4 * MiB * s))
    assert g["leak"] is True and g["pattern"] == "steady_growth"
    assert g["rate_per_step"] == pytest.approx(4 * MiB, rel=0.25)
    assert g["rate_per_s"] == pytest.approx(20 * MiB, rel=0.3)  # 0.2 s per step
    full = (80 * GiB - g["last"]) / g["rate_per_step"] + 150
    assert g["projection"]["full_at_step"] == pytest.approx(full, rel=0.05)
    assert g["projection"]["full_in_seconds"] > 0
    assert g["confidence"] in ("high", "medium")


def test_leak_after_a_cache_shift_is_still_a_leak():
    g = verdict(stepped(lambda s: 3 * GiB + (2 * GiB if s >= 15 else 0) + 16 * MiB * s))
    assert g["leak"] is True and g["level_shifts"]


def test_staircase_leak_every_fifth_step_is_not_mistaken_for_shifts():
    g = verdict(stepped(lambda s: 3 * GiB + (s // 5) * 200 * MiB))
    assert g["leak"] is True


def test_recurrent_state_without_detach_grows_faster_than_linear():
    g = verdict(stepped(lambda s: 2 * GiB + int(0.5 * MiB * s * s), steps=80))
    assert g["leak"] is True


def test_leak_in_unmarked_slow_sampled_run_uses_time():
    g = verdict(unmarked(lambda s: 5 * GiB + 2 * MiB * s, seconds=120))  # ~54 MiB/s
    assert g["leak"] is True and g["unit"] == "s" and g["rate_per_step"] is None
    assert g["rate_per_s"] == pytest.approx(2 * MiB / 0.037, rel=0.3)
    assert g["projection"]["full_in_seconds"] > 0


def test_leak_in_sawtooth_is_found_on_inferred_steps():
    g = verdict(sawtooth(lambda c: 4 * GiB + 50 * MiB * c))
    assert g["steps_from"] == "cycles" and g["leak"] is True
    assert g["rate_per_step"] == pytest.approx(50 * MiB, rel=0.2)


def test_short_eval_loop_without_no_grad_fast_sampled():
    # 1.2 s, 120 outputs kept with their graphs: the first seconds are sampled every 50 ms
    recs = [{"kind": "sample", "t": 1000 + 0.05 * i, "step": 0, "allocated": GiB + i * 180 * MiB} for i in range(25)]
    g = verdict(recs)
    assert g["leak"] is True and g["rate_per_s"] == pytest.approx(180 * MiB / 0.05, rel=0.1)


def test_very_short_run_judged_end_against_start():
    recs = [{"kind": "sample", "t": 1000 + 0.5 * i, "step": 0, "allocated": GiB + i * 2 * GiB} for i in range(4)]
    g = verdict(recs)
    assert g["pattern"] == "short_run_growth" and g["leak"] is True and g["confidence"] == "low"


def test_very_short_healthy_run_is_not_a_leak():
    recs = [{"kind": "sample", "t": 1000 + 0.5 * i, "step": 0, "allocated": v}
            for i, v in enumerate([4 * GiB, 6 * GiB, 5 * GiB, 6 * GiB])]
    assert verdict(recs)["leak"] is False


def test_sites_keep_user_lines_only():
    live = [{"source": "/usr/lib/python3/site-packages/torch/nn/modules/linear.py:125 in forward", "bytes": 9 * GiB},
            {"source": "train.py:26 in <module>", "bytes": 6 * GiB, "blocks": 3320},
            {"source": "(no stack recorded)", "bytes": 5 * GiB}, "junk"]
    assert [s["source"] for s in growth.sites(live)] == ["train.py:26 in <module>"]


# -- real recorded runs (H100, validation/results/record) --------------------------------------------------

def test_real_h100_leak_run_is_a_leak_with_sites_and_projection():
    doc = timeline.analyse(rundir.load(FIXTURES / "h100-run-leak"))
    v = doc["verdict"]
    assert v["category"] == "leak_in_code"
    assert v["leak"]["rate_per_step"] == pytest.approx(167 * MiB, rel=0.05)
    assert v["leak"]["confidence"] == "high"
    assert v["leak"]["sites"][0]["source"].endswith("record_leak.py:26 in <module>")
    assert any("device is full at step ~" in e for e in v["evidence"])


@pytest.mark.parametrize("run,category", [("h100-run-oom", "true_capacity"), ("h100-run-fragment", "fragmentation")])
def test_real_h100_oom_runs_are_not_called_leaks(run, category):
    doc = timeline.analyse(rundir.load(FIXTURES / run))
    assert doc["verdict"]["category"] == category
    assert not doc["processes"][0]["leak"]["leak"]


# -- sampled the way the recorder samples (50 ms for 60 samples once CUDA is up, then 500 ms), no markers --

def recorder_sampled(base, duration, step_s, activ, seed, noise=8 * MiB):
    rnd = random.Random(seed)
    ts, t, n = [], 0.0, 0
    while t < duration:
        ts.append(t)
        t += 0.05 if n < 60 else 0.5
        n += 1
    ts.append(duration)  # the last tick, at the end of the run
    recs = []
    for t in ts:
        s = t / step_s
        recs.append({"kind": "sample", "t": 1000 + t, "step": 0,
                     "allocated": base(t, int(s)) + activ * math.sin(math.pi * (s % 1)) + rnd.randint(0, noise)})
    return recs


SAMPLED = {
    "adamw_state_at_step_1": (lambda t, s: GiB + (2 * GiB if s >= 1 else 0), 25, 0.08, 3 * GiB, False),
    "cache_filled_once": (lambda t, s: GiB + (2 * GiB if s >= 15 else 0), 20, 0.1, 2 * GiB, False),
    "train_eval_cycles": (lambda t, s: 1.5 * GiB + (0.3 * GiB if s % 45 >= 30 else 0), 25, 0.04, GiB, False),
    "weights_loaded_then_flat": (lambda t, s: min(t / 2.0, 1) * 4 * GiB, 20, 0.03, GiB, False),
    "1mib_per_fast_step": (lambda t, s: 0.4 * GiB + s * MiB, 8, 0.011, 0.15 * GiB, True),
    "4mib_per_step": (lambda t, s: 0.6 * GiB + 4 * s * MiB, 15, 0.03, 0.5 * GiB, True),
    "gib_per_s_in_a_second": (lambda t, s: 0.2 * GiB + t * 8 * GiB, 1.2, 0.006, 0.05 * GiB, True),
    "outputs_kept_250mib_per_step": (lambda t, s: GiB + s * 250 * MiB, 10, 0.15, GiB, True),
    "staircase_every_10_steps": (lambda t, s: 0.4 * GiB + (s // 10) * 6 * MiB, 20, 0.025, 0.3 * GiB, True),
}


@pytest.mark.parametrize("name", sorted(SAMPLED))
def test_unmarked_runs_sampled_like_the_recorder(name):
    base, duration, step_s, activ, leaks = SAMPLED[name]
    verdicts = [verdict(recorder_sampled(base, duration, step_s, activ, seed))["leak"] for seed in range(6)]
    assert verdicts == [leaks] * 6


def test_an_oom_in_the_first_forward_pass_is_not_a_leak(tmp_path):
    """Without markers, memory rises at every sample while the model loads and runs its first forward,
    until the OOM: that is the job's size (true_capacity), not a leak."""
    import json

    run = tmp_path / "oom-first-step"
    run.mkdir()
    lines = [{"kind": "header", "schema_version": 1, "t": 1000.0, "pid": 7, "label": "pid7"}]
    lines += [{"kind": "sample", "t": 1000.0 + 0.05 * i, "step": 0, "allocated": (i + 1) * 300 * MiB,
               "reserved": (i + 1) * 310 * MiB} for i in range(40)]
    (run / "timeline-pid7.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    (run / "run.json").write_text(json.dumps({"schema_version": 1, "start": 1000.0, "argv": ["python", "t.py"],
                                              "returncode": 1}))
    oom = {"kind": "oom", "label": "pid7", "t": 1002.0, "fatal": True, "requested": 2 * GiB,
           "stats": {"allocated_bytes.all.current": 12 * GiB, "reserved_bytes.all.current": int(12.2 * GiB)},
           "device_limit": 12 * GiB}
    (run / "oom-pid7-1.json").write_text(json.dumps(oom))
    doc = timeline.analyse(rundir.load(run))
    assert doc["processes"][0]["leak"]["leak"] is True  # it did grow ...
    assert doc["verdict"]["category"] == "true_capacity"  # ... but that is not why it died


# -- the idle start, sustained growth, short runs (from the first GPU suite run, docs/validation/record.md) --

def idle_then(active, idle_s=7.0, active_s=10.0, level=300 * MiB, seed=4):
    """The recorder's start: 50 ms samples, the job idle at one level (imports, the first backward's
    library loading), then 500 ms samples of `active(t)` (t from the end of the idle start)."""
    rnd = random.Random(seed)
    recs, t = [], 0.0
    while t < idle_s:
        recs.append({"kind": "sample", "t": 1000 + t, "step": 0, "allocated": level})
        t += 0.05 if t < 3 else 0.5
    while t < idle_s + active_s:
        recs.append({"kind": "sample", "t": 1000 + t, "step": 0,
                     "allocated": level + active(t - idle_s) + rnd.randint(0, 8 * MiB)})
        t += 0.5
    return recs


def test_idle_start_is_found_and_left_out():
    recs = idle_then(lambda t: 0)
    ts, ys = [r["t"] for r in recs], [r["allocated"] for r in recs]
    i = growth.idle_start(ts, ys)
    assert ts[i] - ts[0] == pytest.approx(7.0, abs=0.6)


def test_no_idle_start_when_memory_moves_from_the_start():
    ts = [1000 + 0.1 * i for i in range(100)]
    assert growth.idle_start(ts, [GiB + i * MiB * 3 for i in range(100)]) == 0


def test_leak_after_a_long_idle_start_is_caught():
    # l01's shape: 7 s idle, then 10 s of 300 MiB/s: measured with the idle start it rose in half the run
    g = verdict(idle_then(lambda t: t * 300 * MiB))
    assert g["leak"] is True and g["rate_per_s"] == pytest.approx(300 * MiB, rel=0.15)


def test_healthy_run_after_a_long_idle_start_is_not_a_leak():
    rnd = random.Random(5)
    g = verdict(idle_then(lambda t: GiB + rnd.randint(0, 600 * MiB)))
    assert g["leak"] is False


def test_warmup_ramp_then_plateau_is_not_a_leak_even_when_it_fills_most_of_the_run():
    # cuDNN autotuning: memory climbs for 6.5 s, then holds for 3.5 s; the second half hardly grows
    g = verdict(idle_then(lambda t: min(t, 6.5) * 100 * MiB))
    assert g["leak"] is False


def test_short_run_that_steps_up_then_holds_is_not_a_leak():
    recs = [{"kind": "sample", "t": 1000 + 0.5 * i, "step": 0, "allocated": v}
            for i, v in enumerate([400 * MiB, 2 * GiB, 2 * GiB, 2 * GiB, 2 * GiB])]
    g = verdict(recs)
    assert g["pattern"] == "short_run" and g["leak"] is False


def test_short_run_still_rising_at_the_end_is_growth():
    recs = [{"kind": "sample", "t": 1000 + 0.5 * i, "step": 0, "allocated": v}
            for i, v in enumerate([400 * MiB, 2 * GiB, 5 * GiB, 9 * GiB, 12 * GiB])]
    assert verdict(recs)["pattern"] == "short_run_growth"


def test_a_spike_that_comes_straight_back_is_not_a_level_shift():
    # a DDP run on two H200s (session 27): one step's low-water mark 128 MiB up, the next back, was printed as
    # "level shift of 0 bytes at step 172"
    ys = [GiB] * 30 + [GiB + 128 * MiB] + [GiB] * 30
    adj, shifts, _ = growth._shifts(ys)
    assert shifts == [] and adj == [GiB] * 61
    g = verdict(stepped(lambda s: GiB + (128 * MiB if s == 80 else 0), noise=0, activ=GiB))
    assert g["level_shifts"] == [] and g["leak"] is False and g["pattern"] == "flat"


def test_jumps_running_into_the_end_are_not_a_level_shift():
    ys = [GiB] * 20 + [3 * GiB, 6 * GiB]
    adj, shifts, _ = growth._shifts(ys)
    assert shifts == [] and adj == ys
    ys = [GiB] * 20 + [3 * GiB] * 5
    assert [s["index"] for s in growth._shifts(ys)[1]] == [20]
