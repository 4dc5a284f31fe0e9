"""GIVEN the Hugging Face Trainer with fit's mixin under real DDP (two processes, gloo on the CPU, torchrun)
WHEN steps are split (gradient accumulation 2) or one rank alone OOMs
THEN the split run ends with the unsplit DDP run's weights, entering no_sync once more per extra piece, and the
rank that OOMs raises at once (no retry on one rank, no hang). Skipped without transformers."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("accelerate")

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "fit"))
from fit_ddp_launch import torchrun  # noqa: E402

WORKER = Path(__file__).parent / "fixtures" / "fit" / "ddp_worker.py"


def rows(out: Path, mode: str) -> list[dict]:
    return [json.loads((out / f"{mode}-{r}.json").read_text()) for r in (0, 1) if (out / f"{mode}-{r}.json").exists()]


def test_split_steps_under_ddp_match_the_unsplit_ddp_run(tmp_path):
    for mode in ("ref", "split"):
        rc, logs = torchrun(WORKER, mode, tmp_path)
        assert rc == 0, logs
    ref, split = rows(tmp_path, "ref"), rows(tmp_path, "split")
    assert len(ref) == len(split) == 2
    for r, s in zip(ref, split):
        torch.testing.assert_close(torch.tensor(s["weights"]), torch.tensor(r["weights"]), rtol=1e-5, atol=1e-6)
        assert s["honours"] is False  # asked on the model inside DDP, without a collective
        # 3 steps x 2 accumulation micro-steps x (2 pieces - 1): the mixin's own no_sync, beside the Trainer's
        assert s["no_sync"] - r["no_sync"] == 6


def test_one_rank_oom_raises_without_a_retry_or_a_hang(tmp_path):
    rc, logs = torchrun(WORKER, "oom", tmp_path)
    assert rc != 0, logs
    (row,) = rows(tmp_path, "oom")  # rank 0 only: rank 1 is stopped by torchrun
    assert "one of 2 processes" in row["error"] and "restart with micro_batch=4" in row["error"]


def test_recover_under_ddp_one_rank_splits_alone_and_matches_the_unsplit_run(tmp_path):
    for mode in ("ref", "agreed", "agreed-backward", "agreed-later"):
        rc, logs = torchrun(WORKER, mode, tmp_path)
        assert rc == 0, logs
    ref = rows(tmp_path, "ref")
    assert ref[0]["seen"] != ref[1]["seen"]  # the buffer changes, and differs by rank between broadcasts
    for mode, splitter in (("agreed", 0), ("agreed-backward", 1), ("agreed-later", 0)):
        got = rows(tmp_path, mode)
        assert len(got) == 2
        for r, g in zip(ref, got):
            torch.testing.assert_close(torch.tensor(g["weights"]), torch.tensor(r["weights"]), rtol=1e-5, atol=1e-6)
            assert g["seen"] == pytest.approx(r["seen"], rel=1e-6)  # buffers as DDP broadcasts them
        phase = "backward" if mode == "agreed-backward" else "forward"
        assert [(e["phase"], e["action"], e["new_micro_batch"]) for e in got[splitter]["events"]] == [(phase, "halve", 4)]
        assert got[1 - splitter]["events"] == []


@pytest.mark.parametrize("mode, failing, error, phase, peer", [
    ("agreed-midbwd", 1, "middle of a gradient-accumulation cycle", "backward",
     "rank 1 of this job ran out of memory in backward"),
    ("agreed-valueerr", 0, "a bug in the user's code", None, "rank 0 of this job failed in this step"),
    ("agreed-optoom", 1, "OOM in the optimizer update", "optimizer",
     "rank 1 of this job ran out of memory in optimizer"),
])
def test_recover_under_ddp_a_rank_that_cannot_go_on_stops_both(tmp_path, mode, failing, error, phase, peer):
    rc, logs = torchrun(WORKER, mode, tmp_path)
    assert rc != 0, logs
    got = rows(tmp_path, mode)
    assert len(got) == 2, logs  # both ranks raised and wrote their row: no hang
    assert error in got[failing]["error"] and got[failing]["phase"] == phase
    assert got[1 - failing]["error"].startswith(peer)


def test_recover_under_ddp_a_rank_at_its_floor_stops_every_rank(tmp_path):
    rc, logs = torchrun(WORKER, "agreed-floor", tmp_path)
    assert rc != 0, logs
    got = rows(tmp_path, "agreed-floor")
    assert len(got) == 2, logs  # both ranks raised and wrote their row: no hang, no kill
    assert got[0]["phase"] == "forward" and "floor" in got[0]["error"]
    assert got[1]["phase"] == "peer" and got[1]["error"].startswith("rank 0 of this job ran out of memory in forward")
    assert "CUDA out of memory. Tried to allocate 1.00 GiB." in got[1]["error"]


def test_recover_under_ddp_survives_a_new_scheduler_a_second_train_and_the_batch_size_finders_retry(tmp_path):
    for mode in ("agreed-twice", "agreed-afbs"):
        rc, logs = torchrun(WORKER, mode, tmp_path)
        assert rc == 0, logs
    twice = rows(tmp_path, "agreed-twice")
    assert len(twice) == 2 and twice[0]["weights"] == twice[1]["weights"]  # the second run ended, ranks alike
    afbs = rows(tmp_path, "agreed-afbs")
    assert [r["batch_size"] for r in afbs] == [4, 4]  # every rank was retried at 4, none alone
    assert afbs[0]["events"][0] == {"phase": "forward", "micro_batch": 8, "action": "raise"}
