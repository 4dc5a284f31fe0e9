"""`oomdoctor.fit`: survive an OOM inside the training loop without changing what is learned.

On OOM the step's micro-batch is halved and gradient accumulation doubled, so the effective batch,
the loss (each micro-batch weighted by its share of the batch) and the single optimizer update per
batch stay those of the unsplit step. What the failed attempt held is dropped (references, partial
gradients, gc, the allocator's cache) before the retry; the change is logged as a warning; the
micro-batch never goes below the floor; each retry strictly shrinks it, so a step cannot loop
forever (facebookresearch/metaseq#304), and an OOM at the floor raises with a diagnosis. Under
torch.distributed with several processes an OOM is retried only with ddp=<the DDP module> (the ranks agree once
per round and average gradients themselves: fit/ddp.py); otherwise one rank retrying alone would desynchronise
the collectives, so it raises with the micro_batch to restart with.

    from oomdoctor import fit
    mb = fit.AutoMicroBatch(optimizer, min_micro_batch=4)
    for x, y in loader:
        loss = mb.step(lambda b: F.cross_entropy(model(b[0]), b[1]), (x, y))

torch is imported lazily; importing this module costs nothing.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import math
import sys
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from oomdoctor.workload.oom_exceptions import failure_is_oom, first_line, is_oom

log = logging.getLogger("oomdoctor.fit")

__all__ = ["AutoMicroBatch", "FitOutOfMemoryError", "FitPeerError", "step", "batch_size_of", "slice_batch", "is_oom"]


class FitOutOfMemoryError(RuntimeError):
    """An OOM that halving cannot fix: at the floor, or outside forward/backward (optimizer.step)."""

    def __init__(self, message: str, *, micro_batch: int, floor: int, phase: str, oom_message: str,
                 diagnosis: str | None):
        super().__init__(message)
        self.micro_batch, self.floor, self.phase = micro_batch, floor, phase
        self.oom_message, self.diagnosis = oom_message, diagnosis


def batch_size_of(batch: Any) -> int:
    """Length of the leading dimension shared by every tensor in a (nested) batch."""
    sizes: set[int] = set()

    def walk(obj: Any) -> None:
        if hasattr(obj, "shape") and hasattr(obj, "dim"):
            if obj.dim() > 0:
                sizes.add(int(obj.shape[0]))
        elif isinstance(obj, Mapping):
            for v in obj.values():
                walk(v)
        elif isinstance(obj, (tuple, list)):
            for v in obj:
                walk(v)

    walk(batch)
    if len(sizes) != 1:
        raise ValueError(f"fit: cannot split this batch: tensors have leading sizes {sorted(sizes) or 'none'}; "
                         "pass batch_size= and split= for custom batch types")
    return sizes.pop()


def slice_batch(batch: Any, start: int, stop: int) -> Any:
    """The same structure with every tensor cut to [start:stop] along dim 0; other leaves unchanged."""
    if hasattr(batch, "shape") and hasattr(batch, "dim"):
        return batch[start:stop] if batch.dim() > 0 else batch
    if isinstance(batch, Mapping):
        items = {k: slice_batch(v, start, stop) for k, v in batch.items()}
        try:
            return type(batch)(items)
        except Exception:  # noqa: BLE001 - mapping types without a dict constructor
            return items
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # namedtuple
        return type(batch)(*(slice_batch(v, start, stop) for v in batch))
    if isinstance(batch, (tuple, list)):
        return type(batch)(slice_batch(v, start, stop) for v in batch)
    return batch


def _world_size() -> int:
    """Processes in torch.distributed's default group (1 when it is not in use); torch is not imported here."""
    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None)
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_world_size())
    except Exception:  # noqa: BLE001 - a broken group reads as one process; the training loop reports it itself
        pass
    return 1


