"""GIVEN fit.AutoMicroBatch(optimizer, ddp=model) in a DDP loop (processes on the CPU, gloo, torchrun)
WHEN one rank runs out of memory in forward or in backward and the others do not
THEN that rank alone splits its batch, no rank hangs, and every rank ends with the unsplit DDP run's weights,
gradients (None where DDP leaves them None) and buffers; a rank that cannot go on (at its floor, an OOM in the
update, an error in the user's code) makes every rank raise instead of leaving them waiting; DDP features whose
collectives or hooks the pieces would break are refused up front."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "fit"))
from fit_ddp_launch import torchrun  # noqa: E402

from oomdoctor import fit  # noqa: E402
from oomdoctor.injob.fit import ddp as fit_ddp  # noqa: E402
from oomdoctor.workload.oom_exceptions import failure_is_oom, finder_retries  # noqa: E402

WORKER = Path(__file__).parent / "fixtures" / "fit" / "ddp_agreed_worker.py"


def run(mode: str, out: Path, nproc: int = 2) -> list[dict]:
    rc, logs = torchrun(WORKER, mode, out, nproc=nproc)
    assert rc == 0, logs
    return [json.loads((out / f"{mode}-{r}.json").read_text()) for r in range(nproc)]


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    return run("ref", tmp_path_factory.mktemp("ref"))


def same_as(got: list[dict], ref: list[dict]) -> None:
    for g, r in zip(got, ref):
        assert "error" not in g, g["error"]
        torch.testing.assert_close(torch.tensor(g["weights"]), torch.tensor(r["weights"]), rtol=1e-10, atol=1e-12)
        assert g["grad_none"] == r["grad_none"]
        assert g["seen"] == pytest.approx(r["seen"], rel=1e-12)
        if "seen_after_eval" in g:
            assert g["seen_after_eval"] == pytest.approx(r["seen_after_eval"], rel=1e-12)


def test_the_reference_run_is_what_the_checks_assume(ref):
    assert ref[0]["grad_none"][-1] == [False] * 8 + [True, True]  # the unused Linear: weight and bias None
    assert ref[0]["seen"] != ref[1]["seen"]  # each rank adds its own inputs after rank 0's broadcast
    assert ref[1]["seen_after_eval"] == ref[0]["seen"]  # the eval forward broadcasts rank 0's buffer again
    assert ref[0]["weights"] == ref[1]["weights"]


@pytest.mark.parametrize("mode", ["forward", "smallbuckets"])
def test_one_rank_oom_in_forward_is_recovered_on_that_rank_alone(ref, tmp_path, mode):
    got = run(mode, tmp_path)
    same_as(got, ref)
    halves = [(e["micro_batch"], e["new_micro_batch"]) for e in got[0]["events"] if e["action"] == "halve"]
    assert halves == [(16, 8), (8, 4)]
    assert got[1]["events"] == []


def test_one_rank_oom_in_backward_restarts_that_rank(ref, tmp_path):
    got = run("backward", tmp_path)
    same_as(got, ref)
    assert [(e["phase"], e["micro_batch"]) for e in got[1]["events"]] == [("backward", 16)]
    assert got[0]["events"] == []


def test_three_processes(tmp_path):
    ref3, got = run("ref", tmp_path / "ref", nproc=3), run("forward", tmp_path / "fit", nproc=3)
    same_as(got, ref3)
    assert got[1]["events"] == got[2]["events"] == []


def test_accelerate_prepared_model_and_backward(ref, tmp_path):
    pytest.importorskip("accelerate")
    got = run("accelerate", tmp_path)
    same_as(got, ref)
    assert [e["new_micro_batch"] for e in got[0]["events"]] == [8, 4] and got[1]["events"] == []


def test_lightning_manual_optimization_under_its_ddp_strategy(ref, tmp_path):
    pytest.importorskip("lightning")
    got = run("lightning", tmp_path)
    same_as(got, ref)
    assert [e["new_micro_batch"] for e in got[0]["events"]] == [8, 4] and got[1]["events"] == []


def test_parameters_ddp_ignores_keep_their_own_gradient(tmp_path):
    ref_ignored, got = run("ignored-ref", tmp_path), run("ignored", tmp_path)
    same_as(got, ref_ignored)
    assert ref_ignored[0]["weights"] != ref_ignored[1]["weights"]  # the ignored bias moved on rank 0 only


def test_a_rank_at_its_floor_makes_every_rank_raise_with_its_message(tmp_path):
    got = run("floor", tmp_path)
    assert got[0]["error"]["phase"] == "forward" and "floor" in got[0]["error"]["text"]
    peer = got[1]["error"]
    assert peer["type"] == "FitOutOfMemoryError" and peer["phase"] == "peer"
    # rank 0's own OOM message, heard from it: in rank 1's log, for the reader and for `oomdoctor explain`
    assert peer["text"].startswith("rank 0 of this job ran out of memory in forward")
    assert peer["oom_message"] == "CUDA out of memory. Tried to allocate 1.00 GiB."
    assert peer["oom_message"] in peer["text"]


def test_an_oom_in_one_ranks_update_makes_every_rank_raise(tmp_path):
    got = run("optoom", tmp_path)
    assert (got[1]["error"]["phase"], got[1]["error"]["step"]) == ("optimizer", 1)
    assert (got[0]["error"]["phase"], got[0]["error"]["step"]) == ("peer", 1)
    assert got[0]["error"]["text"].startswith("rank 1 of this job ran out of memory in optimizer")


def test_an_error_in_one_ranks_code_makes_every_rank_raise(tmp_path):
    got = run("valueerr", tmp_path)
    assert got[0]["error"]["type"] == "ValueError" and got[0]["error"]["step"] == 1
    peer = got[1]["error"]
    assert (peer["type"], peer["rank"], peer["step"]) == ("FitPeerError", 0, 1)
    assert "ValueError: a bug in the user's code" in peer["text"] and "out of memory" not in peer["text"]


def test_an_error_beside_an_oom_in_the_same_step_wins_on_every_rank(tmp_path):
    got = run("mixed", tmp_path)
    assert got[0]["error"]["type"] == "ValueError" and got[0]["error"]["step"] == 0
    peer = got[1]["error"]  # rank 1 ran out at its floor, but stops with rank 0's error, its own OOM as the cause
    assert (peer["type"], peer["rank"], peer["cause"]) == ("FitPeerError", 0, "FitOutOfMemoryError")
    assert "ValueError: a bug in rank 0's code" in peer["text"] and " out of memory." not in peer["text"]


# -- refusals and the older-torch path, without processes -----------------------------------------------------------
def fake_ddp(**attrs):
    """A DistributedDataParallel object without a process group: only what refusal() and start_step() read."""
    ddp = torch.nn.parallel.DistributedDataParallel.__new__(torch.nn.parallel.DistributedDataParallel)
    torch.nn.Module.__init__(ddp)
    ddp.module = attrs.pop("module", torch.nn.Linear(2, 2))
    for k, v in attrs.items():
        object.__setattr__(ddp, k, v)
    return ddp


@pytest.mark.parametrize("attrs, words", [
    ({"static_graph": True}, "static_graph"),
    ({"mixed_precision": object()}, "mixed_precision"),
    ({"module": torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.SyncBatchNorm(2))}, "SyncBatchNorm"),
    ({"_delay_all_reduce_all_params": True}, "delayed"),
])
def test_ddp_features_that_would_break_are_refused(attrs, words):
    assert words in fit_ddp.refusal(fake_ddp(**attrs))


def test_plain_ddp_and_compiled_wrappers_are_accepted():
    ddp = fake_ddp(static_graph=False, mixed_precision=None)
    assert fit_ddp.refusal(ddp) is None
    assert fit_ddp.unwrap(types.SimpleNamespace(_orig_mod=ddp)) is ddp  # torch.compile's wrapper
    assert "DistributedDataParallel" in fit_ddp.refusal(torch.nn.Linear(2, 2))


def coordinator_for(ddp):
    c = fit_ddp.Coordinator.__new__(fit_ddp.Coordinator)
    c.ddp, c.dist, c.group = ddp, torch.distributed, None
    return c


class OldDDP(torch.nn.parallel.DistributedDataParallel):
    """DDP before torch 2.13: broadcast_buffers a plain attribute, no forward_sync_buffers."""

    broadcast_buffers = True


@pytest.mark.parametrize("old, flag, synced", [(True, True, True), (True, False, False), (False, True, True),
                                               (False, False, False)])
def test_buffers_are_broadcast_at_the_step_start_as_ddp_would(old, flag, synced):
    calls = []
    if old:
        ddp = OldDDP.__new__(OldDDP)
        torch.nn.Module.__init__(ddp)
        object.__setattr__(ddp, "broadcast_buffers", flag)
        assert not hasattr(ddp, "forward_sync_buffers")
    else:
        ddp = fake_ddp(forward_sync_buffers=flag)
    for k, v in {"modules_buffers": [torch.zeros(1)], "_sync_buffers": lambda: calls.append(1),
                 "require_forward_param_sync": True}.items():
        object.__setattr__(ddp, k, v)
    c = coordinator_for(ddp)
    c.start_step()
    assert calls == ([1] if synced else []) and ddp.require_forward_param_sync is False  # not again in a piece
    c.end_step()
    assert ddp.require_forward_param_sync is True  # the next forward outside fit (evaluation) broadcasts, as in DDP


def test_join_is_refused_at_the_step_start():
    c = coordinator_for(fake_ddp(_join_config=types.SimpleNamespace(enable=True)))
    with pytest.raises(RuntimeError, match="join"):
        c.start_step()


def test_a_channels_last_gradient_has_a_contiguous_view_of_its_own_memory():
    g = torch.randn(4, 2, 1, 3).contiguous(memory_format=torch.channels_last)
    assert not g.is_contiguous()
    v = fit_ddp._dense_view(g)
    assert v.is_contiguous() and v.data_ptr() == g.data_ptr() and v.numel() == g.numel()
    v.mul_(2)  # writes through to g
    assert fit_ddp._dense_view(g[:, :, :, :2]) is None  # a slice with gaps has none


# -- what a rank that stops with another says, read by explain ------------------------------------------------------
H200_FLOOR_OOM = (  # rank 0's message in the first two-H200 run (validation/results/fit_ddp_h200x2_s24/run1), cut there
    "CUDA out of memory. Tried to allocate 3.07 GiB. GPU 0 has a total capacity of 139.80 GiB of which 118.75 GiB is "
    "free. Including non-PyTorch memory, this process has 21.04 GiB memory in use. 22.08 GiB allowed; Of the allocated "
    "memory 19.45 GiB is allocated by PyTorch, and 114.87 MiB is reserved by PyTorch but unallocated.")


def test_explain_reads_the_failing_ranks_oom_in_the_stopping_ranks_log():
    from oomdoctor.explain.rank import explain_text
    from oomdoctor.injob.fit.core import peer_error

    err = peer_error(0, True, "forward", H200_FLOOR_OOM, micro=32, floor=32)
    line = f"[rank1]: oomdoctor.injob.fit.core.FitOutOfMemoryError: {err.args[0]}"
    exp = explain_text([line])
    assert exp.category == "gpu_sharing_limit"  # the fraction cap, as for rank 0's own log
    assert "another process" not in err.args[0]  # words explain reads as memory held by someone else


def test_a_stop_for_another_ranks_error_is_no_oom_event():
    from oomdoctor.explain.rank import explain_text
    from oomdoctor.injob.fit.core import FitPeerError, peer_error

    err = peer_error(0, False, "", "ValueError: a bug in the user's code", micro=8, floor=1)
    assert isinstance(err, FitPeerError) and err.rank == 0
    assert not explain_text([f"[rank1]: oomdoctor.injob.fit.core.FitPeerError: {err.args[0]}"]).events


# -- the exchange's arithmetic and the optimizer-step wrapper, with stand-ins -------------------------------------
class RecordingDist:
    """all_reduce(MAX) against the other ranks' contributions; get_global_rank as a subgroup maps it."""

    class ReduceOp:
        MAX = "max"

    def __init__(self, others=(), offset=0):
        self.others, self.offset = list(others), offset

    def all_reduce(self, t, op=None, group=None):
        for o in self.others:
            t.copy_(torch.maximum(t, o))

    def get_global_rank(self, group, rank):
        if self.offset is None:
            raise RuntimeError("not a member")
        return rank + self.offset


