"""In-job memory recording: `with oomdoctor.watch(run_dir): ...` and `oomdoctor.step()`.

torch is never imported here; the recorder uses it only once the job has imported it and initialised
CUDA itself. Nothing in this package raises into the training loop.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

from oomdoctor.injob.record import oom, runmeta
from oomdoctor.injob.record.recorder import DEFAULT_EVERY_MS, DEFAULT_HISTORY, Recorder

__all__ = ["Block", "Recorder", "watch", "step", "current", "start", "DEFAULT_EVERY_MS", "DEFAULT_HISTORY"]

_current: Recorder | None = None
_lock = threading.Lock()


def current() -> Recorder | None:
    """The active recorder of this process, if any."""
    rec = _current
    return rec if rec is not None and rec.active else None


def start(run_dir: str, **options: Any) -> Recorder | None:
    """Start recording (or return the recorder already running in this process). Never raises."""
    global _current
    try:
        with _lock:
            rec = current()
            if rec is not None:
                return rec
            rec = Recorder(run_dir, **options)
            rec.start()
            _current = rec if rec.active else None
            return _current
    except Exception:
        return None


def step(n: int | None = None) -> None:
    """Mark the end of a training step (cheap; a no-op when nothing is recording)."""
    rec = _current
    if rec is not None and rec.active:
        rec.step(n)


class Block:
    """One recorded stretch of a job: `watch`'s with-block, or training under a callback (`by`: "watch", "hf",
    "lightning.fit", ...; run.json's `block`). Starts a recorder unless one already runs in this process (then it
    only adds to it), begins run.json in a directory free of other runs, and ends both once: end(exc).

    A callback's block (`until_exit`) may never see its end: transformers has no exception hook, so an exception
    that ends the process ends the block through sys.excepthook, and a process that exits inside it (sys.exit, an
    exception the job swallowed) leaves `exited_inside` in run.json at exit. A process forked inside the block
    inherits both hooks but not the block: only the process that began it ends it. Never raises."""

    def __init__(self, run_dir: Any, by: str = "watch", *, until_exit: bool = False, **options: Any):
        self.ended = False
        self.pid = os.getpid()
        self.owned = current() is None
        self.meta_dir: str | None = None
        self._prev_hook: Any = None
        if self.owned:
            self.meta_dir = _watch_dir(run_dir, by)
            self.rec = start(self.meta_dir or str(run_dir), **options)
        else:
            self.rec = current()
        if until_exit and self.owned and self.rec is not None:
            self._prev_hook = sys.excepthook
            sys.excepthook = self._excepthook
            atexit.register(self._at_exit)

    def end(self, exc: BaseException | None = None, *, exited: bool = False, restore: bool = True) -> None:
        """The block is left: with `exc` when it raised; `exited` when the process exits inside it. `restore`:
        turn torch's allocation history off again (not when the process ends: disabling it then warns)."""
        global _current
        if self.ended or os.getpid() != self.pid:  # a fork's exit or exception is not the block's end
            return
        self.ended = True
        try:
            if exc is not None and self.rec is not None:
                self.rec.record_exception(exc)
            if self.meta_dir is not None:
                runmeta.finish(self.meta_dir, exc, exc is not None and oom.is_oom_exception(exc), exited=exited)
                runmeta.release_process(self.meta_dir)
            if self.owned and self.rec is not None:
                self.rec.stop(restore=restore)
                with _lock:
                    if _current is self.rec:
                        _current = None
            if self._prev_hook is not None:
                atexit.unregister(self._at_exit)
                if sys.excepthook == self._excepthook:
                    sys.excepthook = self._prev_hook
        except Exception:
            pass

    def _excepthook(self, etype: Any, value: Any, tb: Any) -> None:
        prev = self._prev_hook or sys.__excepthook__
        if isinstance(value, BaseException):
            self.end(value, restore=False)
        prev(etype, value, tb)

    def _at_exit(self) -> None:
        self.end(exited=True, restore=False)


@contextlib.contextmanager
def watch(run_dir: str = "oomdoctor-run", *, every_ms: int = DEFAULT_EVERY_MS,
          history: int = DEFAULT_HISTORY, **options: Any) -> Iterator[Recorder | None]:
    """Record memory while the block runs; an OOM escaping the block leaves its evidence in run_dir.

    Exceptions from the block propagate unchanged. If a recorder already runs in this process (for
    example under `oomdoctor record`), the block reuses it and leaves it running. A run_dir that holds
    another run's recording is not mixed into: the block records into `run_dir-2` (the next free one)
    and says so once on stderr. run.json says how the block ended (runmeta).
    """
    block = Block(run_dir, "watch", every_ms=every_ms, history=history, **options)
    try:
        yield block.rec
    except BaseException as exc:
        block.end(exc)
        raise
    finally:
        block.end()


def _watch_dir(run_dir: Any, by: str = "watch") -> str | None:
    """The directory this block records into, with its run.json begun; None if that failed (never raises)."""
    try:
        key = runmeta.job_key()
        chosen = runmeta.choose_dir(str(run_dir), key)
        if chosen != (str(run_dir).rstrip("/") or str(run_dir)):
            _warn_once(f"oomdoctor.watch: {run_dir} already holds another run's recording; recording into {chosen}")
        os.makedirs(chosen, exist_ok=True)
        runmeta.begin(chosen, key, by)
        runmeta.note_process(chosen)
        return chosen
    except Exception:
        return None


_warned: set[str] = set()


def _warn_once(msg: str) -> None:
    if msg in _warned:
        return
    _warned.add(msg)
    try:
        print(msg, file=sys.stderr, flush=True)
    except Exception:
        pass