def several_processes_error(phase: str, micro: int, floor: int, min_micro_batch: int, world: int,
                            message: str, ddp_hint: bool = False) -> FitOutOfMemoryError:
    """Several processes: a retry on one rank alone would answer the other ranks' collectives out of order (two
    H200s: the job hung until the process group's timeout), so the restart is left to the user, with a number."""
    diag = _diagnosis(message)
    if micro <= floor:
        advice = (f"micro-batch {micro} is the floor (min_micro_batch={min_micro_batch}): smaller micro-batches are "
                  "not allowed, so the step needs less memory another way")
    else:
        advice = (f"restart with micro_batch={max(floor, math.ceil(micro / 2))} (min_micro_batch={min_micro_batch}): "
                  "every rank then splits each step alike")
    if ddp_hint:
        advice += ("; or pass ddp=<the DistributedDataParallel module> to AutoMicroBatch, and any rank that runs out "
                   "splits on its own")
    return FitOutOfMemoryError(
        f"OOM in {phase} at micro-batch {micro} in one of {world} processes: a retry in this process alone would put "
        f"its collectives out of step with the rest of the job, so it is not attempted; {advice}. "
        f"{first_line_of(message)}"
        + (f" | diagnosis: {diag}" if diag else ""),
        micro_batch=micro, floor=floor, phase=phase, oom_message=message, diagnosis=diag)


class FitPeerError(RuntimeError):
    """Another rank of the job failed with an error that is not an OOM; this rank stops with it (no hang)."""

    def __init__(self, message: str, *, rank: int, error: str):
        super().__init__(message)
        self.rank, self.error = rank, error


def peer_error(rank: int, was_oom: bool, phase: str, message: str, micro: int, floor: int) -> RuntimeError:
    """The error of a rank that stops because rank `rank` failed: that rank's own message in this rank's log."""
    if not was_oom:
        return FitPeerError(f"rank {rank} of this job failed in this step, so this rank stops with it rather than "
                            f"wait for the process group's timeout. Rank {rank}: {first_line_of(message)}",
                            rank=rank, error=message)
    diag = _diagnosis(message) if message else None
    where = f" in {phase}" if phase else ""
    return FitOutOfMemoryError(
        f"rank {rank} of this job ran out of memory{where} and could not go on, so this rank stops with it rather "
        f"than wait for the process group's timeout. Rank {rank}: {message.strip()}"
        + (f" | diagnosis: {diag}" if diag else ""),
        micro_batch=micro, floor=floor, phase="peer", oom_message=message, diagnosis=diag)


def optimizer_oom_error(message: str, micro: int, floor: int) -> FitOutOfMemoryError:
    """An OOM in the update: smaller micro-batches cannot shrink optimizer state, and the update may be partial."""
    return FitOutOfMemoryError(
        f"OOM in the optimizer update (after all micro-batches): smaller micro-batches cannot help, and the update "
        f"may be partial. {first_line_of(message)}", micro_batch=micro, floor=floor, phase="optimizer",
        oom_message=message, diagnosis=_diagnosis(message))


def gradients_oom_error(message: str, micro: int, floor: int) -> FitOutOfMemoryError:
    """ddp=: an OOM making the average's room (zeros for unused parameters, the buckets): smaller pieces cannot help."""
    return FitOutOfMemoryError(
        f"OOM while preparing the gradients' average across processes (zeros for parameters this rank did not use, "
        f"{BUCKET_MIB} MiB buckets): {first_line_of(message)}", micro_batch=micro, floor=floor, phase="gradients",
        oom_message=message, diagnosis=_diagnosis(message))


