"""Why a traced step failed: the workload's own bug, or an op that fake tensors cannot run.

A walkthrough's `Linear(4, 4)` fed `randn(batch, 5)` was reported as "the model uses aten.addmm.default,
which fake tensors cannot run", after twenty lines of torch's log of the same error: a user's shape bug
presented as a tool limitation. An op that raises under fake tensors is run once more, outside them, on
the meta device: failing there too, it is the workload's error (then, when its inputs are small, once
more on zero-filled CPU tensors, for the error as a real run words it: "mat1 and mat2 shapes cannot be
multiplied (4x5 and 4x4)"); running there, the fake tensors are at fault. Errors of fake
tensors' own kinds (no meta kernel, data-dependent output) are limitations without a second run, said to
be limits of estimating without a GPU, with what to do (measure on a GPU, replace the op). So is an op
without a meta kernel that fake tensors ran for real on the CPU instead, when that run itself failed: a big
one (MultiMarginLoss's backward at batch 2M) ran out of host memory and was reported as the workload's step
failing with the CPU allocator's words. A run that big is now refused before it starts (estimate/host_fallback.py),
worded the same way with the size it would have taken (host_run).

Autograd's own refusals (a loss without a gradient, a leaf changed in place) are raised above the ops, by
the step as a GPU runs it too: they are the workload's. When none of the workload file's code is on the
stack (torch's ReLU changing build()'s batch in place), the line named is that of the code that made what
failed: the loss function, the model's forward, else build().
"""

from __future__ import annotations

import ast
import contextlib
import logging
import os
import re
from collections.abc import Iterator
from typing import Any

from oomdoctor.units import format_bytes

REAL_RERUN_BYTES = 64 << 20  # inputs up to this size are made for real, on the CPU; larger ones on meta
_FAKE_TENSOR_LOG = "torch._subclasses.fake_tensor"


def fake_tensor_limit(exc: BaseException) -> bool:
    """Whether `exc` is one of fake tensors' own "cannot" errors rather than an op rejecting its inputs."""
    from torch._subclasses import fake_tensor as ft

    kinds = tuple(getattr(ft, n) for n in ("UnsupportedOperatorException", "DynamicOutputShapeException",
                                           "DataDependentOutputException", "UnsupportedFakeTensorException",
                                           "UnsupportedMutationAliasingException") if hasattr(ft, n))
    return isinstance(exc, (NotImplementedError, *kinds))


class NoMetaKernel(RuntimeError):
    """The op has no kernel on the meta device (nor a fake implementation)."""


# fake tensors' and torch.library's words for an op without a meta kernel or fake implementation
_NO_FAKE_IMPL = ("no fake impl", "with Meta tensors, but there was no", "from the 'Meta' backend")
# an op without a meta kernel is run by fake tensors for real, on zero-filled CPU tensors of its full size: what
# that run itself can fail on (the host's memory, a dtype the CPU kernel lacks) says nothing of the workload
_CPU_RUN_FAILURES = ("DefaultCPUAllocator", "can't allocate memory", "not implemented for '")


def no_fake_impl(exc: BaseException) -> bool:
    """Whether fake tensors refused the op for want of a meta kernel or fake implementation."""
    from torch._subclasses import fake_tensor as ft

    unsupported = getattr(ft, "UnsupportedOperatorException", ())
    if isinstance(exc, (NotImplementedError, unsupported)):
        return True
    return isinstance(exc, RuntimeError) and any(text in str(exc) for text in _NO_FAKE_IMPL)


def cpu_run_failure(exc: BaseException) -> bool:
    """Whether `exc` is the CPU run's own failure (out of host memory, a dtype without a CPU kernel)."""
    return isinstance(exc, MemoryError) or any(text in str(exc) for text in _CPU_RUN_FAILURES)


def sized_by_values(exc: BaseException) -> bool:
    """Whether fake tensors refused the op because the size of its output depends on its inputs' values (not a
    value read by Python, DataDependentOutputException: that is the workload's control flow)."""
    from torch._subclasses import fake_tensor as ft

    kind = getattr(ft, "DynamicOutputShapeException", None)
    return kind is not None and isinstance(exc, kind)


