"""Transient library workspaces of one traced op, from its fake-tensor arguments (sizes only).

The GPU allocates them through the caching allocator around the op and frees them right after; the
CPU trace cannot see them, so the recorder adds them (runtime.trace). The rules and the measurements
behind them are in knowledge.workspaces (cuDNN) and knowledge.reduce_staging (CUDA reductions).
"""

from __future__ import annotations

from typing import Any

from oomdoctor.estimate.reduce_staging import reduce_staging_bytes
from oomdoctor.estimate.workspaces import ConvCall, Workspaces, cudnn_conv_workspace

_DTYPES = {"torch.float32": "fp32", "torch.float16": "fp16", "torch.bfloat16": "bf16"}


def conv_workspace_sizes(func: Any, args: tuple, out: Any, workspaces: Workspaces) -> dict[int, int]:
    """The cuDNN workspaces one aten convolution call takes from the caching allocator, keyed by the
    index of the output each cuDNN call writes (forward: 0; backward: 0 = grad_input, 1 = grad_weight)."""
    import torch

    if not workspaces.cudnn:
        return {}
    if func is torch.ops.aten.convolution.default:
        x, y, w, stride, transposed, groups = args[0], out, args[1], args[3], args[6], args[8]
        calls = {0: "fwd"}
    else:
        y, x, w, stride, transposed, groups, mask = args[0], args[1], args[2], args[4], args[7], args[9], args[10]
        calls = {i: d for i, d in ((0, "bwd_data"), (1, "bwd_weight")) if mask[i]}
    if transposed or x.dim() < 3 or y.dim() != x.dim():
        return {}  # transposed convs run the data/forward engines the other way round: not measured
    nhwc = x.dim() == 4 and not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last)
    call = ConvCall(n=x.shape[0], c_in=x.shape[1], c_out=w.shape[0], in_spatial=tuple(x.shape[2:]),
                    out_spatial=tuple(y.shape[2:]), kernel=tuple(w.shape[2:]), stride=tuple(stride),
                    groups=groups, itemsize=x.element_size(), channels_last=nhwc,
                    dtype=_DTYPES.get(str(x.dtype), ""))
    sizes = {}
    for i, direction in calls.items():
        n = cudnn_conv_workspace(call, direction, sm_count=workspaces.reduce_device.sm_count)
        if n:
            sizes[i] = n
    return sizes


def reduce_staging_sizes(x: Any, dims: Any, workspaces: Workspaces) -> tuple[int, int]:
    """(buffer, semaphores) bytes a CUDA sum/mean of `x` over `dims` stages (knowledge.reduce_staging)."""
    import torch

    if not workspaces.reduce_staging or x.dim() == 0 or x.numel() == 0:
        return 0, 0
    nd = x.dim()
    reduced = set(range(nd)) if not dims else {d % nd for d in dims}
    reduced = {d for d in reduced if x.shape[d] > 1}
    if not reduced:
        return 0, 0
    inputs = 1
    for d in reduced:
        inputs *= x.shape[d]
    outputs = x.numel() // inputs
    sized = [d for d in range(nd) if x.shape[d] > 1]
    fastest = min(sized, key=lambda d: x.stride(d))
    inner = fastest in reduced
    vec = 1
    if not inner:
        vec = 4
        while vec > 1 and (x.shape[fastest] % vec or outputs % vec):
            vec //= 2
    acc = 8 if x.dtype in (torch.float64, torch.complex64) or not x.is_floating_point() else 4
    return reduce_staging_bytes(outputs, inputs, inner=inner, acc_size=acc, vec=vec,
                                single_reduce_dim=len(reduced) == 1, device=workspaces.reduce_device)
