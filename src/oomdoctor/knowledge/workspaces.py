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

from dataclasses import dataclass

from oomdoctor.knowledge.reduce_staging import ReduceDevice

MiB = 1 << 20


@dataclass(frozen=True)
class Workspaces:
    cublas: int = 32 * MiB  # sm90+; use cublas_workspace_for(capability) for others
    cublaslt: int = 1 * MiB
    # Transient cuDNN workspace per dense NCHW convolution call (cudnn_conv_workspace); False = not modelled.
    cudnn: bool = True
    # Reduce.cuh's global-reduction staging (knowledge.reduce_staging); False = not modelled.
    reduce_staging: bool = True
    reduce_device: ReduceDevice = ReduceDevice()


CUDNN_WGRAD_SCRATCH = 8 * MiB
"""Bound of the split-K partial sums a cuDNN weight-gradient call keeps beyond x + dy + w (see below)."""


def cudnn_conv_workspace(x_numel: int, y_numel: int, w_numel: int, itemsize: int, *, groups: int = 1,
                         channels_last: bool = False, weight_grad: bool = False) -> int:
    """Upper bound of the workspace one cuDNN convolution call (forward, backward-data or
    backward-weight) allocates through the caching allocator for a dense NCHW convolution.

    Why: cuDNN 9's kernels for Hopper are NHWC; for NCHW tensors the engine PyTorch's heuristics pick
    transposes input, output (or its gradient) and filter into its workspace, so the workspace is at
    most x + y + w bytes plus a small engine scratch. Conv_v8.cpp allocates it from the caching
    allocator just before the call and frees it right after (benchmark mode off). Measured on the H100
    traces (validation/results/estimate_zoo_traces_run*.json.gz): every transient block of the
    ResNet-18/50 traces is x+y+w, x+y or x+w plus 16-147 bytes (ResNet-18 batch 64, layer1 3x3 conv:
    102908051 = 2 x 51380224 + 147456 + 147; stem: 244093712 = 38535168 + 205520896 + 37632 + 16), the
    largest one 7% above it (stem weight gradient). Grouped/depthwise convs and channels_last tensors
    run natively (no transform): not counted.
    """
    if groups != 1 or channels_last:
        return 0
    return (x_numel + y_numel + w_numel) * itemsize + (CUDNN_WGRAD_SCRATCH if weight_grad else 0)


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
