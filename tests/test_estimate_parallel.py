"""Per-rank memory (estimate/parallel.py): the ZeRO arithmetic (DDP/FSDP2 are traced, see test_estimate_parallel_trace.py)."""

from __future__ import annotations

import pytest

from oomdoctor.estimate.parallel import per_rank

MiB = 1 << 20
BD = {"parameters": 800 * MiB, "gradients": 800 * MiB, "optimizer_state": 1600 * MiB, "activations": 300 * MiB,
      "workspace": 64 * MiB, "allocator_cache": 36 * MiB, "context": 700 * MiB}
PEAK = sum(v for k, v in BD.items() if k != "context")


def test_ddp_adds_the_bucket_copy_of_the_gradients():
    r = per_rank(BD, PEAK, "ddp", 8)
    assert r["peak_reserved_bytes"] == PEAK + 800 * MiB and r["validated_on_hardware"] is False
    assert per_rank(BD, PEAK, "ddp", 1)["peak_reserved_bytes"] == PEAK


def test_zero2_shards_gradients_and_state_only():
    r = per_rank(BD, PEAK, "zero2", 8)
    assert r["breakdown"]["parameters"] == 800 * MiB
    assert r["breakdown"]["gradients"] == 100 * MiB and r["breakdown"]["optimizer_state"] == 200 * MiB
    assert r["peak_reserved_bytes"] == PEAK - 700 * MiB - 1400 * MiB


@pytest.mark.parametrize("strategy", ["zero3", "fsdp"])
def test_full_shard_keeps_two_gathered_blocks(strategy):
    r = per_rank(BD, PEAK, strategy, 8, block_bytes=50 * MiB)
    assert r["breakdown"]["parameters"] == 100 * MiB + 100 * MiB
    assert r["breakdown"]["gradients"] == 100 * MiB + 100 * MiB
    assert r["peak_reserved_bytes"] < per_rank(BD, PEAK, "zero2", 8)["peak_reserved_bytes"]


def test_hybrid_shards_within_the_group():
    hy = per_rank(BD, PEAK, "fsdp-hybrid", 16, block_bytes=50 * MiB, shard_size=8)
    full8 = per_rank(BD, PEAK, "fsdp", 8, block_bytes=50 * MiB)
    assert hy["peak_reserved_bytes"] == full8["peak_reserved_bytes"] and hy["shard_size"] == 8
    with pytest.raises(ValueError):
        per_rank(BD, PEAK, "fsdp-hybrid", 16, shard_size=3)
    with pytest.raises(ValueError):
        per_rank(BD, PEAK, "pipeline", 4)


def test_sharding_every_phase_can_move_the_peak():
    backward = (PEAK, dict(BD, gradients=0))  # the single-GPU peak: gradients not made yet
    optimizer = (PEAK - 300 * MiB, dict(BD, activations=0))
    r = per_rank(BD, PEAK, "ddp", 8, phases={"step2/backward": backward, "step2/optimizer": optimizer})
    # DDP's bucket copy of the gradients makes the optimizer step the per-rank peak
    assert r["peak_phase"] == "step2/optimizer" and r["peak_reserved_bytes"] == PEAK + 500 * MiB


def test_every_strategy_says_what_hardware_said_about_it():
    from oomdoctor.estimate.parallel import STRATEGIES, VALIDATION, per_rank

    bd = {"parameters": 4 << 30, "gradients": 4 << 30, "optimizer_state": 8 << 30, "activations": 2 << 30,
          "context": 700 << 20}
    for s in STRATEGIES:
        r = per_rank(bd, 20 << 30, s, 4, block_bytes=256 << 20, shard_size=2 if s == "fsdp-hybrid" else None)
        assert r["validated_on_hardware"] is False and r["validation"] == VALIDATION[s]
    assert "+12.8%" in VALIDATION["fsdp"] and "DeepSpeed" in VALIDATION["zero3"] and "traced" in VALIDATION["ddp"]


@pytest.mark.parametrize("strategy, ranks, shard_size", [("zero2", 8, None), ("zero3", 8, None), ("fsdp", 8, None),
                                                         ("fsdp-hybrid", 16, 8)])
def test_a_sharded_optimizer_step_shards_its_temporaries(strategy, ranks, shard_size):
    """Under ZeRO/FSDP each rank steps its shard: the step's temporaries (foreach AdamW's intermediates) are a
    shard's, as the traced per-rank path records them, and the peak falls by what they shed."""
    temps = 800 * MiB
    with_temps = per_rank(dict(BD, optimizer_temporaries=temps), PEAK + temps, strategy, ranks,
                          block_bytes=50 * MiB, shard_size=shard_size)
    without = per_rank(BD, PEAK, strategy, ranks, block_bytes=50 * MiB, shard_size=shard_size)
    assert with_temps["breakdown"]["optimizer_temporaries"] == temps // 8
    assert with_temps["peak_reserved_bytes"] == without["peak_reserved_bytes"] + temps // 8
    assert with_temps["breakdown"]["allocator_cache"] == without["breakdown"]["allocator_cache"]


def test_ddp_steps_every_parameter_so_its_temporaries_stay_whole():
    temps = 800 * MiB
    r = per_rank(dict(BD, optimizer_temporaries=temps), PEAK + temps, "ddp", 8)
    assert r["breakdown"]["optimizer_temporaries"] == temps
    assert r["peak_reserved_bytes"] == per_rank(BD, PEAK, "ddp", 8)["peak_reserved_bytes"] + temps


def test_the_temporaries_key_is_the_tracers():
    from oomdoctor.estimate.memtrace import OPTIMIZER_TEMPORARIES
    from oomdoctor.estimate.parallel import TEMPORARIES

    assert TEMPORARIES == OPTIMIZER_TEMPORARIES
