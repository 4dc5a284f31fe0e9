"""CUDA's behaviour where the CPU's differs and changes memory, put back while tracing on the CPU.

CUDA autocast's fp32 op list (aten/src/ATen/autocast_mode.h: layer_norm, softmax, sum, pow, losses...
run in fp32 where CPU autocast stays in bf16/fp16), CUDA's fused dropout (saves a bool mask; the CPU
path saves a full-size noise tensor) and the fused attention kernel CUDA's sdp_utils picks (no L x L
matrix, unlike the CPU math fallback). Done by patching the torch functions for the trace's duration
(restored after), so it also holds inside autograd and checkpoint recomputation, where a
TorchFunctionMode would be popped.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any

# CUDA autocast's fp32 list (AT_FORALL_FP32 and AT_FORALL_FP32_SET_OPT_DTYPE), as torch-function names.
_FP32_OPS = frozenset({
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt",
    "sinh", "tan", "pow", "softplus", "layer_norm", "group_norm", "norm", "nll_loss", "kl_div", "l1_loss",
    "smooth_l1_loss", "huber_loss", "mse_loss", "binary_cross_entropy_with_logits", "cosine_similarity",
    "logsumexp", "cdist", "dist", "renorm", "poisson_nll_loss", "cosine_embedding_loss",
    "hinge_embedding_loss", "margin_ranking_loss", "soft_margin_loss", "multilabel_margin_loss",
    "triplet_margin_loss", "multi_margin_loss", "softmax", "log_softmax", "cumsum", "cumprod", "prod", "sum",
    "cross_entropy",
})
_OPT_DTYPE_OPS = frozenset({"softmax", "log_softmax", "cumsum", "cumprod", "prod", "sum"})


def cuda_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
              enable_gqa=False):
    """The fused kernel CUDA's sdp_utils would pick (flash for fp16/bf16 without a mask, else
    memory-efficient): they keep no L x L attention matrix, unlike the CPU math fallback."""
    import torch

    if enable_gqa and query.dim() == 4 and key.dim() == 4 and key.shape[-3] != query.shape[-3]:
        # flash attention takes grouped keys and values (fp16/bf16, no mask); the memory-efficient kernel
        # does not, so anything else runs the math path on keys and values repeated to every head (an
        # L x L matrix per head: fp32 hidden states after prepare_model_for_kbit_training, GQA models)
        dtype = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else query.dtype
        if dtype in (torch.float16, torch.bfloat16) and attn_mask is None:
            return None
        rep = query.shape[-3] // key.shape[-3]
        key, value = key.repeat_interleave(rep, dim=-3), value.repeat_interleave(rep, dim=-3)
        return _math_sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale)
    if enable_gqa or query.dim() != 4 or query.shape[-1] % 8 or query.shape[-1] > 256:
        return None
    if not _last_dim_contiguous(query, key, value, attn_mask):
        return _math_sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale)
    if torch.is_autocast_enabled("cpu"):
        low = torch.get_autocast_dtype("cpu")
        query, key, value = (t.to(low) if t.dtype == torch.float32 else t for t in (query, key, value))
        if attn_mask is not None and attn_mask.dtype == torch.float32:
            attn_mask = attn_mask.to(low)
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        attn_mask = torch.zeros(attn_mask.shape, dtype=query.dtype).masked_fill(~attn_mask, float("-inf"))
    with torch.autocast("cpu", enabled=False):
        if query.dtype in (torch.float16, torch.bfloat16) and attn_mask is None:
            return torch.ops.aten._scaled_dot_product_flash_attention(
                query, key, value, dropout_p, is_causal, scale=scale)[0]
        if attn_mask is not None and attn_mask.dim() != 4:
            return None
        if attn_mask is not None:
            attn_mask = _preprocess_mask(attn_mask, query, key)
        grad = query.requires_grad or key.requires_grad or value.requires_grad
        return torch.ops.aten._scaled_dot_product_efficient_attention(
            query, key, value, attn_mask, grad, dropout_p, is_causal, scale=scale)[0]


def _last_dim_contiguous(*tensors) -> bool:
    """sdp_utils' check_last_dim_stride_equals_1_dense, which every fused CUDA kernel (flash,
    memory-efficient, cuDNN) passes: query, key, value and the mask need stride 1 in their last
    dimension. On the CPU the mask's stride is not checked, so the CPU trace would keep a fused kernel
    where CUDA falls back to the math path (e.g. T5's relative position bias, a permuted view,
    passed as the mask by transformers before 5.18 made it contiguous)."""
    return all(t is None or t.shape[-1] == 1 or t.stride(-1) == 1 for t in tensors)


def _math_sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale):
    """CUDA's math fallback, aten's _scaled_dot_product_attention_math op by op, so autograd keeps
    what it keeps on the GPU: fp16/bf16 inputs are computed in fp32, the scaled query and key copies,
    the full (batch, heads, L, S) softmax output and, with dropout, CUDA's fused dropout (a bool mask
    and the dropped matrix). Calling the aten op itself on the CPU would take the CPU's unfused
    dropout (a full-size noise tensor) instead."""
    import math

    import torch

    if torch.is_autocast_enabled("cpu"):  # autocast casts SDPA's inputs before dispatch
        low = torch.get_autocast_dtype("cpu")
        query, key, value = (t.to(low) if t.dtype == torch.float32 else t for t in (query, key, value))
        if attn_mask is not None and attn_mask.dtype == torch.float32:
            attn_mask = attn_mask.to(low)
    with torch.autocast("cpu", enabled=False):
        origin = query.dtype
        if origin in (torch.float16, torch.bfloat16):
            query, key, value = query.float(), key.float(), value.float()
        factor = math.sqrt(scale if scale is not None else 1.0 / math.sqrt(query.shape[-1]))
        if attn_mask is not None and attn_mask.dtype == torch.bool:
            attn_mask = torch.zeros(attn_mask.shape, dtype=query.dtype).masked_fill(~attn_mask, float("-inf"))
        if is_causal:
            causal = torch.ones(query.shape[-2], key.shape[-2], dtype=torch.bool).tril()
            attn_mask = torch.zeros(causal.shape, dtype=query.dtype).masked_fill(~causal, float("-inf"))
        attn = torch.matmul(query * factor, key.transpose(-2, -1) * factor)
        if attn_mask is not None:
            attn.add_(attn_mask)
        attn = torch.softmax(attn, -1)
        if dropout_p > 0.0:
            attn = torch.ops.aten.native_dropout(attn, dropout_p, True)[0]
        out = torch.matmul(attn, value)
        if out.dtype != origin:  # the op also returns the matrix in the input dtype; SDPA drops it
            out, _ = out.to(origin), attn.to(origin)
        return out


def _preprocess_mask(mask, query, key):
    """sdp_utils' preprocess_mask before the memory-efficient kernel (attention.cu): a mask whose
    strides are not 8-aligned is copied into a last dimension padded to a multiple of 8, then it is
    expanded to (batch, heads, L, S). The expansion matters in backward: a mask that requires grad
    (T5's learned position bias) gets a gradient of the expanded, 16-aligned size before autograd
    sums it back to the mask's shape."""
    import torch

    aligned = all(mask.stride(i) % 8 == 0 for i in range(mask.dim() - 1)) and mask.stride(-1) == 1
    if not aligned:
        last = mask.shape[-1]
        mask = torch.nn.functional.pad(mask, (0, 8 - last % 8))[..., :last]
    return mask.expand(query.shape[0], query.shape[1], query.shape[2], key.shape[2])


def _up(a):
    import torch

    if isinstance(a, torch.Tensor) and a.dtype in (torch.float16, torch.bfloat16):
        return a.float()
    return a


@contextlib.contextmanager
def cuda_semantics(amp: bool):
    """Patch the torch functions whose CPU behaviour differs from CUDA's, for the trace only. Patching
    (rather than a TorchFunctionMode) keeps them in force inside autograd and checkpoint recomputation."""
    import torch

    F = torch.nn.functional
    saved: list[tuple[Any, str, Any]] = []

    def patch(owner: Any, name: str, make: Callable[[Callable], Callable]) -> None:
        orig = getattr(owner, name)
        saved.append((owner, name, orig))
        setattr(owner, name, functools.wraps(orig)(make(orig)))

    def dropout(orig):
        def run(input, p=0.5, training=True, inplace=False):
            if training and 0 < p < 1 and not inplace and torch.is_grad_enabled():
                return torch.ops.aten.native_dropout(input, p, True)[0]
            return orig(input, p, training, inplace)
        return run

    def sdpa(orig):
        def run(*args, **kwargs):
            out = cuda_sdpa(*args, **kwargs)
            return orig(*args, **kwargs) if out is None else out
        return run

    def fp32(name):
        def make(orig):
            def run(*args, **kwargs):
                if torch.is_autocast_enabled("cpu") and not (name in _OPT_DTYPE_OPS and kwargs.get("dtype") is not None):
                    args = tuple(_up(a) for a in args)
                    kwargs = {k: _up(v) for k, v in kwargs.items()}
                return orig(*args, **kwargs)
            return run
        return make

    try:
        patch(F, "dropout", dropout)
        patch(F, "scaled_dot_product_attention", sdpa)
        if amp:
            for name in sorted(_FP32_OPS):
                for owner in (F, torch, torch.Tensor):
                    if callable(getattr(owner, name, None)):
                        patch(owner, name, fp32(name))
        yield
    finally:
        for owner, name, orig in reversed(saved):
            setattr(owner, name, orig)

