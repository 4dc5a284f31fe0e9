"""GIVEN a small model trained with oomdoctor.fit WHEN OOMs are injected above a micro-batch size
THEN losses and weights match the unsplit run, the floor raises with a diagnosis, nothing loops."""

from __future__ import annotations

import logging
import sys

import pytest

torch = pytest.importorskip("torch")

from oomdoctor import fit  # noqa: E402
from oomdoctor.workload.oom_exceptions import is_oom  # noqa: E402

N_STEPS, BATCH = 8, 32


def make(seed=0, dropout=False):
    torch.manual_seed(seed)
    layers = [torch.nn.Linear(10, 32), torch.nn.Tanh(), torch.nn.Linear(32, 3)]
    model = torch.nn.Sequential(*layers).double()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(BATCH, 10, generator=g, dtype=torch.float64),
             torch.randint(0, 3, (BATCH,), generator=g)) for _ in range(N_STEPS)]
    return model, opt, data


class FakeOOM:
    """Raises a real torch.OutOfMemoryError whenever a micro-batch is larger than `threshold`."""

    def __init__(self, model, threshold, where="forward"):
        self.model, self.threshold, self.where, self.raised, self.sizes = model, threshold, where, 0, []

    def __call__(self, mb):
        x, y = mb
        self.sizes.append(len(x))
        if self.where == "forward" and len(x) > self.threshold:
            self.raised += 1
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                                         "capacity of 15.77 GiB of which 1.12 GiB is free.")
        out = self.model(x)
        loss = torch.nn.functional.cross_entropy(out, y)
        if self.where == "backward" and len(x) > self.threshold:
            def hook(grad, self=self):
                self.raised += 1
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB.")
            loss.register_hook(hook)
        return loss


def reference_run():
    model, opt, data = make()
    losses = []
    for x, y in data:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("threshold,where", [(8, "forward"), (5, "forward"), (16, "backward"), (3, "backward")])
def test_split_training_matches_unsplit_run(threshold, where, caplog):
    ref_losses, ref_weights = reference_run()
    model, opt, data = make()
    runner = fit.AutoMicroBatch(opt)
    loss_fn = FakeOOM(model, threshold, where)
    losses = []
    with caplog.at_level(logging.WARNING, logger="oomdoctor.fit"):
        for batch in data:
            losses.append(float(runner.step(loss_fn, batch)))
    assert loss_fn.raised >= 1
    assert runner.micro_batch <= threshold
    assert max(loss_fn.sizes[-N_STEPS:]) <= threshold  # once split, it stays split
    assert losses == pytest.approx(ref_losses, rel=1e-12, abs=1e-12)
    for p, q in zip(model.parameters(), ref_weights):
        torch.testing.assert_close(p.detach(), q, rtol=1e-10, atol=1e-12)
    assert any("retrying with micro-batch" in r.getMessage() for r in caplog.records)
    halves = [e for e in runner.events if e["action"] == "halve"]
    assert halves and halves[0]["micro_batch"] == BATCH and halves[0]["phase"] == where