def coordinator_at(rank, world, dist):
    c = fit_ddp.Coordinator.__new__(fit_ddp.Coordinator)
    c.dist, c.group, c.rank, c.world, c.params = dist, object(), rank, world, []
    c._status = torch.zeros(2, dtype=torch.int32)
    return c


def agree_all(failures):
    """Every rank's Agreement for one exchange in which rank r failed with failures[r] (None: did not)."""
    world = len(failures)
    sent = []
    for r, f in enumerate(failures):  # what each rank puts in (an all_reduce with nobody else)
        c = coordinator_at(r, world, RecordingDist())
        c.agree(incomplete=False, failure=f, has_grad=None)
        sent.append(c._status.clone())
    return [coordinator_at(r, world, RecordingDist(sent[:r] + sent[r + 1:])).agree(False, f, None)
            for r, f in enumerate(failures)]


def test_the_exchange_names_the_failing_rank_and_prefers_an_error_that_is_no_oom():
    oom, bug = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB."), ValueError("bug")
    for got in (agree_all([oom, bug, oom]),):  # an OOM on the highest rank, another error in the middle
        assert {(a.failed, a.failed_rank, a.failed_oom) for a in got} == {(True, 1, False)}
    assert {(a.failed_rank, a.failed_oom) for a in agree_all([oom, None, oom, None])} == {(2, True)}
    assert {(a.failed, a.failed_rank) for a in agree_all([None, None])} == {(False, None)}
    floor = fit.FitOutOfMemoryError("at the floor", micro_batch=1, floor=1, phase="forward", oom_message="CUDA out "
                                    "of memory.", diagnosis=None)
    assert {(a.failed_rank, a.failed_oom) for a in agree_all([floor, None])} == {(0, True)}  # fit's own OOM error