def stop_together(coord: Any, agreed: Any, own: BaseException | None, micro: int, floor: int,
                  events: list[dict[str, Any]], step: int | None = None) -> BaseException:
    """What a rank raises once the exchange said a rank failed: its own error, or the failing rank's, heard from
    it (every rank takes part in that one broadcast). An error that is not an OOM wins over an OOM in the same
    exchange: a rank that ran out then raises the other rank's error, its own OOM as the cause, so that no
    batch-size finder retries on this rank while that one has stopped."""
    was_oom, phase, message = coord.hear_failure(agreed.failed_rank, own)
    rank = coord.global_rank(agreed.failed_rank)
    own_oom = own is not None and failure_is_oom(own)
    if own is not None and (not own_oom or agreed.failed_oom):  # its own error, unless an OOM beside another error
        return _agreed_on(own)
    event = {"action": "raise", "phase": "peer", "micro_batch": micro, "rank": rank}
    if own is not None:
        event["own"] = "oom"
    events.append(event if step is None else {"step": step, **event})
    err = peer_error(rank, was_oom, phase, message, micro, floor)
    if own is not None:
        err = FitPeerError(f"{err} This rank had also hit an OOM in the same step (the cause below); it stops with "
                           "the other rank's error, so that nothing retries this rank alone.",
                           rank=rank, error=message)
        err.__cause__ = own
    return _agreed_on(err)


def _agreed_on(exc: BaseException) -> BaseException:
    """Marked as stopped for by every rank: a wrapper around it (a second optimizer-step wrapper) must not agree on
    it again, or this rank would wait alone in that exchange."""
    try:
        exc._oomdoctor_agreed = True  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - an exception type with slots: raised as is
        pass
    return exc


def agreed_on(exc: BaseException) -> bool:
    return bool(getattr(exc, "_oomdoctor_agreed", False))


def _free_cuda_cache() -> None:
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


BUCKET_MIB = 25  # fit/ddp.py's buckets, named in a message

_RUNNER_UP_MIN = 0.2  # a second cause this likely is named beside the first


def _diagnosis(oom_message: str) -> str | None:
    """One paragraph from oomdoctor's explain, when it is installed; None otherwise."""
    try:
        from oomdoctor.explain.rank import explain_text  # type: ignore[import-not-found]
    except ImportError:
        return None
    try:
        exp = explain_text(oom_message.splitlines(), None)
        hyps = getattr(exp, "hypotheses", None) or (exp.get("hypotheses") if isinstance(exp, Mapping) else None)
        if not hyps:
            return str(exp)
        def field(h: Any, k: str) -> Any:
            v = h.get(k) if isinstance(h, Mapping) else getattr(h, k, None)
            return getattr(v, "value", v) if k == "category" else v

        h = hyps[0]
        parts = [f"most likely cause: {field(h, 'category')} (confidence {field(h, 'confidence')})"]
        parts += [f"evidence: {e}" for e in (field(h, "evidence") or [])[:3]]
        parts += [f"fix: {f}" for f in (field(h, "fixes") or [])[:3]]
        if len(hyps) > 1 and (field(hyps[1], "confidence") or 0) >= _RUNNER_UP_MIN:
            # a close second (explain's ambiguous answers) is named with its own first fix
            r = hyps[1]
            parts.append(f"or: {field(r, 'category')} (confidence {field(r, 'confidence')})")
            parts += [f"fix: {f}" for f in (field(r, "fixes") or [])[:1]]
        return "; ".join(str(p) for p in parts)
    except Exception as exc:  # noqa: BLE001 - a diagnosis must never replace the OOM itself
        return f"(explain failed: {type(exc).__name__})"


