"""Turning on gradient checkpointing for a model, the one way the estimator, max-batch and the zoo share.

Everything here is a call oomdoctor makes, not the user: what transformers and peft print about it (the
`use_cache=True` notice at every forward, the FutureWarnings of transformers 5's renames) is noise the user
cannot act on, so it is kept off their terminal. Nothing the model does changes: transformers turns use_cache off
itself when it checkpoints a training forward; setting it first only spares the notice.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

# transformers 5 renamed gradient_checkpointing_enable / _disable / is_gradient_checkpointing to activation_*
_RENAMED = r".*`?(?:is_)?gradient_checkpointing(?:_enable|_disable)?`? is deprecated"


@contextlib.contextmanager
def quiet_renames() -> Iterator[None]:
    """Silence the rename FutureWarnings only, for a call of ours that reaches the old names anyway (peft's
    get_peft_model reads model.is_gradient_checkpointing; a model overriding gradient_checkpointing_enable
    is entered through it)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_RENAMED, category=FutureWarning)
        yield


def _no_cache(model: Any) -> None:
    """use_cache=False on every config in the model (a peft wrapper or a composite model holds several)."""
    for m in model.modules() if hasattr(model, "modules") else (model,):
        cfg = getattr(m, "config", None)
        if cfg is not None and getattr(cfg, "use_cache", None):
            with contextlib.suppress(AttributeError, TypeError, ValueError):
                cfg.use_cache = False


def enable_checkpointing(model: Any, kwargs: Mapping[str, Any] | None = None, *, training: bool = True) -> None:
    """Gradient checkpointing on `model`, as transformers' own entry point does it: `kwargs` go to
    torch.utils.checkpoint (None: the model's default). `training`: the step trains, so the KV cache is off
    (what transformers does at each checkpointed forward, announced each run); an inference step keeps it.
    ValueError when the model has no way to checkpoint."""
    if training:
        _no_cache(model)
    with quiet_renames():
        new = getattr(model, "activation_checkpointing_enable", None)
        if new is not None:  # transformers >= 5; it enters a model's own override of the old name itself
            new(activation_checkpointing_kwargs=None if kwargs is None else dict(kwargs))
            return
        old = getattr(model, "gradient_checkpointing_enable", None)
        if old is None:
            raise ValueError("gradient_checkpointing=True but the model has no gradient_checkpointing_enable()")
        if kwargs is None:
            old()
        else:
            old(gradient_checkpointing_kwargs=dict(kwargs))
