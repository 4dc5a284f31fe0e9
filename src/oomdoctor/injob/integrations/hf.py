"""Hugging Face: `Trainer(..., callbacks=[OomDoctorTrainerCallback("runs/oom")])` marks each optimizer step.

If a recorder is already running (under `oomdoctor record`), the callback only adds step markers. An OOM
that ends training is caught by the recorder's excepthook (transformers has no exception hook).
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from oomdoctor.injob import record


class OomDoctorTrainerCallback(TrainerCallback):
    def __init__(self, run_dir: str = "oomdoctor-run", *, every_ms: int = record.DEFAULT_EVERY_MS,
                 history: int = record.DEFAULT_HISTORY):
        self.run_dir, self.every_ms, self.history = run_dir, every_ms, history
        self._owned: Any = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if record.current() is None:
            self._owned = record.start(self.run_dir, every_ms=self.every_ms, history=self.history)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        record.step(getattr(state, "global_step", None))

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._owned is not None:
            self._owned.stop()
            self._owned = None
