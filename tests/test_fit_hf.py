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


def test_pieces_but_the_last_do_not_synchronise(tmp_path, monkeypatch):
    from oomdoctor.injob.fit import hf

    monkeypatch.setattr(hf, "_ddp_for_no_sync", lambda trainer, model: model if hasattr(model, "no_sync") else None)
    _, ref = train(tmp_path / "ref", transformers.Trainer, Tiny())
    model = Syncing()
    trainer, got = train(tmp_path / "split", Split, model, micro_batch=4)
    assert model.synced == [False, False, False, True] * 4  # 4 steps of 16 in pieces of 4: one sync per step
    assert trainer.oom_events == []
    for p, q in zip(got, ref):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def test_no_retry_when_several_processes_train(tmp_path, monkeypatch):
    from oomdoctor.injob.fit import core

    monkeypatch.setattr(core, "_world_size", lambda: 2)
    model = Tiny(limit=5)
    with pytest.raises(fit.FitOutOfMemoryError, match=r"one of 2 processes.*micro_batch=8") as err:
        train(tmp_path, Split, model, min_micro_batch=2)
    assert err.value.phase == "forward" and err.value.micro_batch == 16
    assert model.seen == [16]  # not retried on this rank alone


def _tiny_llama(kind):
    cfg = transformers.LlamaConfig(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=4, pad_token_id=0, num_labels=3)
    torch.manual_seed(0)
    return (transformers.LlamaForSequenceClassification if kind == "cls" else transformers.LlamaForCausalLM)(cfg)


class Tokens(torch.utils.data.Dataset):
    """Causal-LM labels cut at random lengths, so that samples carry different numbers of items."""

    def __init__(self, kind):
        g = torch.Generator().manual_seed(1)
        self.kind, self.x = kind, torch.randint(1, 100, (64, 16), generator=g)
        self.y, self.lab = torch.randint(0, 3, (64,), generator=g), self.x.clone()
        for i, k in enumerate(torch.randint(4, 16, (64,), generator=g).tolist()):
            self.lab[i, k:] = -100

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"input_ids": self.x[i], "labels": self.y[i] if self.kind == "cls" else self.lab[i]}


def _sgd_args(tmp_path, ga=1):
    """SGD without clipping: a wrong loss scale shows in the weights (clipping and AdamW hide it)."""
    return transformers.TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=16, gradient_accumulation_steps=ga, max_steps=3,
        learning_rate=0.1, optim="sgd", max_grad_norm=0.0, report_to=[], save_strategy="no", logging_strategy="no",
        use_cpu=True, seed=7, disable_tqdm=True)


def _weights(trainer_cls, model, args, data=None, **extra):
    """Train; the trainer and the model's weights, flat."""
    trainer = trainer_cls(model=model, args=args, train_dataset=data if data is not None else Data(), **extra)
    trainer.train()
    return trainer, torch.cat([p.detach().flatten() for p in model.parameters()])


def _train_hf(tmp_path, trainer_cls, kind, ga=1, **extra):
    return _weights(trainer_cls, _tiny_llama(kind), _sgd_args(tmp_path, ga), Tokens(kind), **extra)


@pytest.mark.parametrize("kind", ["cls", "lm"])
@pytest.mark.parametrize("ga", [1, 2])
def test_transformers_heads_split_like_the_unsplit_trainer(tmp_path, kind, ga):
    """The classifier's forward takes **kwargs but drops num_items_in_batch (transformers#47688): its pieces must be
    weighted; the causal LM's loss is normalised over the whole batch: its pieces must not be."""
    _, ref = _train_hf(tmp_path / "ref", transformers.Trainer, kind, ga)
    trainer, got = _train_hf(tmp_path / "split", Split, kind, ga, micro_batch=4)
    assert trainer._honours_num_items is (kind == "lm")
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)


