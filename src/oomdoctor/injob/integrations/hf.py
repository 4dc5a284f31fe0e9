"""Hugging Face: `Trainer(..., callbacks=[OomDoctorTrainerCallback("runs/oom")])` marks each optimizer step.

Each `train()` is one recorded run, with run.json as `oomdoctor.watch` writes it (record.Block): it ends at
`on_train_end`, and, since transformers has no exception hook, an exception that ends the process ends it
through sys.excepthook (an OOM as such); a process that exits inside training says so at exit. If a recorder
is already running (under `oomdoctor record`, or in a `watch` block), the callback only adds step markers.
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from oomdoctor.injob import record


class OomDoctorTrainerCallback(TrainerCallback):
    def __init__(self, run_dir: str = "oomdoctor-run", *, every_ms: int = record.DEFAULT_EVERY_MS,
                 history: int = record.DEFAULT_HISTORY):
        self.run_dir, self.every_ms, self.history = run_dir, every_ms, history
        self._block: record.Block | None = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        # called again for each retry of `auto_find_batch_size` (an OOM caught by accelerate): the same run
        if self._block is None or self._block.ended:
            self._block = record.Block(self.run_dir, "hf", until_exit=True, every_ms=self.every_ms,
                                       history=self.history)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        record.step(getattr(state, "global_step", None))

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._block is not None:
            self._block.end()
