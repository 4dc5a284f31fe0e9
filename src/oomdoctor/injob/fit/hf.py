"""`oomdoctor.fit` for the Hugging Face `Trainer`: split a training step into micro-batches on OOM.

`Trainer.training_step` is the documented override point ("Subclass and override to inject custom
behavior"); callbacks cannot retry a step that raised. The mixin splits the step's inputs and calls
the Trainer's own `training_step` on each piece, so its loss (a `compute_loss` override included), its
scaling for gradient accumulation, its `num_items_in_batch` normalisation, AMP and `accelerator.backward`
all stay the Trainer's. Each piece's loss is weighted, at `accelerator.backward`, by its share of the step's
labelled items (of its samples when there are no labels), unless the loss is normalised by the number of
items of the whole accumulated batch (then the pieces add up as they are). The Trainer believes that of every
model whose forward takes **kwargs, but some heads drop `num_items_in_batch` (transformers' sequence
classifiers and others, huggingface/transformers#47688), as may a compute_loss_func or an overridden
compute_loss: the first split asks the loss (compute_loss on the step's most labelled sample, without
gradients, in eval mode, at N and 2N items) and weights the pieces when it does not halve.

    class MyTrainer(MicroBatchTrainerMixin, Trainer):
        pass

    trainer = MyTrainer(model=model, args=args, train_dataset=ds, min_micro_batch=4)

Exactness: an OOM in forward resumes at the piece that failed; an OOM in backward restarts the step
when the gradients were empty when it began (the first step of each accumulation cycle: the Trainer
zeroes them with set_to_none), and otherwise raises, since a partial backward cannot be undone. The batch
is only measured when it must be split: a step that fits runs as the Trainer runs it.
Several processes (DDP through torchrun or accelerate): under plain DDP every piece but the last runs under the
model's `no_sync()` (unless accelerate's sync_each_batch is set), so each rank synchronises its gradients once per
step however it splits. By default a retry after an OOM is refused there (FitOutOfMemoryError naming the
micro-batch to start from): the other ranks are already waiting in a collective that the failed rank would answer
out of order. With `micro_batch=` every rank splits every step alike from the start. With recover_under_ddp=True
every piece runs without DDP's all-reduce, the ranks agree after each Trainer micro-step (fit/ddp.py) and average
the gradients at the cycle's last, so the rank that ran out splits alone; forward and compute_loss must then issue
no collective of their own (TRL's trainers gather metrics in compute_loss: refused). DeepSpeed has its own micro-batching
(`train_micro_batch_size_per_gpu`) and is not supported.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import math
from collections.abc import Mapping
from typing import Any

from oomdoctor.injob.fit import core
from oomdoctor.injob.fit.core import (
    FitOutOfMemoryError,
    _diagnosis,
    _free_cuda_cache,
    batch_size_of,
    first_line_of,
    several_processes_error,
    slice_batch,
)
from oomdoctor.workload.oom_exceptions import is_oom

log = logging.getLogger("oomdoctor.fit")


def _unwrapped(trainer: Any, model: Any) -> Any:
    """The model without DDP (whose forward would broadcast buffers) or torch.compile (which would recompile)."""
    acc = getattr(trainer, "accelerator", None)
    try:
        if acc is not None:
            return acc.unwrap_model(model, keep_torch_compile=False)
    except Exception:  # noqa: BLE001 - older accelerate: no keep_torch_compile
        pass
    return getattr(model, "module", model)


def _ddp_for_no_sync(trainer: Any, model: Any) -> Any:
    """The DDP module whose no_sync() the pieces use, or None: only plain DDP (FSDP would keep unsharded gradients,
    DeepSpeed refuses no_sync), seen through torch.compile (accelerate compiles after wrapping), and not when
    accelerate was told to synchronise every batch."""
    import torch

    ddp = getattr(model, "_orig_mod", model)
    if not isinstance(ddp, torch.nn.parallel.DistributedDataParallel):
        return None
    state = getattr(getattr(trainer, "accelerator", None), "gradient_state", None)
    return None if (getattr(state, "plugin_kwargs", None) or {}).get("sync_each_batch", False) else ddp


def _labelled(batch: Any, shift: bool, key: str = "labels") -> Any:
    """Labelled items per sample (a tensor), or None without labels: what a token- or sample-mean loss divides by."""
    if not isinstance(batch, Mapping):
        return None
    labels = batch.get("shift_labels")
    if labels is None:
        labels = batch.get(key)
        if labels is not None and shift and getattr(labels, "dim", lambda: 0)() > 1:
            labels = labels[..., 1:]
    if labels is None or not hasattr(labels, "ne") or labels.dim() == 0:
        return None
    mask = labels.ne(-100)
    return mask.reshape(mask.shape[0], -1).sum(dim=1) if mask.dim() > 1 else mask.long()


def _shifts_labels(trainer: Any, inner: Any) -> bool:
    """Whether the loss drops the first position of each sample's labels: the Trainer's own flag, or a causal LM
    (which shifts inside the model whatever the flag says; the rule the Trainer's label smoother uses)."""
    if getattr(trainer, "_loss_shifts_labels", False):
        return True
    try:
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    except Exception:  # noqa: BLE001 - without the mapping only the Trainer's flag speaks
        return False
    config = getattr(inner, "config", None)
    return (type(inner).__name__ in set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values())
            and not getattr(config, "is_encoder_decoder", False))