class Normed(torch.nn.Module):
    """A forward that takes **kwargs and drops num_items_in_batch, with batch norm: the probe must not count."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.BatchNorm1d(16), torch.nn.Linear(16, 3))

    def forward(self, x, labels=None, **kwargs):
        logits = self.net(x)
        return {"loss": torch.nn.functional.cross_entropy(logits, labels), "logits": logits}


def test_the_probe_leaves_no_trace_in_the_model(tmp_path):
    model = Normed()
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=16, max_steps=2, report_to=[], save_strategy="no",
        logging_strategy="no", use_cpu=True, seed=7, disable_tqdm=True)
    trainer = Split(model=model, args=args, train_dataset=Data(), micro_batch=4)
    trainer.train()
    assert trainer.model_accepts_loss_kwargs and trainer._honours_num_items is False
    assert int(model.net[1].num_batches_tracked) == 8  # 2 steps x 4 pieces: the probe's forwards not counted
    assert model.training


def test_no_sync_only_under_plain_ddp(tmp_path):
    import torch.distributed as dist

    from oomdoctor.injob.fit import hf

    class Acc:
        class gradient_state:  # noqa: N801 - accelerate's attribute names
            plugin_kwargs = {"sync_each_batch": False}

    trainer = type("T", (), {"accelerator": Acc()})()
    assert hf._ddp_for_no_sync(trainer, Syncing()) is None  # has no_sync, is not DDP
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0, world_size=1)
    try:
        ddp = torch.nn.parallel.DistributedDataParallel(Tiny())
        assert hf._ddp_for_no_sync(trainer, ddp) is ddp

        class Compiled:  # what torch.compile puts around a module: DDP found through _orig_mod
            _orig_mod = ddp
        assert hf._ddp_for_no_sync(trainer, Compiled()) is ddp
        Acc.gradient_state.plugin_kwargs = {"sync_each_batch": True}
        assert hf._ddp_for_no_sync(trainer, ddp) is None
    finally:
        dist.destroy_process_group()


class TupleOut(Tiny):
    """A forward that takes **kwargs, drops num_items_in_batch and returns a tuple, as older heads do."""

    def forward(self, x, labels=None, **kwargs):
        out = super().forward(x, labels)
        return out["loss"], out["logits"]


def test_tuple_outputs_are_weighted(tmp_path):
    _, ref = _weights(transformers.Trainer, TupleOut(), _sgd_args(tmp_path / "ref"))
    trainer, got = _weights(Split, TupleOut(), _sgd_args(tmp_path / "split"), micro_batch=4)
    assert trainer._honours_num_items is False
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)


class LogitsOnly(Tiny):
    def forward(self, x, labels=None, **kwargs):
        return {"logits": self.net(x)}


@pytest.mark.parametrize("divides", [True, False])
@pytest.mark.parametrize("ga", [1, 2])
def test_compute_loss_func_is_asked_too(tmp_path, divides, ga):
    """A compute_loss_func that ignores num_items_in_batch (a plain mean) is the same trap as a head that drops it."""
    def loss_func(outputs, labels, num_items_in_batch=None):
        logits = outputs["logits"]
        if divides:
            return torch.nn.functional.cross_entropy(logits, labels, reduction="sum") / num_items_in_batch
        return torch.nn.functional.cross_entropy(logits, labels)

    _, ref = _weights(transformers.Trainer, LogitsOnly(), _sgd_args(tmp_path / "ref", ga), compute_loss_func=loss_func)
    trainer, got = _weights(Split, LogitsOnly(), _sgd_args(tmp_path / "split", ga), compute_loss_func=loss_func,
                            micro_batch=4)
    assert trainer._honours_num_items is divides
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)


def test_the_probe_after_a_real_oom_in_train_mode(tmp_path):
    """The first split comes from an OOM: the probe then runs with the model in train mode and must leave it so."""
    class Big(Normed):
        def forward(self, x, labels=None, **kwargs):
            if self.training and len(x) > 5:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB.")
            return super().forward(x, labels)

    _, ref = _weights(transformers.Trainer, Normed(), _sgd_args(tmp_path / "ref"))
    model = Big()
    trainer, got = _weights(Split, model, _sgd_args(tmp_path / "split"), min_micro_batch=2)
    assert [e["action"] for e in trainer.oom_events] == ["halve", "halve"] and trainer._honours_num_items is False
    assert model.training and int(model.net[1].num_batches_tracked) == 3 * 4  # 3 steps x 4 pieces of 4


class OwnLoss(Split):
    """The Trainer docs' custom-loss pattern: compute_loss overridden without calling super()."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        out = model(inputs["x"])
        loss = torch.nn.functional.cross_entropy(out["logits"], inputs["labels"])
        return (loss, out) if return_outputs else loss


