"""JUDGEMENT CALL (medium-low): one ordinary line after the retry announcement is enough for "recovered".
A job SIGKILLed by the host OOM killer after falling back to CPU, or by the scheduler, often leaves no line
(the "Killed" comes from the shell, which a `kubectl logs` / Slurm output file may not hold), and the log
then ends one line after the announcement: exit 0, "No failure". `--bundle` would add the kill, text alone
cannot; requiring the program to show progress past the retry (more than one line, or a completion word:
done/finished/saved/completed) would keep the session-14 log recovered ("nearest neighbours done ...")."""

from oomdoctor.explain.rank import explain_text

OOM = ("OOM with chunk=200000: CUDA out of memory. Tried to allocate 149.01 GiB. GPU 0 has a total capacity of "
       "139.80 GiB of which 138.90 GiB is free. Including non-PyTorch memory, this process has 912.00 MiB memory "
       "in use. Of the allocated memory 0 bytes is allocated by PyTorch, and 0 bytes is reserved by PyTorch but "
       "unallocated.")


def test_fallback_then_one_progress_line_then_nothing_is_not_no_failure():
    assert explain_text([OOM, "Falling back to CPU", "Processing 1/1000"]).failures
