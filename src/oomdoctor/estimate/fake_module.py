"""Module conversions under fake tensors, as they behave on real tensors.

`model.to(torch.bfloat16)` (and `.half()`, `.float()`, `.to(device)`) on a module whose parameters are
fake tensors goes through `torch.utils.swap_tensors` in `nn.Module._apply`, which refuses a tensor
that has a weak reference (fake tensors get them from the fake-tensor machinery, and the second
module of a tied pair sees the same tensor again): `_apply(): Couldn't swap Embedding.weight`. On real
tensors PyTorch changes the parameter in place (`param.data = ...`), so tied weights stay tied.

`fake_safe_apply()` patches `Module._apply` for the trace's duration (restored after) with the same
walk that converts each parameter once and puts the converted Parameter into every module that held
the old one: tied weights stay one tensor, gradients are converted with their parameter, buffers as
PyTorch does.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

_state = threading.local()


def _apply(self: Any, fn: Any, recurse: bool = True) -> Any:
    import torch

    memo = getattr(_state, "memo", None)
    top = memo is None
    if top:
        memo = _state.memo = {}
    try:
        if recurse:
            for module in self.children():
                module._apply(fn)
        for key, param in self._parameters.items():
            if param is None:
                continue
            hit = memo.get(id(param))
            if hit is not None:
                self._parameters[key] = hit[1]
                continue
            with torch.no_grad():
                applied = fn(param)
            if applied is param:
                new = param
            else:
                new = torch.nn.Parameter(applied, requires_grad=param.requires_grad)
                if param.grad is not None:
                    with torch.no_grad():
                        new.grad = fn(param.grad)
                for attr, value in vars(param).items():  # e.g. peft/HF markers set on the parameter
                    setattr(new, attr, value)
            memo[id(param)] = (param, new)  # keep the old one alive so its id is not reused
            self._parameters[key] = new
        for key, buf in self._buffers.items():
            if buf is not None:
                self._buffers[key] = fn(buf)
        return self
    finally:
        if top:
            _state.memo = None


@contextlib.contextmanager
def fake_safe_apply():
    """Module._apply that keeps tied parameters tied without swap_tensors, for the trace only."""
    import torch

    orig = torch.nn.Module._apply
    torch.nn.Module._apply = _apply
    try:
        yield
    finally:
        torch.nn.Module._apply = orig
