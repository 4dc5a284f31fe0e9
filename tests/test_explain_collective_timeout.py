"""GIVEN a rank's log in which a collective waited until the process group's timeout (NCCL's watchdog, gloo)
WHEN explain reads it, alone or beside another rank's OOM
THEN the timeout is no event and no cause: a note says the rank waited for another one and how to find that
rank's log; an OOM in the same log is still the answer. Lines in the formats PyTorch prints (2.x with the rank
prefix, 1.x without, gloo's receive timeout); numbers are ours."""

from __future__ import annotations

import pytest

from oomdoctor.explain.rank import explain_text

NCCL_2X = [
    "[rank1]:[E1128 10:31:12.123456 4469 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=52, OpType=ALLREDUCE, NumelIn=26214400, NumelOut=26214400, Timeout(ms)=600000) ran for "
    "600012 milliseconds before timing out.",
    "[rank1]:[E1128 10:31:12.124100 4469 ProcessGroupNCCL.cpp:630] [Rank 1] Some NCCL operations have failed or timed "
    "out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete "
    "data.",
]
NCCL_1X = ["[E ProcessGroupNCCL.cpp:737] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4690, "
           "OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1802212 milliseconds before timing out."]
GLOO = ["RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.0.2]:1234",
        "RuntimeError: [/opt/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms for recv operation "
        "to complete"]
OOM_RANK0 = ["[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
             "capacity of 79.10 GiB of which 1.20 GiB is free. Including non-PyTorch memory, this process has 77.88 GiB "
             "memory in use. Of the allocated memory 74.10 GiB is allocated by PyTorch, and 2.31 GiB is reserved by "
             "PyTorch but unallocated."]


@pytest.mark.parametrize("lines", [NCCL_2X, NCCL_1X, GLOO], ids=["nccl-2.x", "nccl-1.x", "gloo"])
def test_a_timeout_alone_is_a_note_not_an_event(lines):
    ex = explain_text(lines)
    assert ex.events == [] and ex.primary is None
    (note,) = [n for n in ex.notes if "waited for a rank of the job" in n]
    assert "oomdoctor explain" in note and "--log-dir" in note


def test_an_oom_beside_the_timeout_is_still_the_answer():
    ex = explain_text(OOM_RANK0 + NCCL_2X)
    assert ex.primary is not None and ex.primary.kind == "torch_oom"
    assert any("waited for a rank of the job" in n for n in ex.notes)


def test_no_note_without_a_timeout():
    assert not any("collective" in n for n in explain_text(OOM_RANK0).notes)
    # a timeout mentioned in prose or in a setting is no timeout
    assert not explain_text(["set NCCL_TIMEOUT=1800 and ddp_timeout=7200 to avoid timing out"]).notes


def test_a_long_run_that_ends_in_the_timeout_still_gets_the_note():
    """Whole-log hints stop after 8 MiB; a long run's timeout comes at its end, in the sampled tail."""
    training = [f"step {i} loss 2.{i % 1000:03d} lr 3e-4 grad_norm 1.{i % 97:02d}" for i in range(240_000)]
    assert sum(len(x) + 1 for x in training) > 9 << 20
    ex = explain_text(training + NCCL_2X)
    assert ex.events == []
    (note,) = [n for n in ex.notes if "collective (ALLREDUCE) timed out: a rank in this log waited" in n]
