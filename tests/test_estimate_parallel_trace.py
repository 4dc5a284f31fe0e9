"""Rank 0 of DDP / FSDP2 traced over torch's fake process group (estimate/parallel_trace.py), on the CPU.

Small Llama configurations: what each wrapper allocates must appear where torch allocates it (DDP's
gradient buckets, FSDP2's shards, its communication streams, its unsharded parameters freed with
storage.resize_(0)), and the process group must be gone afterwards."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from oomdoctor.estimate import hf  # noqa: E402
from oomdoctor.estimate.allocator import replay  # noqa: E402
from oomdoctor.estimate.estimator import trace_for  # noqa: E402
from oomdoctor.estimate.parallel_trace import Plan  # noqa: E402

CONFIG = {"model_type": "llama", "vocab_size": 4096, "hidden_size": 256, "intermediate_size": 688,
          "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4,
          "max_position_embeddings": 1024, "tie_word_embeddings": False}


def _trace(plan, task="train", batch=2):
    cfg = hf.load_config_dict(dict(CONFIG))
    build = hf.make_build(cfg, hf.Recipe(task=task, seq_len=128, dtype="bf16").check())
    return trace_for(build, batch, parallel=plan)


def _cats(trace, cat):
    return {sid: size for op, sid, size, _ in trace.events if op == "a" and trace.categories.get(sid) == cat}


@pytest.fixture(scope="module")
def single():
    return _trace(None)


def test_ddp_adds_one_bucket_copy_of_the_gradients(single):
    import torch.distributed as dist

    trace, info = _trace(Plan("ddp", 4))
    assert not dist.is_initialized()  # the fake group is destroyed after the trace
    params = info["parameter_bytes"]
    # the single-GPU trace labels each step's gradients; DDP adds buckets made at wrap time
    buckets = sum(_cats(trace, "gradients").values()) - sum(_cats(single[0], "gradients").values())
    assert buckets == pytest.approx(params, rel=0.02)
    assert {e[3] for e in trace.events} == {0}  # DDP allocates on the default stream only
    assert replay(trace.events).peak_allocated > replay(single[0].events).peak_allocated


def test_ddp_rank_holding_its_old_buckets_allocates_a_second_set_in_step_2():
    """Plan.rebuild_held: the rank on which DDP's bucket rebuild holds the old buckets (a race seen on 4 H200s) gets a
    second bucket set from the second forward to the third, in DDP's bucket sizes; the plain trace does not."""
    plain, info = _trace(Plan("ddp", 4))
    held, _ = _trace(Plan("ddp", 4, rebuild_held=True))
    extra = sum(size for op, _, size, _ in held.events if op == "a") - sum(size for op, _, size, _ in plain.events if op == "a")
    grads = info["parameter_bytes"]  # bf16 weights, bf16 gradients: one gradient copy is the weights' size
    assert extra == pytest.approx(grads, rel=0.02)
    sizes = sorted({size for op, _, size, _ in held.events if op == "a"} - {size for op, _, size, _ in plain.events if op == "a"})
    assert sizes and max(sizes) <= 26 << 20  # buckets of at most ~25 MiB, not one whole-gradient block
    assert replay(held.events).peak_allocated >= replay(plain.events).peak_allocated + grads * 0.9
    # the held set is dropped again (at the third forward): every bucket-sized block allocated in step 2 is freed
    new_ids = {sid for op, sid, size, _ in held.events if op == "a" and size in set(sizes)}
    freed = {sid for op, sid, _, _ in held.events if op == "f"}
    assert new_ids and new_ids <= freed


def test_rank_fits_uses_the_worst_rank_where_traced():
    from oomdoctor.estimate.parallel import rank_fits

    assert rank_fits({"peak_reserved_bytes": 10}, 10)
    assert not rank_fits({"peak_reserved_bytes": 10, "worst_rank_reserved_bytes": 12}, 11)


def test_fsdp_shards_parameters_and_state_and_uses_its_streams(single):
    trace, info = _trace(Plan("fsdp", 4))
    sharded = sum(size for sid, size in _cats(trace, "parameters").items()
                  if not any(op == "f" and s == sid for op, s, _, _ in trace.events))
    assert sharded == pytest.approx(info["parameter_bytes"] / 4, rel=0.05)  # whole parameters left the trace
    state = _cats(trace, "optimizer_state")
    assert sum(state.values()) == pytest.approx(sum(_cats(single[0], "optimizer_state").values()) / 4, rel=0.05)
    streams = {e[3] for e in trace.events}
    assert len(streams) >= 3  # default, all-gather copy-in, reduce-scatter