class LogitsTiny(Tiny):
    def forward(self, x, labels=None, **kwargs):
        too_big = self.limit is not None and self.training and len(x) > self.limit
        hidden = self.net[1](self.net[0](x))
        if too_big:  # OOM half-way through backward
            def boom(grad):
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB.")
            hidden.register_hook(boom)
        return {"logits": self.net[2](hidden)}


class Plain(transformers.Trainer):
    compute_loss = OwnLoss.compute_loss


@pytest.mark.parametrize("where", ["preset", "backward-oom"])
def test_a_compute_loss_override_is_weighted_and_its_backward_seen(tmp_path, where):
    _, ref = _weights(Plain, LogitsTiny(), _sgd_args(tmp_path / "ref"))
    model = LogitsTiny(limit=5 if where == "backward-oom" else None)
    extra = {"micro_batch": 4} if where == "preset" else {"min_micro_batch": 2}
    trainer, got = _weights(OwnLoss, model, _sgd_args(tmp_path / "split"), **extra)
    if where == "backward-oom":
        assert {e["phase"] for e in trainer.oom_events} == {"backward"}
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)


class TokenData(torch.utils.data.Dataset):
    """Token labels with -100 at random places: samples carry different numbers of labelled items."""

    def __init__(self):
        g = torch.Generator().manual_seed(5)
        self.x = torch.randint(1, 100, (64, 12), generator=g)
        self.y = torch.randint(0, 3, (64, 12), generator=g)
        self.y[torch.rand(64, 12, generator=g) < torch.linspace(0.05, 0.9, 64)[:, None]] = -100

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"input_ids": self.x[i], "labels": self.y[i]}


def _unsplit_and_split(tmp_path, model, data, micro, ga=1):
    """The plain Trainer's weights and the mixin's with micro_batch=`micro`, each from a fresh model and dataset."""
    _, ref = _weights(transformers.Trainer, model(), _sgd_args(tmp_path / "ref", ga), data())
    trainer, got = _weights(Split, model(), _sgd_args(tmp_path / "split", ga), data(), micro_batch=micro)
    return trainer, got, ref


@pytest.mark.parametrize("ga", [1, 2])
def test_a_token_mean_head_is_weighted_by_labelled_items(tmp_path, ga):
    """BertForTokenClassification averages over its labelled tokens and drops num_items_in_batch."""
    def model():
        torch.manual_seed(0)
        return transformers.BertForTokenClassification(transformers.BertConfig(
            vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_labels=3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))

    trainer, got, ref = _unsplit_and_split(tmp_path, model, TokenData, 3, ga)
    assert trainer._honours_num_items is False
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)


def test_an_unlabelled_first_sample_does_not_decide(tmp_path):
    """The question is asked of the step's most labelled sample: a causal LM whose first sample has no label."""
    class Blank(Tokens):
        def __getitem__(self, i):
            row = super().__getitem__(i)
            if i % 4:  # three samples in four have no label: the first of a step most likely among them
                row["labels"] = torch.full_like(row["labels"], -100)
            return row

    trainer, got, ref = _unsplit_and_split(tmp_path, lambda: _tiny_llama("lm"), lambda: Blank("lm"), 4)
    assert trainer._honours_num_items is True
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)


