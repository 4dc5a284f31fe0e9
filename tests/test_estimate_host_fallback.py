"""Fake tensors' real CPU run of an op without a meta kernel is bounded (estimate/host_fallback.py).

MultiMarginLoss's backward has no meta kernel: FakeTensorMode runs it for real on zero-filled CPU tensors of the
full size (8 GB and 45 s at batch 1M, measured), and a --max-batch search doubles the batch past any size. A run
over the limit is refused before anything is made. The big case is never run here: the limit is made small, and a
spy on torch's fallback records every run it makes and refuses (instead of making) anything over 1 MiB, so that
a missing bound fails these tests rather than the machine.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from oomdoctor.cli import main  # noqa: E402

# MultiMarginLoss's backward has no meta kernel in torch 2.x: its input (batch x 1000 fp32) is made real
MARGIN_LOSS = """import torch


def build(batch_size):
    return {"model": torch.nn.Linear(64, 1000), "inputs": torch.randn(batch_size, 64),
            "target": torch.randint(0, 1000, (batch_size,)), "loss": torch.nn.MultiMarginLoss(), "optimizer": "sgd"}
"""

LIMIT = 64 << 10  # batch 8 runs (2 x 32,068 bytes), batch 16 does not (2 x 64,132)
OP = "aten.multi_margin_loss_backward"


@pytest.fixture
def real_runs(monkeypatch):
    """The ops torch's fallback ran for real, with their inputs' bytes; one over 1 MiB is not run (a test of a
    missing bound must not become the big case)."""
    import torch
    from torch._subclasses import fake_tensor

    runs: list[tuple[str, int]] = []
    real = fake_tensor.run_fallback_kernel
    # fake tensors cache an op's outputs by its inputs' shapes, for the process: a run made by an earlier test
    # would not be made again
    monkeypatch.setattr(fake_tensor.FakeTensorMode, "cache", {})

    def spy(mode, func, flat_args, *rest, **kw):
        size = sum(a.numel() * a.element_size() for a in flat_args if isinstance(a, torch.Tensor))
        runs.append((str(func), size))
        if size > 1 << 20:
            raise AssertionError(f"{func} ran for real on {size} bytes")
        return real(mode, func, flat_args, *rest, **kw)

    monkeypatch.setattr(fake_tensor, "run_fallback_kernel", spy)
    return runs


@pytest.fixture
def margin(tmp_path):
    p = tmp_path / "margin.py"
    p.write_text(MARGIN_LOSS)
    return p


@pytest.fixture
def small_limit(monkeypatch):
    from oomdoctor.estimate import host_fallback

    monkeypatch.setattr(host_fallback, "LIMIT_CAP", LIMIT)


def test_a_cpu_run_over_the_limit_is_refused_before_it_runs(margin, real_runs, small_limit, capfd):
    import torch

    assert main(["estimate", str(margin), "--batch-size", "64"]) == 2
    out, err = capfd.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1, err
    assert f"{margin}: {OP} has no meta (fake tensor) implementation in torch {torch.__version__}" in err
    assert "a limit of estimating without a GPU, not an error of the workload" in err
    assert f"oomdoctor max-batch {margin}" in err and "replace the op" in err
    # the size it would have needed on the host (2 x (64 x 1000 x 4 + 64 x 8 + 4)), and the limit
    assert "about 501.01 KiB of host memory" in err and "64.00 KiB" in err
    assert not [r for r in real_runs if OP in r[0]]  # nothing was made


def test_the_bound_leaves_torch_as_it_was(margin, real_runs, small_limit):
    from torch._subclasses import fake_tensor

    spy = fake_tensor.run_fallback_kernel
    assert main(["estimate", str(margin), "--batch-size", "64"]) == 2
    assert main(["estimate", str(margin), "--batch-size", "4"]) == 0
    assert fake_tensor.run_fallback_kernel is spy


def test_a_cpu_run_under_the_limit_still_runs(margin, real_runs, small_limit):
    assert main(["estimate", str(margin), "--batch-size", "8"]) == 0
    assert [size for op, size in real_runs if OP in op] == [4 + 8 * 4000 + 8 * 8]


def test_the_limit_is_a_share_of_the_memory_the_host_has(margin, real_runs, monkeypatch, capfd):
    """The CLI reads what the host (and the process's cgroup) has available and allows a quarter of it, between
    LIMIT_FLOOR and LIMIT_CAP: a cgroup with 512 MiB left allows a 128 MiB run, and batch 40000 needs ~306 MiB."""
    from oomdoctor.collectors import machine
    from oomdoctor.facts import Fact, FactSet

    monkeypatch.setattr(machine, "collect_host_memory", lambda ctx=None: FactSet(
        [Fact("host.mem_available_bytes", 64 << 30, "test"), Fact("cgroup.memory_limit_bytes", 8 << 30, "test"),
         Fact("cgroup.memory_usage_bytes", (8 << 30) - (512 << 20), "test")]))
    assert main(["estimate", str(margin), "--batch-size", "40000"]) == 2
    assert "about 305.79 MiB of host memory, over the 128.00 MiB allowed" in capfd.readouterr().err
    assert not [r for r in real_runs if OP in r[0]]
    assert main(["estimate", str(margin), "--batch-size", "64"]) == 0


def test_limit_for_takes_a_quarter_of_what_is_available_within_a_floor_and_a_cap():
    from oomdoctor.estimate.host_fallback import LIMIT_CAP, LIMIT_FLOOR, available_from, limit_for
    from oomdoctor.facts import Fact, FactSet, Unavailable

    assert (LIMIT_CAP, LIMIT_FLOOR) == (1 << 30, 64 << 20)
    assert limit_for(None) == LIMIT_CAP
    assert limit_for(64 << 30) == LIMIT_CAP
    assert limit_for(2 << 30) == 512 << 20
    assert limit_for(100 << 20) == limit_for(0) == LIMIT_FLOOR
    assert available_from(FactSet([Fact("host.mem_available_bytes", 8 << 30, "t")])) == 8 << 30
    # a cgroup limit leaves only what it has not used
    assert available_from(FactSet([Fact("host.mem_available_bytes", 8 << 30, "t"),
                                   Fact("cgroup.memory_limit_bytes", 4 << 30, "t"),
                                   Fact("cgroup.memory_usage_bytes", 3 << 30, "t")])) == 1 << 30
    assert available_from(FactSet([Fact("host.mem_available_bytes", 8 << 30, "t"),
                                   Fact("cgroup.memory_limit_bytes", None, "t")])) == 8 << 30  # no limit
    assert available_from(FactSet([Unavailable("host.mem_available_bytes", "no /proc", "t")])) is None


def test_a_max_batch_search_stops_at_the_limit_with_the_largest_batch_it_traced(margin, real_runs, small_limit,
                                                                                 capfd):
    assert main(["estimate", str(margin), "--max-batch", "--memory-limit", "1GiB", "--format", "json"]) == 0
    out, err = capfd.readouterr()
    doc = json.loads(out)
    assert (doc["max_batch_size"], doc["max_batch_size_bound"]) == (8, "search_limit")
    assert doc["trials"] == {"1": True, "2": True, "4": True, "8": True}
    assert f"batch size 16: {OP} has no meta" in doc["search_stopped"]
    assert "host memory" in doc["search_stopped"]
    assert not [r for r in real_runs if OP in r[0] and r[1] > LIMIT]
    assert main(["estimate", str(margin), "--max-batch", "--memory-limit", "1GiB"]) == 0
    assert "at least 8 (the search stopped at 8: batch size 16: " in capfd.readouterr().out


def test_a_max_batch_search_whose_first_batch_is_over_the_limit_is_refused(margin, real_runs, monkeypatch, capfd):
    from oomdoctor.estimate import host_fallback

    monkeypatch.setattr(host_fallback, "LIMIT_CAP", 1024)
    assert main(["estimate", str(margin), "--max-batch", "--memory-limit", "1GiB"]) == 2
    err = capfd.readouterr().err
    assert len(err.strip().splitlines()) == 1 and f"{OP} has no meta" in err and "host memory" in err
    assert not [r for r in real_runs if OP in r[0]]


def test_the_python_api_takes_the_limit_as_a_parameter(margin, real_runs):
    from oomdoctor.errors import InputError
    from oomdoctor.estimate import estimator

    with pytest.raises(InputError, match="host memory"):
        estimator.estimate(str(margin), 64, cpu_fallback_limit=LIMIT)
    found = estimator.max_batch(str(margin), memory_limit=1 << 30, cpu_fallback_limit=LIMIT)
    assert (found.max_batch_size, found.bound) == (8, "search_limit")
    assert estimator.estimate(str(margin), 8, cpu_fallback_limit=LIMIT).peak_allocated_bytes > 0
    assert not [r for r in real_runs if OP in r[0] and r[1] > LIMIT]


def test_search_largest_ends_on_a_stop_with_the_largest_that_fitted():
    from oomdoctor.estimate.estimator import SearchStop, search_largest

    def fits(n: int) -> bool:
        if n > 40:
            raise SearchStop(f"batch size {n} cannot be traced")
        return n <= 100

    found = search_largest(fits, 1 << 20)
    assert (found.best, found.bound, found.stopped) == (32, "search_limit", "batch size 64 cannot be traced")

    def bisect_stops(n: int) -> bool:  # a stop in the bisection keeps what fitted so far
        if n == 96:
            raise SearchStop("no")
        return n <= 100

    found = search_largest(bisect_stops, 1 << 20)
    assert (found.best, found.bound) == (64, "search_limit")


# build() itself runs an op without a meta kernel (under the same fake tensors as the step)
IN_BUILD = """import torch


def build(batch_size):
    x = torch.randn(batch_size, 1000)
    t = torch.zeros(batch_size, dtype=torch.long)
    g = torch.ops.aten.multi_margin_loss_backward(torch.ones(()), x, t, 1, 1.0, None, 1)
    return {"model": torch.nn.Linear(1000, 2), "inputs": g, "optimizer": "sgd"}
"""


def test_a_run_over_the_limit_in_build_is_the_same_refusal(tmp_path, real_runs, small_limit, capfd):
    p = tmp_path / "in_build.py"
    p.write_text(IN_BUILD)
    assert main(["estimate", str(p), "--batch-size", "64"]) == 2
    err = capfd.readouterr().err
    assert len(err.strip().splitlines()) == 1 and f"{p}: {OP} has no meta" in err and "of host memory" in err
    assert "build(64) raised" not in err
    assert not [r for r in real_runs if OP in r[0]]
    assert main(["estimate", str(p), "--batch-size", "4"]) == 0


def test_a_torch_without_the_fallback_hook_runs_no_op_for_real(margin, monkeypatch, capfd):
    """Should torch rename the function the bound wraps, fake tensors make no real run at all: the op is refused
    as having no meta implementation, whatever its size, rather than run unbounded."""
    from torch._subclasses import fake_tensor

    monkeypatch.delattr(fake_tensor, "run_fallback_kernel")
    monkeypatch.setattr(fake_tensor.FakeTensorMode, "cache", {})
    assert main(["estimate", str(margin), "--batch-size", "4"]) == 2
    err = capfd.readouterr().err
    assert len(err.strip().splitlines()) == 1 and f"{OP} has no meta" in err


def test_bounds_of_two_traces_ended_out_of_order_leave_torch_as_it_was():
    """Two traces bounded at once (threads) that end in the other order: each used to swap the torch global in and
    out, so the first to end took the second's guard away and the second then left its own installed for good."""
    import contextlib

    import torch
    from torch._subclasses import fake_tensor
    from torch._subclasses.fake_tensor import FakeTensorMode

    from oomdoctor.estimate import host_fallback

    original = fake_tensor.run_fallback_kernel
    first, second = FakeTensorMode(), FakeTensorMode()
    one, two = contextlib.ExitStack(), contextlib.ExitStack()
    one.enter_context(host_fallback.bounded(first, 1))
    two.enter_context(host_fallback.bounded(second, 1))
    one.close()  # the first trace ends while the second still runs: its guard must stay
    assert fake_tensor.run_fallback_kernel is not original
    with pytest.raises(host_fallback.OverHostLimit):
        fake_tensor.run_fallback_kernel(second, "aten.op", [second.from_tensor(torch.zeros(1024))], None, None)
    two.close()
    assert fake_tensor.run_fallback_kernel is original