class _OOM:
    """An OOM caught in a step, kept as text only."""

    __slots__ = ("phase", "message")

    def __init__(self, phase: str, message: str):
        self.phase, self.message = phase, message


def _size_or_why(inputs: Any) -> tuple[int | None, str]:
    """The batch's size, or None and why it cannot be split."""
    try:
        return batch_size_of(inputs), ""
    except ValueError as exc:
        return None, str(exc)


def _take(batch: Any, rows: list[int]) -> Any:
    """The samples `rows` of a dict batch (one or two, for the questions asked of the loss)."""
    if len(rows) == 1:
        return slice_batch(batch, rows[0], rows[0] + 1)
    import torch

    parts = [slice_batch(batch, r, r + 1) for r in rows]
    return {k: torch.cat([p[k] for p in parts]) if hasattr(parts[0][k], "dim") and parts[0][k].dim() > 0
            else parts[0][k] for k in parts[0]}


class _AgreedStep:
    """The Trainer optimizer's step followed by the ranks' agreement (recover_under_ddp). Pickled or copied as the
    plain step: a saved or copied optimizer takes no part in this job's exchange (and accelerate's optimizer
    pickles its __dict__, where a closure could not go)."""

    _oomdoctor_agreed = True

    def __init__(self, step: Any, trainer: Any, own: bool):
        self._step, self._trainer = step, trainer
        self._own = own  # the step wrapped was the optimizer's own attribute (an LR scheduler's wrapper), not its class's

    def __call__(self, *a: Any, **k: Any) -> Any:
        trainer, step = self._trainer, self._step
        coord = trainer._coordinator
        if coord is None or not trainer.recover_under_ddp:
            return step(*a, **k)
        failure: BaseException | None = None
        out = None
        try:
            out = step(*a, **k)
        except Exception as exc:
            if core.agreed_on(exc):
                raise  # every rank stopped for it already, in a wrapper underneath (a re-wrapped optimizer)
            failure = core.optimizer_oom_error(str(exc), trainer.micro_batch or 0, trainer.min_micro_batch) \
                if is_oom(exc) else exc
        agreed = coord.agree(incomplete=False, failure=failure, has_grad=None)
        if agreed.failed:
            trainer._cycle_open, trainer._coordinator = False, None
            raise core.stop_together(coord, agreed, failure, trainer.micro_batch or 0, trainer.min_micro_batch,
                                     trainer.oom_events)
        return out

    def __reduce__(self) -> tuple[Any, tuple[Any]]:
        return _plain_step, (self._step,)


def _plain_step(step: Any) -> Any:
    return step


