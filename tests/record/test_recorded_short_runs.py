"""Short runs on the H100 (validation/record_jobs_short*/, 16 jobs of a few seconds): the verdict by
what a run leaves live, by source line or block size, against its looks (analysis/live_growth.py).

short and short2 are TUNING DATA: the live-growth rule was changed after their first runs (the first
run's failures: docs/validation/record.md). short3 was written before the final run and run once
(held out at that run; a fixture now). Archives verbatim from the device; each run is analysed as
`oomdoctor report` does.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oomdoctor.analysis import timeline
from oomdoctor.collectors import rundir

from .synth import unpack_runs

ROOT = Path(__file__).resolve().parents[1] / "fixtures" / "recorded"
SETS = ("suite-h100-short", "suite-h100-short2", "suite-h100-short3")


def _jobs():
    for s in SETS:
        for j in json.loads((ROOT / s / "record_suite.json").read_text())["jobs"]:
            yield s, j["job"], j["expect"]


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory) -> dict[str, Path]:
    return {s: unpack_runs(ROOT / s / "record_runs.tar.gz", tmp_path_factory.mktemp(s)) for s in SETS}


@pytest.mark.parametrize("suite,job,expect", list(_jobs()))
def test_short_run_verdict(unpacked, suite, job, expect):
    doc = timeline.analyse(rundir.load(str(unpacked[suite] / job)))
    assert (doc["verdict"].get("category") == "leak_in_code") is (expect == "leak"), doc["verdict"]["summary"]


def test_the_looks_decide_where_the_curve_alone_did_not(unpacked):
    """sl3 dies of OOM 2 s after a 4 s idle start: the block-size looks (no history) see one size
    gain hundreds of blocks at every look before the OOM; a model loaded once does not."""
    doc = timeline.analyse(rundir.load(str(unpacked["suite-h100-short"] / "sl3_activations_kept_until_oom")))
    live = doc["processes"][0]["leak"]["live_growth"]
    assert live["by"] == "size" and live["leak"] and live["end_is_oom"]
    healthy = timeline.analyse(rundir.load(str(unpacked["suite-h100-short"] / "sh1_load_model_then_short_inference")))
    assert not (healthy["processes"][0]["leak"].get("live_growth") or {}).get("leak")
