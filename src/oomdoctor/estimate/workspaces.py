"""Memory that is not a tensor of the model: cuBLAS/cuBLASLt workspaces and the CUDA context.

Figures measured on the device machine (validation/results/estimate_zoo_run1.json, `context` entries;
docs/validation/estimate.md): NVIDIA H100 80GB HBM3, driver 580.159.04, torch 2.11.0+cu130, cuDNN 9.19.

- cuBLAS workspace: since torch 2.3 it comes from the caching allocator, one per (cuBLAS handle, stream),
  kept for the life of the process. Default size per aten/src/ATen/cuda/CublasHandlePool.cpp
  (CUBLAS_WORKSPACE_CONFIG): ":4096:8" = 32 MiB on Hopper (sm90+), ":4096:2:16:8" = 8 MiB + 128 KiB on
  older GPUs. Measured: 33554432 bytes after the first GEMM on the H100; a second 32 MiB one appears at
  the first GEMM of autograd's backward thread (its own handle).
- cuBLASLt workspace (addmm with a 1-D bias goes through cublasLt): 1 MiB, measured (1048576 bytes).
- Context (NVML per-process used minus torch.cuda.memory_reserved()): with lazy module loading
  (PyTorch's default since 1.13, CUDA_MODULE_LOADING=LAZY) 610 MiB after the first kernel, +66 MiB per
  cuBLAS handle (per thread that runs a GEMM), +18 MiB once cuDNN runs a convolution. Eager loading:
  1250 MiB after the first kernel, 1732 MiB after a GEMM, 1980 MiB after a convolution.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from oomdoctor.estimate.cudnn_splitk_h100 import SPLITK_H100
from oomdoctor.estimate.reduce_staging import ReduceDevice

MiB = 1 << 20


@dataclass(frozen=True)
class Workspaces:
    cublas: int = 32 * MiB  # sm90+; use cublas_workspace_for(capability) for others
    cublaslt: int = 1 * MiB
    # Transient cuDNN workspace per convolution call (cudnn_conv_workspace); False = not modelled.
    cudnn: bool = True
    # Reduce.cuh's global-reduction staging (knowledge.reduce_staging); False = not modelled.
    reduce_staging: bool = True
    reduce_device: ReduceDevice = ReduceDevice()


H100_SMS = 132  # the GPU the rule below was measured on (validation/results/conv_workspace_grid_h100.json)
SPLITK_MAX = 14
"""Most fp32 partial copies of the weight gradient a cuDNN weight-gradient engine keeps (split-K over
N x H x W); measured on the H100 grid: 13-14 for small weights (3x3, 16-128 channels)."""
SPLITK_WAVE_PER_SM = 128 * 128 * 4
"""Bytes of split-K partials per SM where the count is not measured: one wave of 128x128 fp32 tiles
(512-channel 3x3 fp32 weight gradients take 8651503 bytes beyond x + y + w = 132 x 64 KiB + 751)."""
ENGINE_TAIL = 768  # bytes a cuDNN engine asks for beyond the tensors (grid: 16, 131, 147, 400, 607, 679, 751)


@dataclass(frozen=True)
class ConvCall:
    """One cuDNN convolution call as the tracer sees it (sizes only)."""

    n: int
    c_in: int
    c_out: int
    in_spatial: tuple[int, ...]
    out_spatial: tuple[int, ...]
    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    groups: int = 1
    itemsize: int = 4
    channels_last: bool = False
    dtype: str = ""  # "fp32", "fp16", "bf16" (default: from itemsize; 16-bit taken as fp16)


def _prod(t: tuple[int, ...]) -> int:
    out = 1
    for v in t:
        out *= v
    return out


def _log_dist(a: int, b: int) -> float:
    return abs(math.log2(max(a, 1)) - math.log2(max(b, 1)))


def splitk_copies(c: ConvCall) -> float | None:
    """Split-K partials (in fp32 weight-gradient copies) of a dense 3x3 weight gradient: the nearest
    point of the H100 sweep (channels, output size, batch; log scale). None where that engine did not
    transform (knowledge.cudnn_splitk_h100)."""
    table = SPLITK_H100.get(c.dtype or ("fp32" if c.itemsize == 4 else "fp16"))
    if not table:
        return None
    h = max(c.out_spatial) if c.out_spatial else 1
    key = min(table, key=lambda k: (_log_dist(k[0], c.c_in) + _log_dist(k[1], h) + _log_dist(k[2], c.n), k))
    s = table[key]
    return None if s < 0 else s


def cudnn_conv_workspace(c: ConvCall, direction: str, *, sm_count: int = H100_SMS) -> int:
    """Workspace bytes one cuDNN call takes from the caching allocator; direction is "fwd",
    "bwd_data" or "bwd_weight". Derived from the H100 grid (validation/conv_workspace_grid.py, shapes
    apart from the estimate zoo; validation/conv_workspace_rule.py checks it against every call), an
    upper bound of what the heuristics' first engine takes, in parts:

    - NCHW transform: Hopper's cuDNN 9 engines are NHWC; for NCHW tensors the first engine transposes
      x, y and w into its workspace (x + y + w, the input channels padded to 8 for 16-bit types: the
      C_in = 3 stem takes 8 channels in bf16). None for channels_last and depthwise convs (native
      kernels); none for a stride-1 pointwise conv (a GEMM on NCHW as it lies) unless its output is
      at most 7x7, where the grid shows the transform.
    - split-K (weight gradient only): fp32 partial copies of the weight gradient. For 3x3 convs the
      count cuDNN's engine chose at the nearest shape of the H100 sweep (splitk_copies); otherwise at
      most SPLITK_MAX copies and SPLITK_WAVE_PER_SM bytes per SM. Scaled by the GPU's SM count over the
      H100's (measured on sm90 only, assumed elsewhere). A stride-1 pointwise weight gradient splits over
      the batch instead (N x 4 x w, grid: exact for 64->256, 512->128, 1024->256), or, where that is
      larger, takes the transform engine.

    Where cuDNN's workspace is only an upper bound of real use, the estimate errs on the safe side;
    the grid's under-estimates are listed in docs/validation/estimate.md."""
    if c.groups > 1 and c.groups == c.c_in:
        return 0
    hw_in, hw_out, k = _prod(c.in_spatial), _prod(c.out_spatial), _prod(c.kernel)
    cin_g = c.c_in // c.groups
    pad = -(-cin_g // 8) * 8 if c.itemsize == 2 else cin_g
    x = c.n * pad * c.groups * hw_in * c.itemsize
    y = c.n * c.c_out * hw_out * c.itemsize
    w = c.c_out * pad * k * c.itemsize
    w_fp32 = 4 * c.c_out * cin_g * k
    pointwise = k == 1 and all(s == 1 for s in c.stride)
    transform = 0 if c.channels_last or (pointwise and hw_out > 49) else x + y + w
    if k == 1 and not pointwise and c.itemsize == 4 and direction == "fwd":
        # strided pointwise, fp32 forward: the grid's engine transforms x + y at batch 8, x + w at batch 64
        transform = x + (w if c.n >= 64 else y)
    if direction != "bwd_weight":
        return transform + ENGINE_TAIL if transform else 0
    splitk = min(SPLITK_MAX * w_fp32, SPLITK_WAVE_PER_SM * sm_count)
    copies = splitk_copies(c) if k == 9 and c.groups == 1 and cin_g >= 8 and not c.channels_last else None
    if copies is not None:
        # measured split count for the nearest swept shape; other GPUs: scaled by their SM count
        splitk = int(copies * w_fp32 * min(1.0, sm_count / H100_SMS))
    if cin_g < 8 and not c.channels_last:
        # stem (C_in = 3): the reduction over N x H x W is long and the weight tiny; the grid's partials
        # grow with the batch: 4.3/18.9/57.4 MB at batch 8/64/256 in fp32 (bound: y/16 + 6 MiB), 6.1 MB in bf16
        splitk = c.n * c.c_out * hw_out * 4 // 16 + 6 * MiB
    if pointwise and not c.channels_last:
        return min(c.n * w_fp32, x + y + w + splitk) + ENGINE_TAIL
    return transform + splitk + ENGINE_TAIL


def cublas_workspace_for(capability_major: int) -> int:
    """Default CUBLAS_WORKSPACE_CONFIG size for a compute capability (CublasHandlePool.cpp)."""
    return 32 * MiB if capability_major >= 9 else 8 * MiB + 128 * 1024


@dataclass(frozen=True)
class ContextModel:
    """Non-allocator memory of one process, as NVML counts it. Measured on H100/CUDA 13.0/driver 580."""

    base_lazy: int = 610 * MiB
    per_cublas_handle_lazy: int = 66 * MiB
    cudnn_lazy: int = 18 * MiB
    base_eager: int = 1250 * MiB
    cublas_eager: int = 482 * MiB
    cudnn_eager: int = 248 * MiB
    source: str = "measured: NVIDIA H100 80GB HBM3, driver 580.159.04, torch 2.11.0+cu130 (docs/validation/estimate.md)"

    def bytes(self, *, cublas_handles: int, uses_cudnn: bool, lazy: bool = True) -> int:
        if lazy:
            return self.base_lazy + self.per_cublas_handle_lazy * cublas_handles + (self.cudnn_lazy if uses_cudnn else 0)
        return self.base_eager + (self.cublas_eager if cublas_handles else 0) + (self.cudnn_eager if uses_cudnn else 0)


CONTEXT = ContextModel()