def test_messages_name_the_rank_as_torchrun_numbers_it_in_a_subgroup():
    assert coordinator_at(1, 2, RecordingDist(offset=4)).global_rank(1) == 5
    assert coordinator_at(1, 2, RecordingDist(offset=None)).global_rank(1) == 1  # unknown: the group's number


class StandInCoordinator:
    def __init__(self, failed_rank=None, failed_oom=True, message="ValueError: bug", offset=0):
        self.calls, self.failed_rank, self.failed_oom, self.message, self.offset = 0, failed_rank, failed_oom, message, offset

    def agree(self, incomplete, failure, has_grad):
        self.calls += 1
        rank = self.failed_rank if self.failed_rank is not None else (0 if failure is not None else None)
        return fit_ddp.Agreement(False, rank, [], failed_oom=self.failed_oom)

    def hear_failure(self, failed_rank, own):
        return (self.failed_oom, "", self.message)

    def global_rank(self, rank):
        return rank + self.offset


def test_an_oom_beside_another_ranks_error_is_raised_as_that_error_which_no_batch_size_finder_retries():
    from accelerate.utils.memory import should_reduce_batch_size

    from oomdoctor.injob.fit import core
    own = fit.FitOutOfMemoryError("floor", micro_batch=16, floor=16, phase="forward",
                                  oom_message="CUDA out of memory. Tried to allocate 1.00 GiB.", diagnosis=None)
    coord = StandInCoordinator(failed_rank=0, failed_oom=False, message="ValueError: a bug", offset=8)
    events: list = []
    err = core.stop_together(coord, coord.agree(False, own, None), own, 16, 16, events)
    assert isinstance(err, fit.FitPeerError) and err.__cause__ is own and err.rank == 8
    assert err.args[0].startswith("rank 8 of this job failed")  # the global rank, not the subgroup's 0
    assert not should_reduce_batch_size(err) and should_reduce_batch_size(RuntimeError(own.oom_message))
    assert events == [{"action": "raise", "phase": "peer", "micro_batch": 16, "rank": 8, "own": "oom"}]
    same = StandInCoordinator(failed_rank=1, failed_oom=True, message="CUDA out of memory.")
    assert core.stop_together(same, same.agree(False, own, None), own, 16, 16, []) is own  # OOMs alone: its own