def test_uneven_split_weights_samples_not_chunks():
    """33 samples split 17+16: each micro-batch loss weighted by its share, as the full mean."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1).double()
    x, y = torch.randn(33, 4, dtype=torch.float64), torch.randn(33, 1, dtype=torch.float64)
    ref = torch.nn.functional.mse_loss(model(x), y)
    ref.backward()
    ref_grad = model.weight.grad.clone()
    model.weight.grad = None
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0: keep weights, inspect grads via hook
    grads = []
    runner = fit.AutoMicroBatch(opt, micro_batch=17, before_step=lambda o: grads.append(model.weight.grad.clone()))
    loss = runner.step(lambda mb: torch.nn.functional.mse_loss(model(mb[0]), mb[1]), (x, y))
    assert float(loss) == pytest.approx(float(ref.detach()), rel=1e-12)
    torch.testing.assert_close(grads[0], ref_grad, rtol=1e-12, atol=1e-14)


def test_floor_reached_raises_with_the_oom_and_no_loop():
    model, opt, data = make()
    loss_fn = FakeOOM(model, threshold=2)
    runner = fit.AutoMicroBatch(opt, min_micro_batch=4)
    with pytest.raises(fit.FitOutOfMemoryError) as exc:
        runner.step(loss_fn, data[0])
    err = exc.value
    assert err.micro_batch == 4 and err.floor == 4 and err.phase == "forward"
    assert "floor micro-batch 4" in str(err) and "CUDA out of memory" in str(err)
    assert err.__cause__ is None and err.__context__ is None  # the failed step's frames are not kept
    # 32 -> 16 -> 8 -> 4, then raise: four attempts, never more
    assert loss_fn.raised == 4
    assert [e["action"] for e in runner.events] == ["halve", "halve", "halve", "raise"]


def test_no_retry_when_several_processes_train(monkeypatch):
    """Under torch.distributed a retry on one rank alone would put its collectives out of step with the others'."""
    from oomdoctor.injob.fit import core

    monkeypatch.setattr(core, "_world_size", lambda: 4)
    model, opt, data = make()
    loss_fn = FakeOOM(model, threshold=8)
    runner = fit.AutoMicroBatch(opt, min_micro_batch=2)
    with pytest.raises(fit.FitOutOfMemoryError, match=r"one of 4 processes.*micro_batch=16") as exc:
        runner.step(loss_fn, data[0])
    assert exc.value.micro_batch == BATCH and exc.value.__context__ is None
    assert loss_fn.raised == 1 and [e["action"] for e in runner.events] == ["raise"]


def test_several_processes_at_the_floor_do_not_suggest_the_same_size(monkeypatch):
    from oomdoctor.injob.fit import core

    monkeypatch.setattr(core, "_world_size", lambda: 2)
    model, opt, data = make()
    runner = fit.AutoMicroBatch(opt, micro_batch=4, min_micro_batch=4)
    with pytest.raises(fit.FitOutOfMemoryError, match="micro-batch 4 is the floor") as exc:
        runner.step(FakeOOM(model, threshold=2), data[0])
    assert "restart with" not in str(exc.value)


def test_no_growth_under_several_processes(monkeypatch, caplog):
    from oomdoctor.injob.fit import core

    monkeypatch.setattr(core, "_world_size", lambda: 2)
    model, opt, data = make()
    runner = fit.AutoMicroBatch(opt, micro_batch=8, grow_after=1)
    with caplog.at_level(logging.WARNING, logger="oomdoctor.fit"):
        for batch in data[:3]:
            runner.step(FakeOOM(model, threshold=BATCH), batch)
    assert runner.micro_batch == 8 and not [e for e in runner.events if e["action"] == "grow"]
    assert sum("grow_after is ignored" in r.getMessage() for r in caplog.records) == 1


def test_world_size_reads_the_process_group(tmp_path):
    import torch.distributed as dist

    from oomdoctor.injob.fit import core

    assert core._world_size() == 1
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0, world_size=1)
    try:
        monkey = dist.get_world_size
        dist.get_world_size = lambda *a, **k: 3  # a one-process group standing in for three
        assert core._world_size() == 3
    finally:
        dist.get_world_size = monkey
        dist.destroy_process_group()


def test_floor_diagnosis_comes_from_explain_when_installed(monkeypatch):
    import types

    from oomdoctor.injob import fit as fit_mod

    mod = types.ModuleType("oomdoctor.explain.rank")

    class H:
        category, confidence, evidence, fixes = "true_capacity", 0.9, ["asked 2.00 GiB"], ["smaller batch"]

    mod.explain_text = lambda lines, facts: types.SimpleNamespace(hypotheses=[H()], lines=list(lines))
    monkeypatch.setitem(sys.modules, "oomdoctor.explain.rank", mod)
    model, opt, data = make()
    with pytest.raises(fit_mod.FitOutOfMemoryError) as exc:
        fit_mod.AutoMicroBatch(opt, min_micro_batch=32).step(FakeOOM(model, 2), data[0])
    assert "true_capacity" in exc.value.diagnosis and "smaller batch" in str(exc.value)


