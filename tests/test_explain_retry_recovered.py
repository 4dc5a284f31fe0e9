"""A program that caught its own OOM, said it retries, and went on (explain/recovery.py retry_went_on).

From the GPU run of session 14 (validation/explain_logs_gpu.py retry_smaller_chunks: a false alarm then; the
case drove the rule, so it is no longer held out). The variants below are the ways the same shape must stay a
failure.
"""

from __future__ import annotations

from pathlib import Path

from oomdoctor.explain.rank import explain_text

LOG = Path(__file__).resolve().parent.parent / "validation" / "results" / "explain_logs_h200_s14" / "retry_smaller_chunks.log"
OOM = ("OOM with chunk=200000: CUDA out of memory. Tried to allocate 149.01 GiB. GPU 0 has a total capacity of "
       "139.80 GiB of which 138.90 GiB is free. Including non-PyTorch memory, this process has 912.00 MiB memory "
       "in use. Of the allocated memory 0 bytes is allocated by PyTorch, and 0 bytes is reserved by PyTorch but "
       "unallocated.")


def failures(lines: list[str]) -> int:
    return len(explain_text(lines).failures)


def test_the_gpu_runs_retry_loop_is_recovered():
    ex = explain_text(LOG.read_text().splitlines())
    assert not ex.failures and ex.events


def test_retry_then_done_is_recovered_with_other_wordings():
    for retry in ("Retrying with a smaller chunk (100000)", "falling back to CPU for this chunk",
                  "reducing batch size to 16 and trying again", "[retry] halving the chunk"):
        assert failures([OOM, retry, "chunk 2 of 2 done", "all done"]) == 0, retry


def test_no_retry_announcement_stays_a_failure():
    assert failures([OOM, "chunk 2 of 2 done"]) == 1


def test_an_error_after_the_retry_is_a_failure():
    assert failures([OOM, "retrying with chunk=100000", "Traceback (most recent call last):",
                     '  File "x.py", line 3, in <module>', "RuntimeError: chunk failed"]) >= 1


def test_nothing_after_the_retry_is_a_failure():
    # the log ends on the announcement: whether the retry worked is not shown
    assert failures([OOM, "retrying with chunk=100000"]) == 1


def test_a_raised_oom_is_not_caught_by_a_retry_line():
    assert failures(["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
                     "retrying with chunk=100000", "done"]) == 1


def test_another_ranks_retry_line_does_not_cover_this_oom():
    assert failures(["[rank0]: " + OOM, "[rank1]: retrying with chunk=100000", "[rank1]: done"]) == 1


def test_a_second_oom_after_the_retry_is_a_failure():
    assert failures([OOM, "retrying with chunk=100000", OOM.replace("200000", "100000"), "giving up"]) >= 1
