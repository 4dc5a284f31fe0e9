"""GIVEN a Hugging Face Trainer with oomdoctor's MicroBatchTrainerMixin WHEN its model OOMs above a
micro-batch size THEN training ends with the same weights as the unsplit Trainer (CPU; skipped
without transformers)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from oomdoctor import fit  # noqa: E402


class Tiny(torch.nn.Module):
    def __init__(self, limit=None, where="forward"):
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
        self.limit, self.seen, self.where = limit, [], where

    def forward(self, x, labels=None):
        self.seen.append(len(x))
        too_big = self.limit is not None and self.training and len(x) > self.limit
        if too_big and self.where == "forward":
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB.")
        logits = self.net(x)
        if too_big:  # OOM half-way through backward: the last layer's gradients are already accumulated
            def boom(grad):
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB.")
            hidden = self.net[1](self.net[0](x))
            hidden.register_hook(boom)
            logits = self.net[2](hidden)
        return {"loss": torch.nn.functional.cross_entropy(logits, labels), "logits": logits}


class Data(torch.utils.data.Dataset):
    def __init__(self):
        g = torch.Generator().manual_seed(3)
        self.x, self.y = torch.randn(96, 6, generator=g), torch.randint(0, 3, (96,), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"x": self.x[i], "labels": self.y[i]}


def train(tmp_path, trainer_cls, model, ga=1, **extra):
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=16, gradient_accumulation_steps=ga, max_steps=4,
        learning_rate=1e-2, report_to=[], save_strategy="no", logging_strategy="no", use_cpu=True, seed=7,
        dataloader_num_workers=0)
    trainer = trainer_cls(model=model, args=args, train_dataset=Data(), **extra)
    trainer.train()
    return trainer, [p.detach().clone() for p in model.parameters()]


class Split(fit.MicroBatchTrainerMixin, transformers.Trainer):
    pass


@pytest.mark.parametrize("ga", [1, 2])
def test_trainer_with_split_steps_matches_unsplit(tmp_path, ga):
    _, ref = train(tmp_path / "ref", transformers.Trainer, Tiny(), ga=ga)
    model = Tiny(limit=5)
    trainer, got = train(tmp_path / "split", Split, model, ga=ga, min_micro_batch=2)
    assert [e["action"] for e in trainer.oom_events] == ["halve", "halve"]  # 16 -> 8 -> 4
    assert trainer.micro_batch == 4 and max(model.seen[-3:]) <= 4
    for p, q in zip(got, ref):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def test_trainer_floor_raises(tmp_path):
    with pytest.raises(fit.FitOutOfMemoryError, match="floor micro-batch 8"):
        train(tmp_path, Split, Tiny(limit=5), min_micro_batch=8)


def test_backward_oom_at_the_start_of_a_cycle_restarts_exactly(tmp_path):
    _, ref = train(tmp_path / "ref", transformers.Trainer, Tiny())
    trainer, got = train(tmp_path / "split", Split, Tiny(limit=5, where="backward"), min_micro_batch=2)
    assert {e["phase"] for e in trainer.oom_events} == {"backward"}
    for p, q in zip(got, ref):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def test_backward_oom_mid_accumulation_raises_rather_than_corrupt(tmp_path):
    model = Tiny(limit=100, where="backward")
    model.limit = None

    class Late(Split):
        calls = 0

        def training_step(self, *a, **k):
            Late.calls += 1
            model.limit = 5 if Late.calls == 2 else None  # the second micro-step of the first cycle
            return super().training_step(*a, **k)

    with pytest.raises(fit.FitOutOfMemoryError, match="middle of a gradient-accumulation cycle"):
        train(tmp_path, Late, model, ga=2, min_micro_batch=2)


class Syncing(Tiny):
    """Stands in for DDP's no_sync(): records, per forward, whether gradients would be synchronised."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.sync, self.synced = True, []

    def no_sync(self):
        import contextlib

        @contextlib.contextmanager
        def off():
            before, self.sync = self.sync, False
            try:
                yield
            finally:
                self.sync = before
        return off()

    def forward(self, x, labels=None):
        if self.training:
            self.synced.append(self.sync)
        return super().forward(x, labels)


def test_pieces_but_the_last_do_not_synchronise(tmp_path):
    _, ref = train(tmp_path / "ref", transformers.Trainer, Tiny())
    model = Syncing()
    trainer, got = train(tmp_path / "split", Split, model, micro_batch=4)
    assert model.synced == [False, False, False, True] * 4  # 4 steps of 16 in pieces of 4: one sync per step
    assert trainer.oom_events == []
    for p, q in zip(got, ref):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def test_no_retry_when_several_processes_train(tmp_path, monkeypatch):
    from oomdoctor.injob.fit import hf

    monkeypatch.setattr(hf, "_world_size", lambda: 2)
    model = Tiny(limit=5)
    with pytest.raises(fit.FitOutOfMemoryError, match=r"one of 2 processes.*micro_batch=8") as err:
        train(tmp_path, Split, model, min_micro_batch=2)
    assert err.value.phase == "forward" and err.value.micro_batch == 16
    assert model.seen == [16]  # not retried on this rank alone