def test_optimizer_oom_is_not_retried():
    model, opt, data = make()

    def boom():
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 MiB.")

    opt.step = boom
    runner = fit.AutoMicroBatch(opt)
    with pytest.raises(fit.FitOutOfMemoryError, match="optimizer update"):
        runner.step(lambda mb: torch.nn.functional.cross_entropy(model(mb[0]), mb[1]), data[0])


def test_other_errors_propagate_untouched():
    model, opt, data = make()
    runner = fit.AutoMicroBatch(opt)
    with pytest.raises(ValueError, match="shape"):
        runner.step(lambda mb: (_ for _ in ()).throw(ValueError("bad shape")), data[0])
    # a RuntimeError that merely mentions memory is not an OOM
    with pytest.raises(RuntimeError, match="pinned"):
        runner.step(lambda mb: (_ for _ in ()).throw(RuntimeError("out of memory? no: pinned buffer misuse")), data[0])
    assert runner.events == []


def test_grow_back_after_clean_steps_with_backoff():
    model, opt, data = make()
    loss_fn = FakeOOM(model, threshold=16)
    runner = fit.AutoMicroBatch(opt, grow_after=2)
    for batch in data:
        runner.step(loss_fn, batch)
    actions = [e["action"] for e in runner.events]
    assert actions[:3] == ["halve", "grow", "halve"]
    # after a failed growth the wait doubles: grows happen at widening intervals, never every step
    grow_steps = [e["step"] for e in runner.events if e["action"] == "grow"]
    assert all(b - a >= 2 for a, b in zip(grow_steps, grow_steps[1:]))
    assert len(grow_steps) < len(data)


def test_module_level_step_keeps_state_per_optimizer_and_dict_batches():
    torch.manual_seed(0)
    model = torch.nn.Linear(6, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    calls = []

    def loss_fn(mb):
        calls.append(len(mb["x"]))
        if len(mb["x"]) > 5:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory.")
        return model(mb["x"]).pow(2).mean() + 0 * mb["meta"]

    batch = {"x": torch.randn(12, 6), "meta": torch.tensor(1.0)}
    fit.step(loss_fn, batch, opt)
    fit.step(loss_fn, batch, opt)
    assert calls[:4] == [12, 6, 3, 3] and set(calls[4:]) == {3}


@pytest.mark.parametrize("exc,expected", [
    (RuntimeError("CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported"), True),
    (RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"), True),
    (RuntimeError("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input."), True),
    (RuntimeError("Expected all tensors to be on the same device; out of memory maybe"), False),
    (RuntimeError("CUDA error: an illegal memory access was encountered"), False),
    (ValueError("CUDA error: out of memory"), False),
])
def test_oom_detection_by_type_and_documented_texts(exc, expected):
    assert is_oom(exc) is expected
    assert is_oom(torch.OutOfMemoryError("anything")) is True


def test_bad_batches_and_options():
    opt = torch.optim.SGD(torch.nn.Linear(1, 1).parameters(), lr=0.1)
    with pytest.raises(ValueError, match="leading sizes"):
        fit.AutoMicroBatch(opt).step(lambda mb: None, (torch.zeros(3, 1), torch.zeros(4)))
    with pytest.raises(ValueError):
        fit.AutoMicroBatch(opt, min_micro_batch=0)
    with pytest.raises(ValueError):
        fit.AutoMicroBatch(opt, loss_reduction="median")


def test_floor_diagnosis_from_the_real_explain():
    pytest.importorskip("oomdoctor.explain.rank")
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    msg = ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.18 GiB of which "
           "1.12 GiB is free. Including non-PyTorch memory, this process has 78.05 GiB memory in use. Of the "
           "allocated memory 75.20 GiB is allocated by PyTorch, and 2.31 GiB is reserved by PyTorch but "
           "unallocated.")

    def loss_fn(mb):
        raise torch.OutOfMemoryError(msg)

    with pytest.raises(fit.FitOutOfMemoryError) as exc:
        fit.AutoMicroBatch(opt, min_micro_batch=2).step(loss_fn, torch.randn(4, 4))
    assert "fragmentation" in exc.value.diagnosis and "expandable_segments" in str(exc.value)
