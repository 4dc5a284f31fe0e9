"""retry_went_on reads only the scanner sample (first 16 KiB) that holds the OOM: an error that follows the
retry announcement but lies just past the head sample is never seen, and a crash reads as "No failure"
(exit 0). The very shape of tests/test_explain_retry_recovered.py::test_an_error_after_the_retry_is_a_failure,
preceded by ~16 KiB of ordinary output. BUG (high): silences a real failure; the answer flips on log length."""

from oomdoctor.explain.rank import explain_text

OOM = ("OOM with chunk=200000: CUDA out of memory. Tried to allocate 149.01 GiB. GPU 0 has a total capacity of "
       "139.80 GiB of which 138.90 GiB is free. Including non-PyTorch memory, this process has 912.00 MiB memory "
       "in use. Of the allocated memory 0 bytes is allocated by PyTorch, and 0 bytes is reserved by PyTorch but "
       "unallocated.")
CRASH = ["retrying with chunk=100000", "chunk 1 of 2 done", "Traceback (most recent call last):", '  File "x.py", line 3, in <module>',
         "RuntimeError: chunk failed"]


def _pad(nbytes: int) -> list[str]:
    out, size, i = [], 0, 0
    while size < nbytes:
        ln = f"loading shard {i:05d} of the index from /data/shards ... ok"
        out.append(ln)
        size += len(ln) + 1
        i += 1
    return out


def test_short_log_is_a_failure():  # passes today
    assert len(explain_text([OOM] + CRASH).failures) >= 1


def test_same_log_with_16k_of_output_before_it_is_still_a_failure():
    # OOM and retry line inside the 16 KiB head; the head ends inside "chunk 1 of 2 done", the traceback follows
    head = 16 * 1024 - (len(OOM) + 1) - (len(CRASH[0]) + 1) - 8
    pad = _pad(head - 80)
    pad += ["x" * (head - sum(len(x) + 1 for x in pad) - 1)]
    lines = pad + [OOM] + CRASH
    assert sum(len(x) + 1 for x in lines[:-4]) < 16 * 1024 < sum(len(x) + 1 for x in lines[:-3])
    ex = explain_text(lines)
    assert len(ex.failures) >= 1, [(e.kind, e.line) for e in ex.events]


def test_crash_long_after_the_retry_in_a_long_log_is_not_no_failure():
    # a 20,000-line training log: caught OOM and retry at the top, a traceback at the end (in the tail sample)
    body = [f"step {i}: loss={1.0 / (i + 1):.4f}" for i in range(20000)]
    lines = [OOM, "retrying with chunk=100000"] + body + CRASH[2:]
    short = [OOM, "retrying with chunk=100000"] + body[:100] + CRASH[2:]
    # the same content must get the same verdict whatever the length of the middle
    assert bool(explain_text(lines).failures) == bool(explain_text(short).failures)
