"""Tracing under fake tensors: the breakdown terms of small models are checked exactly."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from oomdoctor.estimate.alloc_conf import AllocConf  # noqa: E402
from oomdoctor.estimate.allocator import replay, round_size  # noqa: E402
from oomdoctor.estimate.estimator import estimate  # noqa: E402
from oomdoctor.estimate.trace import trace_spec  # noqa: E402
from oomdoctor.workload.load import WorkloadSpec  # noqa: E402

R = AllocConf()


def _rounded(params) -> int:
    return sum(round_size(p.numel() * p.element_size(), R) for p in params)


def mlp_build(optimizer="adam", amp=None, train=True):
    def build(b):
        model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
        return {"model": model, "inputs": (torch.randn(b, 64),), "target": torch.randint(0, 10, (b,)),
                "loss": torch.nn.functional.cross_entropy, "optimizer": optimizer, "amp": amp, "train": train}
    return build


def _trace(build, b=8):
    holder = {}

    def make():
        spec = WorkloadSpec.from_dict(build(b))
        holder["spec"] = spec
        return spec
    trace, info = trace_spec(make)
    return trace, info, holder["spec"]


def test_mlp_adam_breakdown_is_exact():
    trace, info, spec = _trace(mlp_build("adam"))
    params = list(spec.model.parameters())
    assert info["parameter_bytes"] == sum(p.numel() * 4 for p in params)
    r = replay(trace.events)
    bd = trace.breakdown_at(r.peak_index, lambda n: round_size(n, R))
    assert bd["parameters"] == _rounded(params)
    assert bd["optimizer_state"] == 2 * _rounded(params)  # exp_avg + exp_avg_sq; Adam's step counters stay on the CPU
    assert bd["gradients"] == _rounded(params)
    assert trace.phase_at(r.peak_index).endswith("optimizer")


def test_sgd_has_no_optimizer_state_and_inference_has_no_gradients():
    trace, _, _ = _trace(mlp_build("sgd"))
    assert "optimizer_state" not in trace.categories.values()
    trace, _, _ = _trace(mlp_build(train=False))
    cats = set(trace.categories.values())
    assert "gradients" not in cats and "optimizer_state" not in cats


def test_gradients_freed_by_zero_grad_set_to_none():
    trace, _, _ = _trace(mlp_build("sgd"))
    end = len(trace.events) - 1
    live = trace.live_at(end)
    assert not [sid for sid in live if trace.categories.get(sid) == "gradients"]


def test_autocast_cast_cache_is_freed_after_the_step():
    trace, _, spec = _trace(mlp_build("sgd", amp="bf16"))
    w_half = {p.numel() * 2 for p in spec.model.parameters() if p.dim() == 2}
    sizes = {size for op, _, size, _ in trace.events if op == "a"}
    assert w_half <= sizes  # bf16 copies of the weights were made
    live = trace.live_at(len(trace.events) - 1)
    assert sum(live.values()) == sum(p.numel() * 4 for p in spec.model.parameters()) + 8 * 64 * 4 + 8 * 8 \
        + 32 * 2**20 * 2 + 2**20  # params + inputs + target + cuBLAS (2 threads) and cuBLASLt workspaces


def test_cnn_sgd_momentum_state_equals_trainable_parameters():
    def build(b):
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                    torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 4))
        return {"model": model, "inputs": (torch.randn(b, 3, 16, 16),), "target": torch.randint(0, 4, (b,)),
                "loss": torch.nn.functional.cross_entropy, "optimizer": "sgd-momentum"}
    trace, info, spec = _trace(build)
    r = replay(trace.events)
    bd = trace.breakdown_at(len(trace.events) - 1, lambda n: round_size(n, R))
    assert bd["optimizer_state"] == _rounded(spec.model.parameters())
    assert r.peak_reserved >= r.peak_allocated > 0
    assert info["uses_conv"]


class Blocks(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.GELU())
                                          for _ in range(6))
        self.ckpt = False

    def gradient_checkpointing_enable(self):
        self.ckpt = True

    def forward(self, x):
        for layer in self.layers:
            x = torch.utils.checkpoint.checkpoint(layer, x, use_reentrant=False) if self.ckpt else layer(x)
        return x.sum()


@pytest.mark.parametrize("ckpt", [False, True])
def test_gradient_checkpointing_lowers_activation_peak(ckpt):
    def build(b, ckpt=ckpt):
        return {"model": Blocks(), "inputs": (torch.randn(b, 256),), "loss": None, "optimizer": "sgd",
                "gradient_checkpointing": ckpt}
    est = estimate(build, 512)
    test_gradient_checkpointing_lowers_activation_peak.results[ckpt] = est.peak_allocated_bytes
    if len(test_gradient_checkpointing_lowers_activation_peak.results) == 2:
        res = test_gradient_checkpointing_lowers_activation_peak.results
        assert res[True] < res[False]


test_gradient_checkpointing_lowers_activation_peak.results = {}


def test_tiny_transformer_dropout_mask_is_bool_like_cuda():
    def build(b):
        layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, batch_first=True)
        return {"model": layer, "inputs": (torch.randn(b, 10, 32),), "loss": None, "optimizer": "adamw"}
    trace, _, _ = _trace(build, b=4)
    sizes = [size for op, _, size, _ in trace.events if op == "a"]
    assert 4 * 10 * 32 in sizes  # fused dropout's bool mask (1 byte per element), as on CUDA
    assert trace.marks[-1][1] == "step3/end"


def test_estimate_api_fits_and_limit():
    est = estimate(mlp_build("adam"), 8, memory_limit=1 << 30)
    assert est.fits is True
    assert est.process_total_bytes == est.peak_reserved_bytes + est.breakdown["context"]
    assert estimate(mlp_build("adam"), 8, memory_limit=1 << 20).fits is False


def test_estimate_module_leaves_the_real_model_alone():
    import oomdoctor

    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    before = [p.detach().clone() for p in model.parameters()]
    est = oomdoctor.estimate_module(model, lambda b: torch.randn(b, 64), 8, optimizer="adam")
    by_file = estimate(mlp_build("adam"), 8)
    assert est.breakdown["optimizer_state"] == by_file.breakdown["optimizer_state"]
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))
    assert all(p.grad is None for p in model.parameters())



class _LayerDropNet(torch.nn.Module):
    """Stochastic depth as Hugging Face writes it: a uniform scalar draw per layer, compared in Python."""

    def __init__(self, p: float, style: str):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(64, 64) for _ in range(4))
        self.p, self.style = p, style

    def forward(self, x):
        for layer in self.layers:
            if self.style == "none":
                x = torch.relu(layer(x))
                continue
            draw = torch.rand([]) if self.style == "rand" else torch.rand_like(x[0, 0])
            skip = self.training and draw < self.p  # wav2vec2: `if not skip`; BART: `if draw < p: continue`
            if not skip:
                x = torch.relu(layer(x))
        return x


def _layerdrop_build(p, style):
    def build(b):
        return {"model": _LayerDropNet(p, style), "inputs": (torch.randn(b, 64),), "target": torch.randn(b, 64),
                "loss": torch.nn.functional.mse_loss, "optimizer": "adamw"}
    return build


@pytest.mark.parametrize("style", ["rand", "rand_like"])
def test_layerdrop_control_flow_traces_every_layer(style):
    """Fake tensors hold no values, so `if torch.rand([]) < p` cannot be decided (DataDependentOutput);
    the draw is made to hold the top of [0, 1): the step traced runs every layer, whatever p < 1."""
    plain = _trace(_layerdrop_build(0.0, "none"))[0]
    base = [n for op, _, n, _ in plain.events if op == "a"]
    for p in (0.0, 0.5, 0.99):
        trace = _trace(_layerdrop_build(p, style))[0]
        allocs = [n for op, _, n, _ in trace.events if op == "a"]
        # the same storages as without layerdrop, plus each draw (4 bytes) and its comparison (1 byte),
        # a 512-byte block each, one per layer and step, freed right after
        assert [n for n in allocs if n not in (1, 4)] == [n for n in base if n not in (1, 4)]
        assert allocs.count(4) - base.count(4) == allocs.count(1) - base.count(1) == 4 * 3
        assert replay(trace.events).peak_allocated == replay(plain.events).peak_allocated


def test_only_single_element_uniform_draws_hold_values():
    """Draws of more than one element, and integer draws, stay plain fake tensors."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from oomdoctor.estimate.trace import _draw_that_keeps

    with FakeTensorMode():
        big, one, ints = torch.rand(8), torch.rand(1, dtype=torch.bfloat16), torch.randint(0, 3, ())
    assert _draw_that_keeps(big) is big and _draw_that_keeps(ints) is ints
    kept = _draw_that_keeps(one)
    assert kept.constant is not None and kept.shape == one.shape and kept.dtype == torch.bfloat16
    with kept.fake_mode:
        assert not bool(kept < 0.99) and bool(kept < 1.0)