def test_storage_resize_is_a_free_and_a_new_allocation():
    """FSDP2 frees unsharded parameters with storage.resize_(0) and brings them back with
    resize_(size), which does not dispatch: the recorder must see both."""
    import torch.nn as nn

    class Resizing(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(256, 256)

        def forward(self, x):
            scratch = torch.empty(1 << 20, device=x.device)  # 4 MiB, kept across the resizes
            st = scratch.untyped_storage()
            st.resize_(0)
            big = torch.empty(1 << 20, device=x.device)  # can reuse the freed bytes
            st.resize_(4 << 20)
            return self.lin(x).sum() + big.sum() + scratch[:1].sum()

    def build(b):
        return {"model": Resizing(), "inputs": torch.randn(b, 256), "optimizer": "sgd"}

    trace, _ = trace_for(build, 2)
    sizes = [size for op, _, size, _ in trace.events if op == "a" and size == 4 << 20]
    # per step: scratch, big, scratch again after its resize back
    assert len(sizes) == 9
    step1 = [e for e in trace.events if e[2] == 4 << 20 or e[0] == "f"]
    assert any(op == "f" for op, *_ in step1)


def test_fsdp_peak_below_a_whole_unsharded_copy(single):
    """Without the resize_ frees, every block's unsharded parameters would stay live after its forward:
    the per-rank peak would carry a whole unsharded model (parameter_bytes) on top of the shards."""
    tr, info = _trace(Plan("fsdp", 4))
    fsdp = replay(tr.events).peak_allocated
    act = replay(single[0].events).peak_allocated - sum(_cats(single[0], "parameters").values())
    assert fsdp < act + info["parameter_bytes"] * 0.9


def test_hybrid_shards_within_the_shard_group():
    hy, info = _trace(Plan("fsdp-hybrid", 4, shard_size=2))
    full, _ = _trace(Plan("fsdp", 2))
    state_hy = sum(_cats(hy, "optimizer_state").values())
    assert state_hy == sum(_cats(full, "optimizer_state").values())  # 2 ranks per shard group


def test_lora_under_fsdp_traces():
    trace, info = _trace(Plan("fsdp", 2), task="lora")
    assert replay(trace.events).peak_reserved > 0
    assert sum(_cats(trace, "optimizer_state").values()) < info["parameter_bytes"] / 20


def test_cli_reports_traced_per_rank(tmp_path, capsys):
    import json

    from oomdoctor.cli import main

    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    rc = main(["estimate", "--model", str(tmp_path / "config.json"), "--task", "train", "--batch-size", "2",
               "--seq-len", "128", "--parallel", "fsdp", "--ranks", "4", "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    rank = out["per_rank"]
    assert rc == 0 and rank["traced"] is True and rank["validated_on_hardware"] is False
    assert rank["strategy"] == "fsdp" and "2 H200" in rank["validation"]
    # sharded state; on a model this small FSDP2's stream pools can cost more than sharding saves
    assert 0 < rank["breakdown"]["optimizer_state"] <= out["breakdown"]["optimizer_state"] / 3
    assert "worst_rank_reserved_bytes" not in rank  # only DDP has a racing rebuild


def test_cli_ddp_reports_the_worst_rank_and_fits_on_it(tmp_path, capsys):
    import json

    from oomdoctor.cli import main

    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    args = ["estimate", "--model", str(tmp_path / "config.json"), "--task", "train", "--batch-size", "2",
            "--seq-len", "128", "--parallel", "ddp", "--ranks", "4"]
    main(args + ["--format", "json"])
    rank = json.loads(capsys.readouterr().out)["per_rank"]
    assert rank["worst_rank_reserved_bytes"] >= rank["peak_reserved_bytes"]
    between = (rank["worst_rank_reserved_bytes"] + rank["peak_reserved_bytes"]) // 2
    assert rank["worst_rank_reserved_bytes"] > rank["peak_reserved_bytes"]
    # a limit only the plain rank fits under: the job does not fit, and the exit code says so
    assert main(args + ["--memory-limit", str(between), "--format", "json"]) == 1
    assert json.loads(capsys.readouterr().out)["per_rank"]["fits"] is False
    main(args)
    from oomdoctor.units import format_bytes

    worst = next(ln for ln in capsys.readouterr().out.splitlines() if "worst rank" in ln)
    assert format_bytes(rank["worst_rank_reserved_bytes"]) in worst and "bucket rebuild" in worst


def test_zero2_emulation_holds_deepspeeds_tensors(single):
    """ZeRO-2 as DeepSpeed allocates it: flat bf16 parameters (whole), an fp32 master partition and
    fp32 AdamW state over it (1/N each), a 5e8-element bf16 reduce bucket during backward, freed at
    the step."""
    from oomdoctor.estimate.deepspeed_emulation import ZERO_REDUCE_BUCKET

    trace, info = _trace(Plan("zero2", 4))
    params = info["parameter_bytes"]
    n_params = params // 2  # bf16
    state = sum(_cats(trace, "optimizer_state").values())
    assert state == pytest.approx(12 * n_params / 4, rel=0.02)  # master + exp_avg + exp_avg_sq, fp32
    flat = [s for sid, s in _cats(trace, "parameters").items()
            if not any(op == "f" and x == sid for op, x, _, _ in trace.events)]
    assert sum(flat) == pytest.approx(params, rel=0.01)  # the parameters stay whole, in one buffer
    buckets = [sid for sid, s in _cats(trace, "gradients").items() if s == 2 * ZERO_REDUCE_BUCKET]
    assert len(buckets) == 3  # one per step's backward
    assert all(any(op == "f" and x == sid for op, x, _, _ in trace.events) for sid in buckets)


def test_zero3_emulation_partitions_and_gathers(single):
    """ZeRO-3: parameters, fp32 master and gradient partitions at 1/N; each module's parameters gathered
    whole on a side stream (kept up to stage3_max_live_parameters), the bucket flattened on another."""
    trace, info = _trace(Plan("zero3", 4))
    n_params = info["parameter_bytes"] // 2
    streams = {e[3] for e in trace.events}
    assert len(streams) == 3  # default, all-gather, reduce-scatter
    state = sum(_cats(trace, "optimizer_state").values())
    assert state == pytest.approx(12 * n_params / 4, rel=0.05)  # master + exp_avg + exp_avg_sq
    gathered = [s for op, sid, s, st in trace.events if op == "a" and st != 0 and trace.categories.get(sid) == "parameters"]
    assert sum(gathered) >= info["parameter_bytes"] * 0.9  # every step gathers the model at least once
    from oomdoctor.estimate.deepspeed_emulation import ZERO_REDUCE_BUCKET

    peak = replay(trace.events).peak_allocated  # DeepSpeed's bucket is 5e8 elements whatever the model
    assert 2 * ZERO_REDUCE_BUCKET < peak < replay(single[0].events).peak_allocated + 2 * ZERO_REDUCE_BUCKET + info["parameter_bytes"]


def test_a_process_with_its_own_process_group_gets_a_usage_error():
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from oomdoctor.errors import UsageError

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    try:
        with pytest.raises(UsageError):
            _trace(Plan("ddp", 2))
    finally:
        dist.destroy_process_group()
    assert not dist.is_initialized()


@pytest.mark.parametrize("strategy", ["fsdp", "zero2", "zero3"])
def test_traced_and_analytic_per_rank_shard_the_optimizer_temporaries_alike(strategy):
    """Each rank of ZeRO/FSDP steps its own shard: the traced step's temporaries (foreach AdamW's) fall
    with the ranks, and the arithmetic per-rank figure (parallel.per_rank) divides them the same way."""
    from oomdoctor.estimate.parallel import per_rank

    cfg = hf.load_config_dict(dict(CONFIG))
    recipe = hf.Recipe(task="train", seq_len=128, dtype="bf16").check()
    phase = "step2/optimizer"

    def temps(est):
        return est.details["phases"][phase][1]["optimizer_temporaries"]

    one = hf.estimate_model(cfg, recipe, 2)
    two, four = (hf.estimate_model(cfg, recipe, 2, parallel=Plan(strategy, n)) for n in (2, 4))
    assert temps(two) == pytest.approx(2 * temps(four), rel=0.02)  # traced: a shard's
    reserved, bd = one.details["phases"][phase]
    for n, traced in ((2, two), (4, four)):
        analytic = per_rank(bd, reserved, strategy, n, block_bytes=one.details["block_bytes"])
        assert analytic["breakdown"]["optimizer_temporaries"] == pytest.approx(temps(one) / n, rel=0.01)
        if strategy == "fsdp":  # FSDP2 steps the bf16 shard as one GPU steps the bf16 model
            assert analytic["breakdown"]["optimizer_temporaries"] == pytest.approx(temps(traced), rel=0.02)
