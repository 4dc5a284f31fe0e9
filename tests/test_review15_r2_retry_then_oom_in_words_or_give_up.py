"""retry_went_on counts a retry as successful although the lines after it say it failed.

docs/explain.md ("Recovered OOMs") promises the retry rule fires only "when the log then goes on with no
error, memory line or new OOM"; the code only requires one line without a memory word and lets memory lines
through (MEMORY_WORD is not checked against `rest` except to find one non-memory line), and it does not
know failure words other than error/exception/traceback/abort/fault/killed/fatal/terminate.
BUG (high): real failures of a program's retry loop read "No failure", exit 0."""

import pytest

from oomdoctor.explain.rank import explain_text

OOM = ("OOM with batch_size=64: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
       "23.55 GiB of which 1.00 GiB is free. Including non-PyTorch memory, this process has 22.50 GiB memory "
       "in use. Of the allocated memory 21.00 GiB is allocated by PyTorch, and 1.00 GiB is reserved by PyTorch but "
       "unallocated.")


@pytest.mark.parametrize("after", [
    # the retry ran out of memory again, said in the program's own words (a memory line: the docs exclude these)
    ["retrying with batch_size=32", "Still out of memory at batch_size=32.", "Done."],
    ["retrying with batch_size=32", "CUDA OOM again at batch_size=32", "done"],
    ["retrying with batch_size=32", "Failed again: not enough GPU memory", "Stopping."],
    # the program gave up
    ["retrying with batch_size=32", "retrying with batch_size=16", "giving up: no batch size fits", "exit status 1"],
    ["Retrying (attempt 2 of 3)", "All 3 attempts failed.", "Job exited with code 1"],
    ["Retrying in 5 seconds...", "Retrying in 5 seconds...", "Max retries exceeded", "FAILED"],
])
def test_a_retry_that_failed_is_not_recovered(after):
    ex = explain_text([OOM] + after)
    assert len(ex.failures) >= 1, after
