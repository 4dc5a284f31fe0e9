"""In-job memory recording: `with oomdoctor.watch(run_dir): ...` and `oomdoctor.step()`.

torch is never imported here; the recorder uses it only once the job has imported it and initialised
CUDA itself. Nothing in this package raises into the training loop.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

from oomdoctor.injob.record import oom, runmeta
from oomdoctor.injob.record.recorder import DEFAULT_EVERY_MS, DEFAULT_HISTORY, Recorder

__all__ = ["Recorder", "watch", "step", "current", "start", "DEFAULT_EVERY_MS", "DEFAULT_HISTORY"]

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


@contextlib.contextmanager
def watch(run_dir: str = "oomdoctor-run", *, every_ms: int = DEFAULT_EVERY_MS,
          history: int = DEFAULT_HISTORY, **options: Any) -> Iterator[Recorder | None]:
    """Record memory while the block runs; an OOM escaping the block leaves its evidence in run_dir.

    Exceptions from the block propagate unchanged. If a recorder already runs in this process (for
    example under `oomdoctor record`), the block reuses it and leaves it running. A run_dir that holds
    another run's recording is not mixed into: the block records into `run_dir-2` (the next free one)
    and says so once on stderr. run.json says how the block ended (runmeta).
    """
    global _current
    owned = current() is None
    rec, meta_dir = None, None
    if owned:
        meta_dir = _watch_dir(run_dir)
        rec = start(meta_dir or str(run_dir), every_ms=every_ms, history=history, **options)
    else:
        rec = current()
    try:
        yield rec
    except BaseException as exc:
        if rec is not None:
            rec.record_exception(exc)
        if meta_dir is not None:
            runmeta.finish(meta_dir, exc, oom.is_oom_exception(exc))
            meta_dir = None
        raise
    finally:
        if owned and rec is not None:
            rec.stop()
            with _lock:
                if _current is rec:
                    _current = None
        if meta_dir is not None:
            runmeta.finish(meta_dir, None, False)


def _watch_dir(run_dir: Any) -> str | None:
    """The directory this watch records into, with its run.json begun; None if that failed (never raises)."""
    try:
        key = runmeta.job_key()
        chosen = runmeta.choose_dir(str(run_dir), key)
        if chosen != (str(run_dir).rstrip("/") or str(run_dir)):
            _warn_once(f"oomdoctor.watch: {run_dir} already holds another run's recording; recording into {chosen}")
        os.makedirs(chosen, exist_ok=True)
        runmeta.begin(chosen, key)
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