class AutoMicroBatch:
    """One optimizer update per batch, split into micro-batches as memory requires.

    `loss_fn(micro_batch)` returns the loss of that micro-batch: its mean over the samples
    (loss_reduction="mean", the default) or its sum ("sum"). `backward` replaces `loss.backward()`
    (Lightning: `self.manual_backward`, Accelerate: `accelerator.backward`). `before_step(optimizer)`
    runs after the gradients are complete (gradient clipping; with a GradScaler unscale there first).
    `grow_after=K` tries twice the micro-batch again after K clean steps; a failed growth doubles K.
    `no_sync()` returns a context in which backward does not all-reduce (DDP: `model.no_sync`; Lightning:
    `self.trainer.strategy.block_backward_sync`; Accelerate: `lambda: accelerator.no_sync(model)`): every
    micro-batch but the last runs in it, so gradients are synchronised once per batch.
    """

    def __init__(self, optimizer: Any, *, micro_batch: int | None = None, min_micro_batch: int = 1,
                 grow_after: int | None = None, loss_reduction: str = "mean", scaler: Any = None,
                 backward: Callable[[Any], Any] | None = None, before_step: Callable[[Any], Any] | None = None,
                 batch_size: Callable[[Any], int] | None = None,
                 split: Callable[[Any, int, int], Any] | None = None,
                 no_sync: Callable[[], Any] | None = None, ddp: Any = None):
        if min_micro_batch < 1:
            raise ValueError("min_micro_batch must be >= 1")
        if micro_batch is not None and micro_batch < min_micro_batch:
            raise ValueError("micro_batch must be >= min_micro_batch")
        if loss_reduction not in ("mean", "sum"):
            raise ValueError("loss_reduction must be 'mean' or 'sum'")
        if grow_after is not None and grow_after < 1:
            raise ValueError("grow_after must be >= 1 or None")
        if ddp is not None and no_sync is not None:
            raise ValueError("ddp= runs every piece under the module's no_sync itself: pass ddp= or no_sync=, not both")
        self.optimizer, self.micro_batch, self.min_micro_batch = optimizer, micro_batch, min_micro_batch
        self.grow_after, self.loss_reduction, self.scaler = grow_after, loss_reduction, scaler
        self._backward = backward or (lambda loss: loss.backward())
        self.before_step = before_step
        self._size = batch_size or batch_size_of
        self._split = split or slice_batch
        self._no_sync = no_sync
        self._coordinator = None
        if ddp is not None:
            from oomdoctor.injob.fit.ddp import Coordinator
            self._coordinator = Coordinator(ddp)
        self.events: list[dict[str, Any]] = []  # every OOM and growth, for logs and tests
        self.steps = 0
        self._clean = 0
        self._grow_wait = grow_after
        self._growing = False
        self._grow_refused = False

    # -- one update -------------------------------------------------------------------------------
    def step(self, loss_fn: Callable[[Any], Any], batch: Any) -> Any:
        """Run one update on `batch`; returns the batch's loss (detached), as the unsplit step would."""
        n = self._size(batch)
        if n < 1:
            raise ValueError("fit: empty batch")
        if self._coordinator is not None:
            return self._step_agreed(loss_fn, batch, n)
        micro = min(self.micro_batch or n, n)
        self.optimizer.zero_grad(set_to_none=True)
        done, total = 0, 0.0
        while True:
            done, total, oom = self._run_from(loss_fn, batch, n, micro, done, total)
            if oom is None:
                break
            phase, message = oom
            self._after_oom(phase)
            if phase == "backward":  # partial gradients of the failed micro-batch: restart the batch
                done, total = 0, 0.0
            micro = self._shrink(micro, n, phase, message)
        self.steps += 1
        self._after_clean_step(micro, n)
        return total

    def _step_agreed(self, loss_fn: Callable[[Any], Any], batch: Any, n: int) -> Any:
        """ddp=: each rank runs its pieces without collectives and halves on its own; one exchange per round tells
        every rank whether to wait for another round, to raise (a rank that cannot go on), or to average and update;
        one more after the update, so that a rank failing there does not leave the others waiting."""
        coord = self._coordinator
        micro = min(self.micro_batch or n, n)
        coord.start_step()
        self.optimizer.zero_grad(set_to_none=True)
        done, total, failure, has_grad = 0, 0.0, None, None
        while True:
            if has_grad is None and failure is None:
                try:
                    done, total, oom, has_grad = self._pieces(loss_fn, batch, n, micro, done, total)
                except Exception as exc:  # not an OOM: every rank must hear of it, then it is raised
                    failure = exc
                    oom = None
                if oom is not None:
                    phase, message = oom
                    self._after_oom(phase)
                    if phase == "backward":
                        done, total = 0, 0.0
                    try:
                        micro = self._shrink(micro, n, phase, message, several_ok=True)
                    except FitOutOfMemoryError as exc:  # at the floor: the others must hear of it before it is raised
                        failure = exc
            agreed = coord.agree(incomplete=has_grad is None and failure is None, failure=failure,
                                 has_grad=has_grad)
            if agreed.failed:
                self.optimizer.zero_grad(set_to_none=True)
                raise self._stop_together(coord, agreed, failure, micro, n)
            if not agreed.incomplete:
                break
        coord.average(agreed.has_grad)
        try:
            self._update(micro, n)
        except Exception as exc:  # an OOM in the update, or anything else: told to the others, then raised
            failure = exc
        agreed = coord.agree(incomplete=False, failure=failure, has_grad=None)
        if agreed.failed:
            raise self._stop_together(coord, agreed, failure, micro, n)
        coord.end_step()
        self.steps += 1
        self._after_clean_step(micro, n)
        return total

    def _stop_together(self, coord: Any, agreed: Any, own: BaseException | None, micro: int,
                       n: int) -> BaseException:
        return stop_together(coord, agreed, own, micro, min(self.min_micro_batch, n), self.events, self.steps)

    def _pieces(self, loss_fn: Callable[[Any], Any], batch: Any, n: int, micro: int, done: int,
                total: Any) -> tuple[int, Any, tuple[str, str] | None, list[bool] | None]:
        """ddp=: the pieces from sample `done` on, all without DDP's all-reduce; an OOM comes back as (phase,
        message). On success also which parameters got a gradient here (the others hold zeros now)."""
        coord = self._coordinator
        done, total, oom = self._run_pieces(loss_fn, batch, n, micro, done, total, lambda stop: coord.no_sync())
        if oom is not None:
            return done, total, oom, None
        try:
            return done, total, None, coord.complete_grads()
        except Exception as exc:  # zeros for unused parameters, the buckets: a smaller micro-batch would not help
            if not is_oom(exc):
                raise
            message = str(exc)
        raise gradients_oom_error(message, micro, min(self.min_micro_batch, n))

    def _update(self, micro: int, n: int) -> None:
        """ddp=: the update once the gradients are averaged; an OOM here is not retried (as without ddp=)."""
        try:
            self._apply_update()
            return
        except Exception as exc:
            if not is_oom(exc):
                raise
            message = str(exc)
        self._after_oom("optimizer")
        self._shrink(micro, n, "optimizer", message)

    def _run_from(self, loss_fn: Callable[[Any], Any], batch: Any, n: int, micro: int, done: int,
                  total: Any) -> tuple[int, Any, tuple[str, str] | None]:
        """Micro-batches from sample `done` on, then the update. OOM comes back as (phase, message)."""
        def quiet(stop: int) -> Any:  # DDP: forward and backward of every piece but the last without an all-reduce
            return self._no_sync() if self._no_sync is not None and stop < n else contextlib.nullcontext()

        done, total, oom = self._run_pieces(loss_fn, batch, n, micro, done, total, quiet)
        if oom is not None:
            return done, total, oom
        try:
            self._apply_update()
            return done, total, None
        except Exception as exc:
            if not is_oom(exc):
                raise
            message = str(exc)
        return done, total, ("optimizer", message)

    def _run_pieces(self, loss_fn: Callable[[Any], Any], batch: Any, n: int, micro: int, done: int, total: Any,
                    quiet: Callable[[int], Any]) -> tuple[int, Any, tuple[str, str] | None]:
        """Forward and backward of the pieces from sample `done` on, each inside quiet(its end); each weighted by
        its share of the batch. An OOM comes back as (phase, message)."""
        phase = "forward"
        try:
            while done < n:
                stop = min(done + micro, n)
                phase = "forward"
                with quiet(stop):
                    loss = loss_fn(self._split(batch, done, stop))
                    weight = (stop - done) / n if self.loss_reduction == "mean" else 1.0
                    phase = "backward"
                    scaled = loss * weight
                    self._backward(self.scaler.scale(scaled) if self.scaler is not None else scaled)
                total = total + loss.detach() * weight
                del loss, scaled
                done = stop
            return done, total, None
        except Exception as exc:
            if not is_oom(exc):
                raise
            message = str(exc)
        # Outside the handler: the exception, its traceback and the graph it pinned are gone now.
        return done, total, (phase, message)

    def _apply_update(self) -> None:
        if self.before_step is not None:
            self.before_step(self.optimizer)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def _after_oom(self, phase: str) -> None:
        if phase != "forward":
            self.optimizer.zero_grad(set_to_none=True)
        gc.collect()
        _free_cuda_cache()

    def _shrink(self, micro: int, n: int, phase: str, message: str, several_ok: bool = False) -> int:
        floor = min(self.min_micro_batch, n)
        event = {"step": self.steps, "phase": phase, "micro_batch": micro, "message": first_line_of(message)}
        if phase == "optimizer":
            self.events.append({**event, "action": "raise"})
            raise optimizer_oom_error(message, micro, floor) from None
        world = 1 if several_ok else _world_size()
        if world > 1:
            self.events.append({**event, "action": "raise"})
            raise several_processes_error(phase, micro, floor, self.min_micro_batch, world, message,
                                          ddp_hint=True) from None
        if micro <= floor:
            self.events.append({**event, "action": "raise"})
            diag = _diagnosis(message)
            raise FitOutOfMemoryError(
                f"OOM at the floor micro-batch {micro} (min_micro_batch={self.min_micro_batch}) in {phase}: "
                f"{first_line_of(message)}" + (f" | diagnosis: {diag}" if diag else ""),
                micro_batch=micro, floor=floor, phase=phase, oom_message=message, diagnosis=diag) from None
        new = max(floor, math.ceil(micro / 2))
        if self._growing:  # the growth just tried did not fit: wait twice as long next time
            self._grow_wait = (self._grow_wait or 1) * 2
            self._growing = False
        self.micro_batch = new
        self._clean = 0
        accum = math.ceil(n / new)
        self.events.append({**event, "action": "halve", "new_micro_batch": new, "accumulation": accum})
        log.warning("oomdoctor.fit: OOM in %s at micro-batch %d; retrying with micro-batch %d x %d accumulation "
                    "steps (effective batch %d unchanged)", phase, micro, new, accum, n)
        return new

    def _after_clean_step(self, micro: int, n: int) -> None:
        self._growing = False
        if self.grow_after is None or micro >= n:
            return
        if _world_size() > 1 and self._coordinator is None:  # a growth that OOMs could not be retried on one rank alone
            if not self._grow_refused:
                self._grow_refused = True
                log.warning("oomdoctor.fit: grow_after is ignored under several processes (an OOM is not retried there)")
            return
        self._clean += 1
        if self._clean >= (self._grow_wait or self.grow_after):
            self._clean = 0
            self.micro_batch = min(n, micro * 2)
            self._growing = True
            self.events.append({"step": self.steps, "action": "grow", "new_micro_batch": self.micro_batch})
            log.info("oomdoctor.fit: %d clean steps; trying micro-batch %d", self._grow_wait, self.micro_batch)


def first_line_of(message: str) -> str:
    return first_line(RuntimeError(message))


_DEFAULT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def step(loss_fn: Callable[[Any], Any], batch: Any, optimizer: Any, **options: Any) -> Any:
    """`fit.step(lambda mb: loss(model, mb), batch, optimizer)`: AutoMicroBatch kept per optimizer.

    Options (first call for an optimizer only) are AutoMicroBatch's keyword arguments.
    """
    runner = _DEFAULT.get(optimizer)
    if runner is None:
        runner = _DEFAULT[optimizer] = AutoMicroBatch(optimizer, **options)
    return runner.step(loss_fn, batch)
