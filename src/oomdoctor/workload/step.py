"""One training (or inference) step of a workload, exactly as docs/contracts.md §6 defines it.

forward -> loss -> backward -> optimizer.step() -> zero_grad(set_to_none=True). The estimator runs
this under fake tensors, max-batch runs it for real, and the validation zoo measures it on a GPU:
one definition keeps the three honest. torch is imported lazily.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from oomdoctor.workload.checkpointing import enable_checkpointing
from oomdoctor.workload.load import WorkloadSpec


def make_optimizer(spec: WorkloadSpec, params: Any, **extra: Any) -> Any:
    """The named optimizers with their defaults; `extra` (e.g. foreach=True) lets the estimator pick the
    implementation PyTorch would pick on a GPU while it traces on the CPU."""
    import torch

    opt = spec.optimizer
    if callable(opt):
        return opt(params)
    if opt == "sgd":
        return torch.optim.SGD(params, lr=1e-3, **extra)
    if opt == "sgd-momentum":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9, **extra)
    if opt == "adam":
        return torch.optim.Adam(params, lr=1e-3, **extra)
    if opt == "adamw":
        return torch.optim.AdamW(params, lr=1e-3, **extra)
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

    def __init__(self, spec: WorkloadSpec, device_type: str = "cuda", *,
                 optimizer_kwargs: Mapping[str, Any] | None = None, on_phase: Any = None):
        self.spec = spec
        self.device_type = device_type
        self.optimizer = None
        self.on_phase = on_phase  # called with "forward", "backward", "optimizer", "zero_grad", "end"
        if spec.gradient_checkpointing:
            ckpt = spec.gradient_checkpointing
            enable_checkpointing(spec.model, ckpt if isinstance(ckpt, Mapping) else None, training=spec.train)
        if spec.train:
            spec.model.train()
            self.optimizer = make_optimizer(spec, [p for p in spec.model.parameters() if p.requires_grad],
                                            **dict(optimizer_kwargs or {}))
        else:
            spec.model.eval()

    def _phase(self, name: str) -> None:
        if self.on_phase is not None:
            self.on_phase(name)

    def step(self) -> None:
        import torch

        spec = self.spec
        self._phase("forward")
        if spec.generate is not None:
            with torch.no_grad(), _autocast(spec, self.device_type):
                inputs = spec.inputs
                if isinstance(inputs, Mapping):
                    output = spec.model.generate(**inputs, **spec.generate)
                else:
                    output = spec.model.generate(*(inputs if isinstance(inputs, (tuple, list)) else (inputs,)),
                                                 **spec.generate)
            del output
            self._phase("end")
            return
        if not spec.train:
            with torch.no_grad(), _autocast(spec, self.device_type):
                output = _call_model(spec.model, spec.inputs)
            del output
            self._phase("end")
            return
        for micro in range(spec.accumulation_steps):
            if micro:
                self._phase("forward")
            with _autocast(spec, self.device_type):
                output = _call_model(spec.model, spec.inputs)
                loss = _loss(spec, output)
            del output
            self._phase("backward")
            loss.backward()
            del loss
        self._phase("optimizer")
        self.optimizer.step()
        self._phase("zero_grad")
        self.optimizer.zero_grad(set_to_none=True)
        self._phase("end")
