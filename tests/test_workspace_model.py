"""The transient workspaces the estimator adds: CUDA reduction staging and cuDNN NCHW transforms,
checked against the blocks recorded on the H100 (validation/results/estimate_zoo_traces_run*.json.gz)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from oomdoctor.knowledge.reduce_staging import ReduceDevice, reduce_staging_bytes
from oomdoctor.knowledge.workspaces import CUDNN_WGRAD_SCRATCH, cudnn_conv_workspace

ROOT = Path(__file__).resolve().parents[1]


def _h100_trace(key: str) -> list:
    for name in ("estimate_zoo_traces_run1.json.gz", "estimate_zoo_traces_run3.json.gz"):
        traces = json.load(gzip.open(ROOT / "validation/results" / name, "rt"))
        if key in traces:
            return traces[key]
    raise KeyError(key)


def _staging_pairs(trace: list) -> set[tuple[int, int]]:
    """(buffer, semaphores) pairs: alloc big, alloc small, free small, free big, back to back."""
    ev = [(a, s, addr) for a, s, addr, _ in trace if a in (0, 1)]
    pairs = set()
    for i in range(len(ev) - 3):
        (a0, big, p0), (a1, small, p1), (f1, _, q1), (f0, _, q0) = ev[i:i + 4]
        if (a0, a1, f1, f0) == (0, 0, 1, 1) and p1 == q1 and p0 == q0 and small <= 512 and big >= 1 << 20:
            pairs.add((big, small))
    return pairs


def test_reduce_staging_matches_the_blocks_on_the_h100():
    assert reduce_staging_bytes(4096, 4096, inner=False, vec=4) == (134217728, 128)  # MLP bias grad, batch 4096
    assert reduce_staging_bytes(4096, 2048, inner=False, vec=4) == (67108864, 128)  # batch 2048
    assert reduce_staging_bytes(3072, 32 * 197, inner=False, vec=4) == (138412032, 96)  # ViT-B/16 MLP bias
    assert reduce_staging_bytes(4096, 512, inner=False, vec=4) == (0, 0)  # too few rows: one block per output


@pytest.mark.parametrize("key,batch", [("mlp_sgd_fp32@4096", 4096), ("mlp_sgd_fp16@4096", 4096),
                                       ("mlp_adamw_bf16@2048", 2048), ("mlp_adam_fp32@512", 512),
                                       ("mlp_sgd_fp32@256", 256)])
def test_every_staging_block_of_the_mlp_traces_is_predicted(key, batch):
    predicted = {reduce_staging_bytes(n, batch, inner=False, vec=4 if n % 4 == 0 else 2)
                 for n in (4096, 4096, 4096, 10)} - {(0, 0)}
    assert _staging_pairs(_h100_trace(key)) == predicted


def test_staging_depends_on_the_gpu():
    small = ReduceDevice(sm_count=58, max_threads_per_sm=1536)  # an L4
    assert reduce_staging_bytes(4096, 4096, inner=False, vec=4, device=small)[0] < 134217728


def test_cudnn_transform_workspace_matches_resnet18_stem():
    # stem conv at batch 64: x 64x3x224x224, y 64x64x112x112, w 64x3x7x7, fp32 -> 244093712 on the H100
    x, y, w = 64 * 3 * 224 * 224, 64 * 64 * 112 * 112, 64 * 3 * 7 * 7
    measured = 244093712
    assert 0 <= measured - cudnn_conv_workspace(x, y, w, 4) < 512
    assert measured in {s for a, s, _, _ in _h100_trace("resnet18_sgd_fp32@64") if a == 0}
    assert cudnn_conv_workspace(x, y, w, 4, weight_grad=True) == cudnn_conv_workspace(x, y, w, 4) + CUDNN_WGRAD_SCRATCH
    assert cudnn_conv_workspace(x, y, w, 4, groups=3) == 0
    assert cudnn_conv_workspace(x, y, w, 4, channels_last=True) == 0


torch = pytest.importorskip("torch")


def _workspace_blocks(build, b):
    from oomdoctor.runtime.trace import trace_spec
    from oomdoctor.runtime.workload import WorkloadSpec

    trace, _ = trace_spec(lambda: WorkloadSpec.from_dict(build(b)))
    ev = trace.events
    blocks = []
    for i, (op, sid, size, _) in enumerate(ev):
        if op == "a" and trace.categories.get(sid) == "workspace" and size not in (33554432, 1048576):
            freed = next(j for j in range(i + 1, len(ev)) if ev[j][:2] == ("f", sid))
            blocks.append((size, freed - i))
    return blocks


def test_trace_adds_the_bias_gradient_staging_and_frees_it_at_once():
    def build(b):
        model = torch.nn.Sequential(torch.nn.Linear(64, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 10))
        return {"model": model, "inputs": (torch.randn(b, 64),), "target": torch.randint(0, 10, (b,)),
                "loss": torch.nn.functional.cross_entropy, "optimizer": "sgd"}
    blocks = _workspace_blocks(build, 4096)
    # three steps, one 4096-wide bias gradient each: buffer + semaphores, freed before the next alloc
    assert [s for s, _ in blocks].count(134217728) == 3 and [s for s, _ in blocks].count(128) == 3
    assert all(gap <= 3 for _, gap in blocks)
    assert _workspace_blocks(build, 256) == []


def test_trace_adds_cudnn_workspace_for_spatial_dense_convs_only():
    def build(b, groups=1, k=3):
        model = torch.nn.Sequential(torch.nn.Conv2d(16, 16, k, padding=k // 2, groups=groups, bias=False),
                                    torch.nn.Flatten(), torch.nn.Linear(16 * 8 * 8, 4))
        return {"model": model, "inputs": (torch.randn(b, 16, 8, 8),), "target": torch.randint(0, 4, (b,)),
                "loss": torch.nn.functional.cross_entropy, "optimizer": "sgd"}
    act, w = 2 * 16 * 8 * 8, 16 * 16 * 9
    base = (2 * act + w) * 4
    blocks = [s for s, _ in _workspace_blocks(build, 2)]
    # per step: forward, then weight gradient (the input needs no gradient: no backward-data call)
    assert blocks == [base, base + CUDNN_WGRAD_SCRATCH] * 3
    assert _workspace_blocks(lambda b: build(b, groups=16), 2) == []  # depthwise: native kernels
    assert _workspace_blocks(lambda b: build(b, k=1), 2) == []  # pointwise: a GEMM as it lies
