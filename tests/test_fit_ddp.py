"""GIVEN fit.AutoMicroBatch in a plain DDP loop (two processes, gloo on the CPU, torchrun)
WHEN each batch is split into micro-batches, with and without no_sync=model.no_sync
THEN both end with the unsplit DDP run's weights, and with no_sync the reducer all-reduces once per batch."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "fit"))
from fit_ddp_launch import torchrun  # noqa: E402

WORKER = Path(__file__).parent / "fixtures" / "fit" / "ddp_core_worker.py"


def run(mode: str, out: Path) -> list[dict]:
    rc, logs = torchrun(WORKER, mode, out)
    assert rc == 0, logs
    return [json.loads((out / f"{mode}-{r}.json").read_text()) for r in (0, 1)]


def test_micro_batches_under_ddp_match_and_synchronise_once_per_batch(tmp_path):
    ref, split, every = run("ref", tmp_path), run("split", tmp_path), run("split-sync", tmp_path)
    for r, s, e in zip(ref, split, every):
        for got in (s, e):
            torch.testing.assert_close(torch.tensor(got["weights"]), torch.tensor(r["weights"]), rtol=1e-10,
                                       atol=1e-12)
        buckets = r["allreduces"] // 3  # per batch in the unsplit run
        assert s["allreduces"] == r["allreduces"]  # no_sync: one all-reduce per batch, as unsplit
        assert e["allreduces"] == 4 * r["allreduces"] and buckets >= 1  # without it: every one of 4 pieces