def limit_message(source: str, op: str, version: str, *, no_meta: bool, cpu_error: str = "",
                  host: tuple[int, int] | None = None) -> str:
    """One line: why the op cannot be traced (no meta implementation in this torch, or an output sized by values),
    that this is a limit of estimating without a GPU, and what to do; `cpu_error`: what the CPU run that fake
    tensors tried in its place said; `host`: (bytes, limit) of that run, refused for its size before it ran."""
    custom = no_meta and op.split(".", 1)[0] not in ("aten", "prims")
    where = f"`oomdoctor max-batch {source}` runs real trials" if source.endswith(".py") else "real trials"
    cpu_error = re.sub(r"^\[enforce fail at [^\]]*\]\s*(err == 0\.\s*)?", "", cpu_error)
    tried = f" (fake tensors ran it on the CPU in its place, which failed: {cpu_error})" if cpu_error else ""
    if host is not None:
        tried = f" ({host_run(*host)})"
    why = (f"{op} has no meta (fake tensor) implementation in torch {version}" if no_meta else
           f"the size of what {op} returns depends on its inputs' values, which fake tensors do not hold")
    return (f"{source}: {why}, so its memory cannot be traced: a limit of estimating without a GPU, not an error "
            f"of the workload. Measure on a GPU ({where})"
            f"{', give the op one (torch.library.register_fake),' if custom else ''} or replace the op{tried}")


def host_run(needed: int, limit: int) -> str:
    """What fake tensors' refused CPU run would have taken, against the limit."""
    return (f"fake tensors would run it for real on the CPU in its place, on zero-filled tensors of its full size: "
            f"about {format_bytes(needed)} of host memory, over the {format_bytes(limit)} allowed to such a run")


def outside_fake(func: Any, args: tuple, kwargs: dict) -> BaseException | None:
    """The error the op raises outside fake tensors, or None if it runs there. First on the meta device (no
    data, no cost); when that fails too and the inputs are small, on zero-filled CPU tensors, for the error
    as a real run words it. Raises RuntimeError("no stand-ins") when the inputs cannot be remade."""
    import torch
    from torch.utils._pytree import tree_flatten

    meta = rerun(func, args, kwargs, "meta")
    if meta is None:
        return None
    leaves = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
    if sum(t.numel() * t.element_size() for t in leaves) > REAL_RERUN_BYTES:
        return meta
    try:
        return rerun(func, args, kwargs, "cpu") or meta
    except RuntimeError:
        return meta


