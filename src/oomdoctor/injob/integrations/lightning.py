"""Lightning: `Trainer(callbacks=[OomDoctorCallback("runs/oom")])` records every rank's memory per batch.

Works with `lightning` (lightning.pytorch) or the older `pytorch_lightning` package. If a recorder is
already running (under `oomdoctor record`), the callback only adds step markers.
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
        self._owned: Any = None

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if record.current() is None:
            self._owned = record.start(self.run_dir, every_ms=self.every_ms, history=self.history)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        record.step()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        rec = record.current()
        if rec is not None:
            rec.record_exception(exception)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if self._owned is not None:
            self._owned.stop()
            self._owned = None