def agreed_trainer(coord):
    import types as t

    from oomdoctor.injob.fit.hf import MicroBatchTrainerMixin
    net = torch.nn.Linear(2, 1)
    trainer = t.SimpleNamespace(_coordinator=coord, recover_under_ddp=True, micro_batch=4, min_micro_batch=1,
                                oom_events=[], _cycle_open=False, optimizer=DictPickledSGD(net.parameters(), lr=0.1))
    MicroBatchTrainerMixin._agree_after_optimizer_step(trainer)
    return trainer, net


class DictPickledSGD(torch.optim.SGD):
    """Pickles its whole __dict__, as accelerate's AcceleratedOptimizer (the Trainer's optimizer) does."""

    def __getstate__(self):
        return dict(self.__dict__)

    def __setstate__(self, state):
        self.__dict__.update(state)


def test_the_wrapped_optimizer_step_pickles_and_copies_as_the_plain_step():
    import copy
    import io
    import pickle

    from oomdoctor.injob.fit.hf import _AgreedStep
    trainer, net = agreed_trainer(None)
    opt = trainer.optimizer
    assert isinstance(vars(opt)["step"], _AgreedStep)
    for twin in (pickle.loads(pickle.dumps(opt)), copy.deepcopy(opt)):
        assert not isinstance(vars(twin).get("step"), _AgreedStep) and twin.step.__self__ is twin
    torch.save(opt, io.BytesIO())


