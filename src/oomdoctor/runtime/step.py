"""One training (or inference) step of a workload, exactly as CONTRACTS.md section 6 defines it.

forward -> loss -> backward -> optimizer.step() -> zero_grad(set_to_none=True). The estimator runs
this under fake tensors, max-batch runs it for real, and the validation zoo measures it on a GPU:
one definition keeps the three honest. torch is imported lazily.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from oomdoctor.runtime.workload import WorkloadSpec


def make_optimizer(spec: WorkloadSpec, params: Any) -> Any:
    import torch

    opt = spec.optimizer
    if callable(opt):
        return opt(params)
    if opt == "sgd":
        return torch.optim.SGD(params, lr=1e-3)
    if opt == "sgd-momentum":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9)
    if opt == "adam":
        return torch.optim.Adam(params, lr=1e-3)
    if opt == "adamw":
        return torch.optim.AdamW(params, lr=1e-3)
    raise ValueError(f"unknown optimizer {opt!r}")


def _call_model(model: Any, inputs: Any) -> Any:
    if isinstance(inputs, Mapping):
        return model(**inputs)
    if isinstance(inputs, (tuple, list)):
        return model(*inputs)
    return model(inputs)


def _loss(spec: WorkloadSpec, output: Any) -> Any:
    if spec.loss is not None:
        return spec.loss(output, spec.target) if spec.target is not None else spec.loss(output)
    loss = getattr(output, "loss", None)
    if loss is None and isinstance(output, Mapping):
        loss = output.get("loss")
    if loss is None:
        loss = output
    if hasattr(loss, "dim") and loss.dim() > 0:
        loss = loss.float().mean()
    return loss


def _autocast(spec: WorkloadSpec, device_type: str) -> Any:
    import contextlib

    import torch

    if spec.amp is None:
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if spec.amp == "bf16" else torch.float16
    return torch.autocast(device_type=device_type, dtype=dtype)


class StepRunner:
    """Holds the model's optimizer across steps so state is created at step 1, as in real training."""

    def __init__(self, spec: WorkloadSpec, device_type: str = "cuda"):
        self.spec = spec
        self.device_type = device_type
        self.optimizer = None
        if spec.gradient_checkpointing:
            enable = getattr(spec.model, "gradient_checkpointing_enable", None)
            if enable is None:
                raise ValueError("gradient_checkpointing=True but the model has no gradient_checkpointing_enable()")
            enable()
        if spec.train:
            spec.model.train()
            self.optimizer = make_optimizer(spec, [p for p in spec.model.parameters() if p.requires_grad])
        else:
            spec.model.eval()

    def step(self) -> None:
        import torch

        spec = self.spec
        if not spec.train:
            with torch.no_grad(), _autocast(spec, self.device_type):
                _call_model(spec.model, spec.inputs)
            return
        with _autocast(spec, self.device_type):
            output = _call_model(spec.model, spec.inputs)
            loss = _loss(spec, output)
        del output
        loss.backward()
        del loss
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
