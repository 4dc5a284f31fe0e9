"""`oomdoctor.fit`: survive an OOM inside the training loop without changing what is learned.

`core` is the micro-batcher (torch only, lazily); `hf` adapts it to Hugging Face's Trainer and is
imported only when `fit.MicroBatchTrainerMixin` is asked for, so transformers is never loaded eagerly.
"""

from __future__ import annotations

from typing import Any

from oomdoctor.injob.fit.core import (
    AutoMicroBatch,
    FitOutOfMemoryError,
    FitPeerError,
    batch_size_of,
    is_oom,
    slice_batch,
    step,
)

__all__ = ["AutoMicroBatch", "FitOutOfMemoryError", "FitPeerError", "step", "batch_size_of", "slice_batch", "is_oom",
           "MicroBatchTrainerMixin"]


def __getattr__(name: str) -> Any:
    if name == "MicroBatchTrainerMixin":
        from oomdoctor.injob.fit.hf import MicroBatchTrainerMixin

        return MicroBatchTrainerMixin
    raise AttributeError(f"module 'oomdoctor.fit' has no attribute {name!r}")
