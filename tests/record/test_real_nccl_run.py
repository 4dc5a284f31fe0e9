"""GIVEN the run directory recorded over NCCL on two H200s (docs/validation/record.md) WHEN reported
THEN the leak is found on rank 1, and only there: a regression test on real GPU data."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "validation/results/record-nccl/run.tar.gz"


def test_nccl_run_flags_the_leak_on_rank_1_only(tmp_path):
    with tarfile.open(RUN) as tar:
        tar.extractall(tmp_path, filter="data")
    out = subprocess.run([sys.executable, "-m", "oomdoctor", "report", str(tmp_path / "nccl-run"), "--format", "json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stderr  # a leak warning was found
    doc = json.loads(out.stdout)
    assert doc["schema_version"] == 1
    text = json.dumps(doc)
    assert "leak_in_code" in text
    plain = subprocess.run([sys.executable, "-m", "oomdoctor", "report", str(tmp_path / "nccl-run")],
                           capture_output=True, text=True, timeout=120).stdout
    assert "rank1: allocated memory at step boundaries grew" in plain
    assert "LEAK" in plain.split("rank 1:")[1].split("\n")[1]
    assert "no steady growth" in plain.split("rank 0:")[1].split("\n")[1]