def test_a_rewrapped_optimizer_step_agrees_once_on_a_failure():
    from oomdoctor.injob.fit.hf import _AgreedStep
    coord = StandInCoordinator()
    trainer, _ = agreed_trainer(coord)

    def failing(*a, **k):
        raise ValueError("bug in the update")

    outer = _AgreedStep(_AgreedStep(failing, trainer, False), trainer, True)  # prepared again: wrapped again
    with pytest.raises(ValueError, match="bug in the update"):
        outer()
    assert coord.calls == 1  # the outer wrapper does not agree again: no rank waits alone in that exchange


class BackendCompilerFailed(RuntimeError):
    """As torch._dynamo raises it: a RuntimeError subclass whose text holds the OOM it wraps."""


@pytest.mark.parametrize("exc, oom", [
    (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB."), True),
    (RuntimeError("CUDA error: out of memory"), True),
    (BackendCompilerFailed("backend='inductor' raised:\nOutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB"),
     True),  # accelerate's finder retries it, so the other ranks must raise what it retries too
    (RuntimeError("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous"),
     True),
    (RuntimeError("CUDA error: an illegal memory access was encountered"), False),
    (ValueError("ran out of memory."), False),  # not a RuntimeError: no finder retries it
    (RuntimeError("a", "CUDA out of memory."), False),  # two arguments: accelerate's finder does not look
])
def test_what_counts_as_an_oom_is_what_a_batch_size_finder_retries(exc, oom):
    from accelerate.utils.memory import should_reduce_batch_size
    assert failure_is_oom(exc) is oom
    assert not should_reduce_batch_size(exc) or oom  # whatever accelerate retries is an OOM to the exchange


def test_an_oom_beside_another_error_says_so_in_words_no_finder_takes_for_an_oom():
    from oomdoctor.injob.fit import core
    own = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB.")
    coord = StandInCoordinator(failed_rank=0, failed_oom=False, message="RuntimeError: CUDA error: an illegal memory "
                               "access was encountered")
    err = core.stop_together(coord, coord.agree(False, own, None), own, 8, 1, [])
    assert isinstance(err, fit.FitPeerError) and not finder_retries(err)


def test_a_new_scheduler_finds_the_optimizer_step_as_it_was_before_fit_wrapped_it():
    from oomdoctor.injob.fit.hf import _AgreedStep, _unwrap_agreed_step
    trainer, net = agreed_trainer(None)
    opt = trainer.optimizer
    assert isinstance(vars(opt)["step"], _AgreedStep)
    _unwrap_agreed_step(opt)
    assert "step" not in vars(opt)  # the class's step again: no instance attribute left
    torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)  # wraps step through its __func__
    scheduled = vars(opt)["step"]
    from oomdoctor.injob.fit.hf import MicroBatchTrainerMixin
    MicroBatchTrainerMixin._agree_after_optimizer_step(trainer)  # fit wraps the scheduler's step
    _unwrap_agreed_step(opt)
    assert vars(opt)["step"] is scheduled  # and gives it back as it found it
