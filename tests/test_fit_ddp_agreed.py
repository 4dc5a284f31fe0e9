"""GIVEN fit.AutoMicroBatch(optimizer, ddp=model) in a DDP loop (two processes, gloo on the CPU, torchrun)
WHEN one rank runs out of memory in forward or in backward and the other does not
THEN that rank alone splits its batch, no rank hangs, and both end with the unsplit DDP run's weights, gradients
(None where DDP leaves them None) and buffers; a rank at its floor makes every rank raise instead of hanging."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "fit"))
from fit_ddp_launch import torchrun  # noqa: E402

WORKER = Path(__file__).parent / "fixtures" / "fit" / "ddp_agreed_worker.py"


def run(mode: str, out: Path) -> list[dict]:
    rc, logs = torchrun(WORKER, mode, out)
    assert rc == 0, logs
    return [json.loads((out / f"{mode}-{r}.json").read_text()) for r in (0, 1)]


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    return run("ref", tmp_path_factory.mktemp("ref"))


def same_as_ref(got: list[dict], ref: list[dict]) -> None:
    for g, r in zip(got, ref):
        assert "error" not in g, g["error"]
        torch.testing.assert_close(torch.tensor(g["weights"]), torch.tensor(r["weights"]), rtol=1e-10, atol=1e-12)
        assert g["grad_none"] == r["grad_none"]
        assert g["seen"] == pytest.approx(r["seen"], rel=1e-12)
    assert ref[0]["weights"] == ref[1]["weights"]  # DDP kept the ranks alike, and so did fit


def test_ref_leaves_the_unused_layer_without_gradient(ref):
    assert ref[0]["grad_none"][-1] == [False] * 6 + [True, True]  # the unused Linear: weight and bias None
    assert ref[0]["seen"] != ref[1]["seen"]  # each rank adds its own inputs after rank 0's broadcast


def test_one_rank_oom_in_forward_is_recovered_on_that_rank_alone(ref, tmp_path):
    got = run("forward", tmp_path)
    same_as_ref(got, ref)
    halves = [(e["micro_batch"], e["new_micro_batch"]) for e in got[0]["events"] if e["action"] == "halve"]
    assert halves == [(16, 8), (8, 4)]
    assert got[1]["events"] == []


def test_accelerate_prepared_model_and_backward(ref, tmp_path):
    pytest.importorskip("accelerate")
    got = run("accelerate", tmp_path)
    same_as_ref(got, ref)
    assert [e["new_micro_batch"] for e in got[0]["events"]] == [8, 4] and got[1]["events"] == []


def test_lightning_manual_optimization_under_its_ddp_strategy(ref, tmp_path):
    pytest.importorskip("lightning")
    got = run("lightning", tmp_path)
    same_as_ref(got, ref)
    assert [e["new_micro_batch"] for e in got[0]["events"]] == [8, 4] and got[1]["events"] == []


def test_one_rank_oom_in_backward_restarts_that_rank(ref, tmp_path):
    got = run("backward", tmp_path)
    same_as_ref(got, ref)
    assert [(e["phase"], e["micro_batch"]) for e in got[1]["events"]] == [("backward", 16)]
    assert got[0]["events"] == []


def test_a_rank_at_its_floor_makes_every_rank_raise(tmp_path):
    got = run("floor", tmp_path)
    assert got[0]["error"]["phase"] == "forward" and "floor" in got[0]["error"]["text"]
    assert got[1]["error"]["phase"] == "peer" and "another process" in got[1]["error"]["text"]
