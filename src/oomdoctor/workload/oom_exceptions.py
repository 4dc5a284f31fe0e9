"""Is this exception an out-of-memory? By type first, then by the driver's documented error texts.

PyTorch raises `torch.OutOfMemoryError` (2.5+, device-agnostic; `torch.cuda.OutOfMemoryError` is the
same class since 1.13) from its allocators. Memory failures inside libraries surface as a plain
RuntimeError carrying the CUDA runtime's or the library's status text: `cudaGetErrorString
(cudaErrorMemoryAllocation)` is "out of memory", printed by C10_CUDA_CHECK as "CUDA error: out of
memory"; cuBLAS reports CUBLAS_STATUS_ALLOC_FAILED, cuDNN CUDNN_STATUS_ALLOC_FAILED; and cuDNN's
CUDNN_STATUS_NOT_SUPPORTED for oversized batches is treated as OOM by toma, Lightning and Accelerate.
We match those status names at the start of the message, never a loose "out of memory" anywhere
(pytorch/pytorch#29710 asks for exactly this kind of reliable detection).
"""

from __future__ import annotations

import re
import sys

_DRIVER_OOM = re.compile(
    r"^(?:CUDA error: out of memory"
    r"|CUDA error: CUBLAS_STATUS_ALLOC_FAILED"
    r"|cuDNN error: CUDNN_STATUS_ALLOC_FAILED"
    r"|cuDNN error: CUDNN_STATUS_NOT_SUPPORTED\."
    r"|CUDA driver error: out of memory"
    r"|HIP error: out of memory)"
)


def oom_types() -> tuple[type, ...]:
    """The exception classes PyTorch uses for OOM, without importing torch if it is not loaded."""
    torch = sys.modules.get("torch")
    if torch is None:
        return ()
    types = []
    for owner in (torch, getattr(torch, "cuda", None)):
        cls = getattr(owner, "OutOfMemoryError", None)
        if isinstance(cls, type):
            types.append(cls)
    return tuple(types)


def is_oom(exc: BaseException) -> bool:
    if isinstance(exc, oom_types()):
        return True
    if type(exc) is RuntimeError and exc.args and isinstance(exc.args[0], str):
        return bool(_DRIVER_OOM.match(exc.args[0]))
    return False


# what batch-size finders retry on: accelerate's should_reduce_batch_size (the Trainer's auto_find_batch_size) looks
# for these in a RuntimeError's one argument; Lightning's and toma's for "CUDA" and "out of memory" together
_FINDER_TEXTS = (" out of memory.", "CUDNN_STATUS_NOT_SUPPORTED.", "DefaultCPUAllocator: can't allocate memory",
                 "PT_DEVMEM Allocation failed")


def finder_retries(exc: BaseException | None) -> bool:
    """Would a batch-size finder take this exception for an OOM and retry with a smaller batch?"""
    if not isinstance(exc, RuntimeError) or len(exc.args) != 1 or not isinstance(exc.args[0], str):
        return False
    text = exc.args[0]
    return any(s in text for s in _FINDER_TEXTS) or ("CUDA" in text and "out of memory" in text)


def failure_is_oom(exc: BaseException | None) -> bool:
    """An OOM, an error that carries one's message (fit's own), or an error a batch-size finder would retry
    (torch.compile's BackendCompilerFailed wrapping an OOM). fit's ranks agree on this: whatever one rank raises, the
    others must raise an error that the same finder treats alike, or one rank would retry alone."""
    try:
        return bool(getattr(exc, "oom_message", None)) or is_oom(exc) or finder_retries(exc)
    except Exception:  # noqa: BLE001 - an exception that cannot even be looked at is not an OOM
        return False


def first_line(exc: BaseException, limit: int = 400) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:limit]