def rerun(func: Any, args: tuple, kwargs: dict, device: str, shrink: bool = False) -> BaseException | None:
    """Run the op outside fake tensors on zero-filled stand-ins of its inputs on `device` (`shrink`: every
    dimension 1, for a check that does not look at shapes): the error it raises there, or None if it runs.
    Raises RuntimeError("no stand-ins") when they cannot be made or the op has no kernel there (NoMetaKernel,
    a RuntimeError, on the meta device)."""
    import torch
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.utils._mode_utils import no_dispatch
    from torch.utils._pytree import tree_map

    def stand_in(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            shape = (1,) * x.dim() if shrink else tuple(x.shape)
            return torch.zeros(shape, dtype=x.dtype, device=device)
        if isinstance(x, torch.device):
            return torch.device(device)
        return x

    with unset_fake_temporarily(), no_dispatch(), torch.no_grad():
        try:
            real_args, real_kwargs = tree_map(stand_in, (args, kwargs))
            if "device" in real_kwargs:
                real_kwargs["device"] = torch.device(device)
        except Exception as exc:  # noqa: BLE001 - symbolic sizes, odd dtypes: nothing to compare
            raise RuntimeError("no stand-ins") from exc
        try:
            func(*real_args, **real_kwargs)
        except NotImplementedError:
            if device == "meta":
                raise NoMetaKernel(str(func)) from None
            raise RuntimeError("no stand-ins") from None
        except Exception as exc:  # noqa: BLE001 - the op's own error is the answer
            return exc
    return None


# autograd's refusals (torch/csrc/autograd), which a run on the GPU raises as well
_AUTOGRAD_ERRORS = (
    "does not require grad and does not have a grad_fn",
    "that requires grad is being used in an in-place operation",
    "needed for gradient computation has been modified by an inplace operation",
    "is a view and is being modified inplace",
    "Trying to backward through the graph a second time",
    "grad can be implicitly created only for scalar outputs",
)


def autograd_error(exc: BaseException) -> bool:
    """Whether `exc` is one of autograd's own refusals of the step (not an op's, not fake tensors')."""
    return isinstance(exc, RuntimeError) and any(text in str(exc) for text in _AUTOGRAD_ERRORS)


def in_place_on_leaf(exc: BaseException) -> bool:
    return "that requires grad is being used in an in-place operation" in str(exc)


def _is_source(path: str, source: str) -> bool:
    return bool(source) and not source.startswith("<") and os.path.isfile(source) and \
        os.path.realpath(path) == os.path.realpath(source)


def defined_at(obj: Any, source: str) -> int | None:
    """The line where function `obj` (or, for a module or other object, its class's forward) is defined, when
    that is in the workload file `source`; None otherwise."""
    func = obj if hasattr(obj, "__code__") else getattr(type(obj), "forward", None)
    code = getattr(func, "__code__", None)
    if code is None or not _is_source(code.co_filename, source):
        return None
    return code.co_firstlineno


def build_line(source: str) -> int | None:
    """The line of the workload file's top-level `def build`; None for no file or no such definition."""
    if not source.endswith(".py") or not os.path.isfile(source):
        return None
    try:
        with open(source, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return None
    return next((node.lineno for node in tree.body
                 if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "build"), None)


def leaf_input(inputs: Any) -> bool:
    """Whether the tensors build() returned as inputs or target include a leaf that requires grad."""
    import torch
    from torch.utils._pytree import tree_flatten

    return any(isinstance(t, torch.Tensor) and t.is_leaf and t.requires_grad for t in tree_flatten(inputs)[0])


def where(exc: BaseException, model: Any, source: str) -> tuple[int | None, str]:
    """The workload file's line nearest the error (the deepest frame in it; None if it is not on the
    stack), and the module whose forward raised it ("model.encoder.0, a Linear"), "" if none did."""
    import torch

    want = os.path.realpath(source) if source and not source.startswith("<") else None
    line, module = None, None
    tb = exc.__traceback__
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:  # the chain too: OpNotTraceable wraps the op's error
        seen.add(id(exc))
        tb = exc.__traceback__
        while tb is not None:
            frame = tb.tb_frame
            if want and os.path.realpath(frame.f_code.co_filename) == want:
                line = tb.tb_lineno
            owner = frame.f_locals.get("self") if frame.f_code.co_name == "forward" else None
            if isinstance(owner, torch.nn.Module):
                module = owner
            tb = tb.tb_next
        exc = exc.__cause__
    if module is None:
        return line, ""
    names = {id(m): n for n, m in model.named_modules()} if isinstance(model, torch.nn.Module) else {}
    name = names.get(id(module))
    if name is None:
        return line, f"a {type(module).__name__}"
    return line, (f"model.{name}, a {type(module).__name__}" if name else f"the model, a {type(module).__name__}")


class _DropReraised(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        # fake tensors log the traceback of an op that failed and raise it again: the error reaches us, and
        # is reported in one line; its log is twenty lines of torch internals
        return not (record.levelno >= logging.ERROR and record.exc_info)


@contextlib.contextmanager
def quiet_fake_tensor_log() -> Iterator[None]:
    """Within the block, fake tensors' log of errors it raises again is dropped (removed after)."""
    logger = logging.getLogger(_FAKE_TENSOR_LOG)
    f = _DropReraised()
    logger.addFilter(f)
    try:
        yield
    finally:
        logger.removeFilter(f)
