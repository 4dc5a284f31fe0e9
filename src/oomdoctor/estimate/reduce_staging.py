"""Global-memory staging that PyTorch's CUDA reduction kernel takes from the caching allocator.

aten/src/ATen/native/cuda/Reduce.cuh (`setReduceConfig`, `gpu_reduce_kernel`): when a reduction has
few outputs and many inputs per output (a bias gradient: `grad.sum(0)` over the batch), it splits each
output over `ctas_per_output` thread blocks and stages their partial results in a buffer of
`global_memory_size()` bytes plus `semaphore_size()` bytes of semaphores, both allocated through the
caching allocator right after the output and freed when the kernel is queued. For an outer
(non-fastest-dimension) reduction the buffer is sizeof(acc) x outputs x ctas x block.x x vec: the
4096-wide bias gradient at batch 4096 takes 134217728 + 128 bytes, which is exactly the transient block
on the H100 traces of the MLP (validation/results/estimate_zoo_traces_run1.json.gz), and ViT-B/16's
3072-wide MLP bias at 32 x 197 tokens takes 138412032 + 96 (run3), as this function computes.
The configuration depends on the GPU's SM count and threads per SM (H100 SXM: 132, 2048).
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_NUM_THREADS = 512  # max_reduce_threads for 1-4 byte scalars (Reduce.cuh)
WARP = 32
MIN_VALUES_PER_THREAD = 16
MAX_VALUES_PER_THREAD = 256


@dataclass(frozen=True)
class ReduceDevice:
    sm_count: int = 132  # H100 SXM5 (cudaDeviceProp.multiProcessorCount)
    max_threads_per_sm: int = 2048


def _last_pow2(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


def _div_up(a: int, b: int) -> int:
    return -(-a // b)


def reduce_staging_bytes(num_outputs: int, inputs_per_output: int, *, inner: bool, acc_size: int = 4,
                         vec: int = 1, single_reduce_dim: bool = True,
                         device: ReduceDevice = ReduceDevice()) -> tuple[int, int]:
    """(buffer bytes, semaphore bytes) that one CUDA reduction allocates; (0, 0) without global reduce.

    `inner`: the reduced dimension is the fastest-moving one (e.g. a sum over the last dim);
    `vec`: the output vector size for outer reductions (4 when the contiguous output size allows it)."""
    if num_outputs < 1 or inputs_per_output < 2:
        return 0, 0
    out_vec = 1 if inner else vec
    if inner:
        dim0, dim1 = inputs_per_output, num_outputs
        if dim0 > 128 and single_reduce_dim:
            dim0 //= 4  # vectorized input loads (input_vec_size = vt0 = 4)
    else:
        dim0, dim1 = num_outputs // out_vec, inputs_per_output
    max_threads = MAX_NUM_THREADS // out_vec
    d0 = _last_pow2(dim0) if dim0 < max_threads else max_threads
    d1 = _last_pow2(dim1) if dim1 < max_threads else max_threads
    bw = min(d0, WARP)
    bh = min(d1, max_threads // bw)
    bw = min(d0, max_threads // bh)
    step_input, step_output = 1, 1
    block_x_reduce = inner
    if inner:
        step_input *= bw * (4 if inputs_per_output > 128 and single_reduce_dim else 1)
    else:
        step_output *= bw
    vpt = _div_up(inputs_per_output, step_input)
    block_y_reduce = vpt >= min(bh * 16, MAX_VALUES_PER_THREAD)
    if block_y_reduce:
        step_input *= bh
    else:
        step_output *= bh
    vpt = _div_up(inputs_per_output, step_input)
    grid_x = _div_up(num_outputs // out_vec, step_output)
    target = device.sm_count * (device.max_threads_per_sm // (bw * bh))
    if not (block_y_reduce and vpt >= MAX_VALUES_PER_THREAD and grid_x <= target):
        return 0, 0
    ctas = max(min(_div_up(target, grid_x), _div_up(vpt, MIN_VALUES_PER_THREAD)),
               _div_up(vpt, MAX_VALUES_PER_THREAD))
    if ctas <= 1:
        return 0, 0
    size = acc_size * num_outputs * ctas
    if not block_x_reduce:
        size *= bw * out_vec
    return size, 4 * grid_x