def _unwrap_agreed_step(opt: Any) -> None:
    """The optimizer's step as it was before fit wrapped it: a new LR scheduler (a second train(), the retry of
    auto_find_batch_size) re-wraps the step through its `__func__`, which fit's wrapper has not."""
    for _ in range(8):  # AcceleratedOptimizer -> torch optimizer ...
        wrapper = vars(opt).get("step") if hasattr(opt, "__dict__") else None
        if isinstance(wrapper, _AgreedStep):
            if wrapper._own:
                opt.step = wrapper._step
            else:
                del opt.step
        opt = getattr(opt, "optimizer", None)
        if opt is None:
            return


class MicroBatchTrainerMixin:
    """Mix in before `transformers.Trainer` (or a subclass of it)."""

    def __init__(self, *args: Any, min_micro_batch: int = 1, micro_batch: int | None = None,
                 recover_under_ddp: bool = False, **kwargs: Any):
        super().__init__(*args, **kwargs)
        if min_micro_batch < 1:
            raise ValueError("min_micro_batch must be >= 1")
        self.min_micro_batch, self.micro_batch = min_micro_batch, micro_batch
        self.oom_events: list[dict[str, Any]] = []
        self.recover_under_ddp = recover_under_ddp
        if recover_under_ddp and any(c.__module__.split(".")[0] == "trl" for c in type(self).__mro__):
            raise ValueError("fit: recover_under_ddp cannot be used with TRL's trainers: their compute_loss gathers "
                             "metrics across processes, and a rank that splits calls it more often than the others, "
                             "so the gathers would meet out of order (a hang)")
        self._coordinator: Any = None
        self._cycle_open = False
        self._share = 1.0
        self._phase = "forward"
        self._honours_num_items: bool | None = None  # asked of the loss once, at the first split
        self._reduction_seen: str | None = None  # token / sample / sum, when the loss is not normalised over the batch

    def _label_key(self) -> str:
        names = getattr(self, "label_names", None) or ["labels"]
        return names[0] if len(names) == 1 else "labels"

    def _items(self, model: Any, inputs: Any) -> Any:
        return _labelled(inputs, _shifts_labels(self, _unwrapped(self, model)), self._label_key())

    def _loss_is_global(self, model: Any, inputs: Any, num_items_in_batch: Any) -> bool:
        """True when the loss is normalised by the items of the whole accumulated batch."""
        fixed = getattr(self, "loss_is_scaled_for_ga", None)
        if fixed is not None:
            return bool(fixed)
        if num_items_in_batch is None:
            return False
        if self._honours_num_items is None:
            self._honours_num_items = self._loss_honours_num_items(model, inputs, num_items_in_batch)
        return self._honours_num_items

    def _probe_losses(self, model: Any, inputs: Any, rows: list[list[int]], num_items: list[Any]) -> list[float]:
        """compute_loss of the samples `rows[k]` at num_items_in_batch `num_items[k]`, without gradients, in eval mode
        (no dropout, no batch-norm update), on the unwrapped model (no DDP collective)."""
        import torch

        inner = _unwrapped(self, model)
        was_training = inner.training
        inner.eval()
        try:
            losses = []
            for idx, n in zip(rows, num_items):
                part = _take(inputs, idx)
                part = self._prepare_inputs(part) if hasattr(self, "_prepare_inputs") else part
                with torch.no_grad():
                    out = self.compute_loss(inner, dict(part), num_items_in_batch=n)
                loss = out[0] if isinstance(out, (tuple, list)) else out
                losses.append(float(loss.detach().float().mean()))
                del out, loss
            return losses
        finally:
            self._phase = "forward"
            inner.train(was_training)

    def _loss_honours_num_items(self, model: Any, inputs: Any, num_items: Any) -> bool:
        """Whether the loss the Trainer computes (compute_loss: the model's own loss, a label smoother, a
        compute_loss_func or a subclass's override) is divided by num_items_in_batch: the step's most labelled
        sample at num_items_in_batch = N and 2N. Halved: yes; unchanged: no; anything else (no labelled item, a loss
        of 0, part of the loss scaled) keeps the Trainer's own view. Asked once, at the first split. Without
        recover_under_ddp every rank reaches it at the same step (a retry after an OOM is refused under several
        processes, so ranks split only alike, from micro_batch=), and a compute_loss that gathers across ranks stays
        in step; with it only the rank that splits asks, so compute_loss must not gather (TRL's trainers are
        refused). An OOM is raised as the piece's."""
        trainer_view = bool(getattr(self, "model_accepts_loss_kwargs", False)
                            or getattr(self, "compute_loss_func", None) is not None)
        items = self._items(model, inputs)
        i = int(items.argmax()) if items is not None and len(items) else 0
        try:
            losses = self._probe_losses(model, inputs, [[i], [i]], [num_items, num_items * 2])
        except Exception as exc:  # noqa: BLE001 - a probe must never end the step; the Trainer's view stands
            if is_oom(exc):
                raise  # even one sample does not fit: halved like any forward OOM, asked again
            return trainer_view
        ratio = losses[0] / losses[1] if losses[1] and all(math.isfinite(x) for x in losses) else None
        if ratio is not None and abs(ratio - 2.0) < 0.01:
            return True
        if ratio is not None and abs(ratio - 1.0) < 0.01:
            if trainer_view:
                log.warning("oomdoctor.fit: this loss ignores num_items_in_batch although the Trainer passes it; "
                            "micro-batches are weighted by their share of the batch (the Trainer itself does not "
                            "divide such a loss by gradient_accumulation_steps: huggingface/transformers#47688; set "
                            "trainer.model_accepts_loss_kwargs = False to have it do so)")
            return False
        if ratio is not None:
            log.warning("oomdoctor.fit: only part of this loss follows num_items_in_batch (loss ratio %.3f at N "
                        "and 2N items, an auxiliary loss perhaps); the pieces are added as the Trainer's view says "
                        "(%s), which over-counts the part that does not follow it", ratio,
                        "normalised" if trainer_view else "not normalised")
        return trainer_view

    def _reduction(self, model: Any, inputs: Any, num_items: Any) -> str:
        """How a loss that is not normalised over the accumulated batch reduces a batch: "token" (a mean over labelled
        items), "sample" (a mean over samples, e.g. CTC's per-target-length mean) or "sum". Learnt once from two
        samples a, b with different label counts: L(ab) against (na La + nb Lb) / (na + nb), (La + Lb) / 2, La + Lb.
        Undecided: "token" where the samples carry item counts, else "sample"."""
        if self._reduction_seen is not None:
            return self._reduction_seen
        items = self._items(model, inputs)
        fallback = "token" if items is not None and int(items.sum()) > 0 else "sample"
        order = sorted(range(len(items)), key=lambda k: -int(items[k])) if items is not None else []
        a = order[0] if order else 0
        b = next((k for k in order if int(items[k]) != int(items[a]) and int(items[k]) > 0), None) if order else None
        if b is None:
            b = 1 if a != 1 and batch_size_of(inputs) > 1 else None
        if b is None:
            return fallback  # one sample: nothing to learn from, asked again at the next split
        try:
            la, lb, lab = self._probe_losses(model, inputs, [[a], [b], [a, b]], [num_items] * 3)
        except Exception as exc:  # noqa: BLE001 - a probe must never end the step
            if is_oom(exc):
                raise
            self._reduction_seen = fallback
            return fallback
        na, nb = (int(items[a]), int(items[b])) if items is not None else (1, 1)
        candidates = {"token": (na * la + nb * lb) / (na + nb) if na + nb else None, "sample": (la + lb) / 2,
                      "sum": la + lb}
        fits = [k for k, v in candidates.items()
                if v is not None and math.isfinite(lab) and math.isclose(lab, v, rel_tol=1e-3, abs_tol=1e-9)]
        if "token" in fits and na != nb:
            fits = ["token"]
        self._reduction_seen = fits[0] if len(fits) == 1 or (fits and fits[0] == "token") else fallback
        if not fits:
            log.warning("oomdoctor.fit: this loss is neither a mean over labelled items, a mean over samples nor a "
                        "sum (two samples gave %.6g and %.6g, together %.6g); micro-batches are weighted as a %s mean",
                        la, lb, lab, fallback)
        return self._reduction_seen

    def train(self, *args: Any, **kwargs: Any) -> Any:
        """A new training run starts with no accumulation cycle open and no DDP module held (model_init, a search)."""
        self._cycle_open, self._coordinator = False, None
        return super().train(*args, **kwargs)  # type: ignore[misc]

    def create_scheduler(self, num_training_steps: int, optimizer: Any = None) -> Any:
        """A new scheduler wraps the optimizer's step: it must find the step as it was before fit wrapped it (fit wraps
        it again at the next synchronised micro-step)."""
        for opt in (optimizer, getattr(self, "optimizer", None)):
            if opt is not None:
                _unwrap_agreed_step(opt)
        return super().create_scheduler(num_training_steps, optimizer)  # type: ignore[misc]

    def training_step(self, model: Any, inputs: Any, num_items_in_batch: Any = None, *args: Any, **kwargs: Any) -> Any:
        if self.recover_under_ddp and core._world_size() > 1:
            return self._training_step_agreed(model, inputs, num_items_in_batch, args, kwargs)
        clean_start = all(p.grad is None for p in model.parameters())
        n = batch_size_of(inputs) if self.micro_batch else None  # measured only when the step must be split
        micro = min(self.micro_batch, n) if n else None
        self._done, self._total = 0, 0.0
        while True:
            oom = self._attempt(model, inputs, n, micro, num_items_in_batch, args, kwargs)
            if not isinstance(oom, _OOM):
                return oom
            world = core._world_size()
            if world > 1:
                why = ""
                if n is None:
                    n, why = _size_or_why(inputs)
                self.oom_events.append({"phase": oom.phase, "micro_batch": micro or n, "action": "raise"})
                if n is None:
                    raise self._unsplittable(oom, why)
                micro = micro or n
                raise several_processes_error(oom.phase, micro, min(self.min_micro_batch, n), self.min_micro_batch,
                                              world, oom.message)
            n, micro = self._recover(model, inputs, n, micro, oom, clean_start)

    def _attempt(self, model: Any, inputs: Any, n: int | None, micro: int | None, num_items: Any, args: tuple,
                 kwargs: dict) -> Any:
        """The step's loss, or an _OOM: the exception is dropped here, with the graph its traceback pinned."""
        oom = None
        try:
            return self._pieces(model, inputs, n, micro, num_items, args, kwargs)
        except Exception as exc:
            if not is_oom(exc):
                raise
            oom = _OOM(self._phase, str(exc))
        finally:
            self._share = 1.0
        gc.collect()
        _free_cuda_cache()
        return oom

    def _unsplittable(self, oom: _OOM, why: str) -> FitOutOfMemoryError:
        return FitOutOfMemoryError(
            f"OOM in {oom.phase}, and this batch cannot be split into micro-batches ({why}). "
            f"{first_line_of(oom.message)}", micro_batch=0, floor=self.min_micro_batch, phase=oom.phase,
            oom_message=oom.message, diagnosis=_diagnosis(oom.message))

    def _recover(self, model: Any, inputs: Any, n: int | None, micro: int | None, oom: _OOM,
                 clean_start: bool) -> tuple[int, int]:
        """The (n, micro) to go on with after an OOM, or FitOutOfMemoryError: unsplittable, mid-cycle, floor."""
        if n is None:
            n, why = _size_or_why(inputs)
            if n is None:
                self.oom_events.append({"phase": oom.phase, "micro_batch": None, "action": "raise"})
                raise self._unsplittable(oom, why)
            micro = n
        assert micro is not None
        if oom.phase == "backward":
            if not clean_start:
                self.oom_events.append({"phase": oom.phase, "micro_batch": micro, "action": "raise"})
                raise FitOutOfMemoryError(
                    "OOM in backward in the middle of a gradient-accumulation cycle: the partial gradients "
                    "cannot be undone. Use gradient_accumulation_steps=1 with a larger per-device batch, or "
                    f"start from micro_batch={max(self.min_micro_batch, micro // 2)}. {first_line_of(oom.message)}",
                    micro_batch=micro, floor=self.min_micro_batch, phase=oom.phase, oom_message=oom.message,
                    diagnosis=_diagnosis(oom.message))
            model.zero_grad(set_to_none=True)
            self._done, self._total = 0, 0.0
        return n, self._shrink(micro, n, oom.phase, oom.message)

    def _training_step_agreed(self, model: Any, inputs: Any, num_items: Any, args: tuple, kwargs: dict) -> Any:
        """recover_under_ddp: every piece without DDP's all-reduce; the ranks agree after each Trainer micro-step
        (wait for a rank still splitting, or all raise), and average gradients at the accumulation cycle's last one."""
        from oomdoctor.injob.fit.ddp import Coordinator
        ddp = _ddp_for_no_sync(self, model)
        if ddp is None:
            raise ValueError("fit: recover_under_ddp needs the model wrapped in plain DistributedDataParallel (not "
                             "FSDP or DeepSpeed, and not accelerate's sync_each_batch)")
        if self._coordinator is None or self._coordinator.ddp is not ddp:  # a new DDP (model_init, a re-wrap)
            self._coordinator, self._cycle_open = Coordinator(ddp), False
        coord = self._coordinator
        if not self._cycle_open:  # DDP's buffer broadcast, once per optimizer step, outside the pieces
            coord.start_step()
            self._cycle_open = True
        sync = bool(getattr(self.accelerator, "sync_gradients", True))
        clean_start = all(p.grad is None for p in model.parameters())
        n, micro = None, None
        self._done, self._total = 0, 0.0
        loss, failure, finished, has_grad = None, None, False, None
        try:  # measured where an error is heard by every rank (only ranks that split before measure)
            n = batch_size_of(inputs) if self.micro_batch else None
            micro = min(self.micro_batch, n) if n else None
        except Exception as exc:
            failure = exc
        while True:
            if not finished and failure is None:
                try:
                    coord.quiet()  # no piece's forward may broadcast buffers on its own (DDP's pre-forward sync)
                    with coord.no_sync():
                        got = self._attempt(model, inputs, n, micro, num_items, args, kwargs)
                except Exception as exc:  # not an OOM: every rank must hear of it, then it is raised
                    failure, got = exc, None
                if failure is not None:
                    pass
                elif isinstance(got, _OOM):
                    try:
                        n, micro = self._recover(model, inputs, n, micro, got, clean_start)
                    except FitOutOfMemoryError as exc:  # every rank must hear of it before it is raised
                        failure = exc
                else:
                    loss, finished = got, True
                    if sync:
                        try:
                            has_grad = coord.complete_grads()
                        except Exception as exc:
                            failure = exc if not is_oom(exc) else core.gradients_oom_error(
                                str(exc), micro or 0, self.min_micro_batch)
            agreed = coord.agree(incomplete=not finished and failure is None, failure=failure,
                                 has_grad=has_grad)
            if agreed.failed:
                self._cycle_open, self._coordinator = False, None  # the DDP (and its buckets) is not kept alive by fit
                model.zero_grad(set_to_none=True)
                raise core.stop_together(coord, agreed, failure, micro or 0, self.min_micro_batch,
                                         self.oom_events)
            if not agreed.incomplete:
                break
        if sync:
            coord.average(agreed.has_grad)
            coord.end_step()
            self._cycle_open = False
            self._agree_after_optimizer_step()
        return loss

    def _agree_after_optimizer_step(self) -> None:
        """The Trainer steps the optimizer itself, after this micro-step: its step is wrapped (once) so that every
        rank agrees after it, and an OOM there on one rank stops every rank instead of leaving them to the timeout."""
        opt = getattr(self, "optimizer", None)
        if opt is None or getattr(opt.step, "_oomdoctor_agreed", False):  # wrapped already (also through a re-wrap)
            return
        opt.step = _AgreedStep(opt.step, self, own="step" in vars(opt))

    def _pieces(self, model: Any, inputs: Any, n: int | None, micro: int | None, num_items: Any, args: tuple,
                kwargs: dict) -> Any:
        """The Trainer's own training_step on each piece from self._done on (on the whole batch when n is None);
        each piece's loss scaled by its share at accelerator.backward; returns the step's loss."""
        acc = self.accelerator
        backward = acc.backward

        def weighted_backward(loss: Any, **kw: Any) -> Any:
            self._phase = "backward"
            return backward(loss * self._share if self._share != 1.0 else loss, **kw)

        own = vars(acc).get("backward")  # an instance attribute someone else set: put back below
        acc.backward = weighted_backward
        try:
            if n is None or micro is None or micro >= n:
                self._phase, self._share = "forward", 1.0
                return super().training_step(model, inputs, num_items, *args, **kwargs)  # type: ignore[misc]
            if "lomo" in str(getattr(getattr(self, "args", None), "optim", "")).lower():
                raise ValueError("fit: LOMO optimizers update the weights inside backward, so a step cannot be split "
                                 "into micro-batches; lower per_device_train_batch_size instead")
            self._phase = "forward"
            global_loss = self._loss_is_global(model, inputs, num_items)
            how = "sum" if global_loss else self._reduction(model, inputs, num_items)
            items = self._items(model, inputs) if how == "token" else None
            weights = items if items is not None and int(items.sum()) > 0 else None
            ddp = _ddp_for_no_sync(self, model)
            while self._done < n:
                stop = min(self._done + micro, n)
                self._phase = "forward"
                if weights is not None and int(weights[self._done:stop].sum()) == 0:
                    self._done = stop  # no labelled item: its mean would be 0/0, and it adds nothing
                    continue
                last = stop >= n or (weights is not None and int(weights[stop:].sum()) == 0)
                piece = slice_batch(inputs, self._done, stop)
                if how == "sum":
                    self._share = 1.0
                elif weights is not None:  # a mean over labelled items: the piece's share of them
                    self._share = float(weights[self._done:stop].sum()) / float(weights.sum())
                else:
                    self._share = (stop - self._done) / n
                # DDP: gradients are all-reduced after the last piece run only, once per step whatever the split
                with ddp.no_sync() if ddp is not None and not last else contextlib.nullcontext():
                    loss = super().training_step(model, piece, num_items, *args, **kwargs)  # type: ignore[misc]
                self._total = self._total + loss * self._share
                self._done = stop
            return self._total
        finally:
            if own is not None:
                acc.backward = own
            else:
                del acc.backward

    def _shrink(self, micro: int, n: int, phase: str, message: str) -> int:
        floor = min(self.min_micro_batch, n)
        if micro <= floor:
            self.oom_events.append({"phase": phase, "micro_batch": micro, "action": "raise"})
            diag = _diagnosis(message)
            raise FitOutOfMemoryError(
                f"OOM at the floor micro-batch {micro} (min_micro_batch={self.min_micro_batch}) in {phase}: "
                f"{first_line_of(message)}" + (f" | diagnosis: {diag}" if diag else ""),
                micro_batch=micro, floor=floor, phase=phase, oom_message=message, diagnosis=diag)
        new = max(floor, math.ceil(micro / 2))
        self.micro_batch = new
        self.oom_events.append({"phase": phase, "micro_batch": micro, "action": "halve", "new_micro_batch": new})
        log.warning("oomdoctor.fit: OOM in %s at micro-batch %d; retrying with micro-batch %d x %d pieces per "
                    "Trainer step (per-device batch %d unchanged)", phase, micro, new, math.ceil(n / new), n)
        return new
