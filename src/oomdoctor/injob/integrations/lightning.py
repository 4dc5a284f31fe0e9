"""Lightning: `Trainer(callbacks=[OomDoctorCallback("runs/oom")])` records every rank's memory per batch.

Works with `lightning` (lightning.pytorch) or the older `pytorch_lightning` package. Each trainer entry point
(`fit`, `validate`, `test`, `predict`) is one recorded run, with run.json as `oomdoctor.watch` writes it
(record.Block): it ends at `teardown`, or at `on_exception` with the exception (Lightning calls no teardown
hook of a callback then). If a recorder is already running (under `oomdoctor record`, or in a `watch`
block), the callback only adds step markers and records the exception.
"""

from __future__ import annotations

from typing import Any

try:
    from lightning.pytorch.callbacks import Callback
except ImportError:  # the pre-2.0 package name
    from pytorch_lightning.callbacks import Callback  # type: ignore[no-redef]

from oomdoctor.injob import record


class OomDoctorCallback(Callback):
    def __init__(self, run_dir: str = "oomdoctor-run", *, every_ms: int = record.DEFAULT_EVERY_MS,
                 history: int = record.DEFAULT_HISTORY):
        super().__init__()
        self.run_dir, self.every_ms, self.history = run_dir, every_ms, history
        self._block: record.Block | None = None

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if self._block is None or self._block.ended:
            name = getattr(stage, "value", stage)  # a TrainerFn enum ("fit") in Lightning 2.x
            self._block = record.Block(self.run_dir, f"lightning.{name}", until_exit=True,
                                       every_ms=self.every_ms, history=self.history)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        record.step()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        if self._block is not None and not self._block.ended:
            self._block.end(exception)
        elif (rec := record.current()) is not None:
            rec.record_exception(exception)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if self._block is not None:
            self._block.end()