def test_a_batch_that_cannot_be_split_trains_while_it_fits(tmp_path):
    """Packed batches carry tensors of other leading sizes (cu_seq_lens): measured only when a split is needed."""
    class Packed(Data):
        def __getitem__(self, i):
            return {**super().__getitem__(i), "meta": torch.zeros(3)}

    def collate(rows):
        batch = torch.utils.data.default_collate([{k: v for k, v in r.items() if k != "meta"} for r in rows])
        batch["meta"] = torch.zeros(3)  # leading size 3, not the batch's
        return batch

    class MetaTiny(Tiny):
        def forward(self, x, labels=None, meta=None, **kwargs):
            return super().forward(x, labels)

    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=16, max_steps=2, report_to=[], save_strategy="no",
        logging_strategy="no", use_cpu=True, seed=7, disable_tqdm=True, remove_unused_columns=False)
    Split(model=MetaTiny(), args=args, train_dataset=Packed(), data_collator=collate).train()
    model = MetaTiny(limit=5)
    with pytest.raises(fit.FitOutOfMemoryError, match="cannot be split"):
        Split(model=model, args=args, train_dataset=Packed(), data_collator=collate).train()


class SeqTagger(torch.nn.Module):
    """Token tags with its own reduction: over labelled tokens ("token"), per sample then over samples ("sample", as
    CTC's "mean"), or a sum; the labels under `key`."""

    def __init__(self, reduction="token", key="labels"):
        super().__init__()
        torch.manual_seed(0)
        self.emb, self.head = torch.nn.Embedding(100, 16), torch.nn.Linear(16, 3)
        self.reduction, self.key = reduction, key

    def forward(self, input_ids, labels=None, tags=None, **kwargs):
        labels = tags if self.key == "tags" else labels
        logits = self.head(torch.tanh(self.emb(input_ids)))
        per = torch.nn.functional.cross_entropy(logits.transpose(1, 2), labels, reduction="none", ignore_index=-100)
        mask = labels.ne(-100)
        if self.reduction == "token":
            loss = per.sum() / mask.sum()
        elif self.reduction == "sample":
            loss = (per.sum(1) / mask.sum(1).clamp(min=1)).mean()
        else:
            loss = per.sum()
        return {"loss": loss, "logits": logits}


class Tags(TokenData):
    def __init__(self, key="labels", blank_every=None):
        super().__init__()
        self.key = key
        if blank_every:
            self.y[::blank_every] = -100

    def __getitem__(self, i):
        return {"input_ids": self.x[i], self.key: self.y[i]}


@pytest.mark.parametrize("reduction,key,blank,ga", [
    ("token", "labels", 4, 1),  # pieces with no labelled item: skipped, not 0/0
    ("token", "tags", None, 2),  # labels under label_names
    ("sample", "labels", None, 1),  # a mean of per-sample means (CTC's "mean")
    ("sum", "labels", None, 2),
])
def test_the_loss_reduction_is_learnt(tmp_path, reduction, key, blank, ga):
    def run(cls, out, **extra):
        args = _sgd_args(out, ga)
        args.learning_rate = 0.05 if reduction == "sum" else 0.1
        if key != "labels":
            args.label_names = [key]
        return _weights(cls, SeqTagger(reduction, key), args, Tags(key, blank), **extra)

    _, ref = run(transformers.Trainer, tmp_path / "ref")
    trainer, got = run(Split, tmp_path / "split", micro_batch=2)
    assert torch.isfinite(got).all()
    assert trainer._reduction_seen == reduction
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)


def test_causal_lms_shift_their_labels_whatever_the_trainers_flag():
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50))
    tagger = transformers.BertForTokenClassification(transformers.BertConfig(
        vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2))
    from oomdoctor.injob.fit import hf

    plain = type("T", (), {})()
    assert hf._shifts_labels(plain, gpt2) and not hf._shifts_labels(plain, tagger)
    flagged = type("T", (), {"_loss_shifts_labels": True})()
    assert hf._shifts_labels(flagged, tagger)


def test_recover_under_ddp_refuses_trl_trainers(tmp_path):
    """TRL's compute_loss gathers metrics across processes: a rank splitting alone would call it out of step."""
    sft = type("SFTTrainer", (transformers.Trainer,), {"__module__": "trl.trainer.sft_trainer"})
    mine = type("Mine", (fit.MicroBatchTrainerMixin, sft), {})
    with pytest.raises(ValueError, match="TRL"):
        train(tmp_path, mine, Tiny(), recover_under_ddp=True)
    train(tmp_path, mine, Tiny())  # without the flag it trains (no DDP here)
