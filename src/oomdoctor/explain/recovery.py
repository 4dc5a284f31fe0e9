"""Which OOMs a job caught and went on from (exit 0, reported as recovered, not as the job's failure).

A recovery line near an OOM (a batch-size finder's retry, fairseq's "attempting to recover", a skipped
batch; kinds.RECOVERY), TensorFlow's INFO-level allocation failures followed by the program's own
output, and a loop that printed its OOM and went on to its next item. Pure: events and the scanner's
samples in, events out.
"""

from __future__ import annotations

import re

from oomdoctor.explain.events import LogScan, OomEvent
from oomdoctor.explain.kinds import NEVER_RECOVERED, RECOVERY_ALONE, SELF_CONTAINED
from oomdoctor.explain.patterns import TF_NOT_A_FAILURE, classify_line
from oomdoctor.explain.reported import MEMORY_WORD

# A caught OOM: a recovery line (batch-size finder, "attempting to recover from OOM", a skipped batch)
# within this many lines after the event's last repeat, in the same log.
RECOVERY_WINDOW = 300
RECOVERY_BEFORE = 5  # fairseq logs "attempting to recover from OOM" in the same instant, just before the message
# Only a line that announces the recovery of the OOM that follows may come before it; a skipped TensorRT
# tactic or a quoted fallback line before an OOM says nothing of that OOM (review, session 8).
_ANNOUNCES = re.compile(r"attempting to recover from OOM")


# TensorFlow's stream executor logs a device allocation it could not make at INFO level ("I
# tensorflow/stream_executor/cuda/cuda_driver.cc:763] failed to allocate 2.08G ... CUDA_ERROR_OUT_OF_MEMORY")
# and its allocator then retries smaller; the job failed only if something else says so. Such lines
# followed by the program's own output (not a log line, not an error) are a job that went on.
def _glog(levels: str, files: str = "cc|h|py") -> str:
    """A glog line's head at these levels ("I0527 10:00:00.1 123 file.cc:42]", with an optional timestamp first)."""
    return rf"^\s*(?:\S+ \S+: )?[{levels}]\d{{0,4}}[ \d:.]{{0,40}}\S{{0,300}}?\.(?:{files}):\d+\]"


_TF_INFO_ALLOC = re.compile(r"^\s*(?:\S+ \S+: )?I(?:\d{4} )?\S* .*\bfailed to allocate\b.*CUDA_ERROR_OUT_OF_MEMORY")
_LOGGED_OR_ERROR = re.compile(_glog("IWEF") + r"|(?i:error|exception|traceback|abort|fault|killed|fatal|core dumped|terminate)")


def _around(e: OomEvent, scan: LogScan, start: int, end: int) -> tuple[list[str], list[str]] | None:
    """The lines of the scanner's sample (head or tail) that holds lines start..end of the event's log:
    those before `start` and those after `end`; None where no sample holds them."""
    for source, first, text in scan.samples:
        lines = text.split("\n")
        if source == e.source and first <= start and end < first + len(lines):
            return lines[:start - first], lines[end - first + 1:]
    return None


def went_on(e: OomEvent, scan: LogScan) -> bool:
    """An INFO-level TensorFlow allocation failure (_TF_INFO_ALLOC) after which the program printed
    its own output and no error."""
    if e.kind != "tf_oom" or not _TF_INFO_ALLOC.match(e.text):
        return False
    end = e.last_line or e.line
    got = _around(e, scan, end, end)
    if got is None:
        return False
    # the rest of the allocator's retry storm (more INFO-level failures, the BFC allocator's warnings
    # that say "this is not a failure") is not the program's output, nor an error
    after = [ln for i, ln in enumerate(got[1], end + 1) if ln.strip() and not _TF_INFO_ALLOC.match(ln)
             and TF_NOT_A_FAILURE not in ln and (e.source, i) not in scan.bfc_wrapped]
    return bool(after) and not any(_LOGGED_OR_ERROR.search(ln) for ln in after)


# What ends a run after TensorFlow's BFC "not a failure" warning: a Python exception or traceback, a crash of
# the process (segfault, abort, glog's F level, a bare "Killed", a non-zero exit), a reporter's "crashed". Not
# glog's I/W/E lines (TF prints harmless E lines: "layout failed", "Unable to register cuDNN factory"), not
# metrics or prose with "error" in them, not TF's "OutOfRangeError: End of sequence" (review 2, session 17).
_GLOG_IWE = re.compile(_glog("IWE"))
_CRASH = re.compile(r"^\s*(?:[\w.]+\.)?[A-Za-z_]\w*(?:Error|Exception):(?! End of sequence)|Traceback \(most recent call last\)|"
                    r"(?i:segmentation fault|core dumped|\baborted\b|fatal python error|check failed|\bcrash(?:ed|es)?\b)|"
                    r"^\s*Killed\s*$|exit(?:ed)? (?:with )?code -?[1-9]|" + _glog("F", "cc|h"))


def bfc_crash(e: OomEvent, scan: LogScan) -> tuple[int, str] | None:
    """(line, text) of the crash that follows TensorFlow's BFC "not a failure" warning (an oom_caught line), or
    None: the warning is a caught shortage only where None. The crash (_CRASH) is looked for in the scanner's
    sample that holds the warning (a log's head or tail: in a long log a crash far from the warning is not seen)
    (review, session 17: a warning above "Segmentation fault (core dumped)" or an InternalError had read as "the
    job went on"). Nothing after it (a pasted warning): taken at its word. Any other recovery line: None."""
    if e.kind != "oom_caught" or TF_NOT_A_FAILURE not in e.text:
        return None
    got = _around(e, scan, e.line, e.line)  # from its first repeat: a crash between repeats counts too
    if got is None:
        return None
    for i, ln in enumerate(got[1]):
        if TF_NOT_A_FAILURE not in ln and not _GLOG_IWE.match(ln) and _CRASH.search(ln):
            crash = ln.strip()
            # cut at a space, never inside a token (the redactor must see a secret whole: review, session 18)
            return e.line + 1 + i, crash if len(crash) <= 200 else crash[:200].rsplit(" ", 1)[0] + " ..."
    return None


# A recovery line the job did not get past: a crash (_CRASH, not itself an OOM line) among the first lines after it.
CRASH_AFTER_LINES = 3


def crashed_after(m: OomEvent, scan: LogScan) -> bool:
    """A recovery line (not a library's own caught shortage: bfc_crash reads TensorFlow's) right after whose last
    repeat the job crashed: a traceback, an exception, a kill among the next CRASH_AFTER_LINES non-blank lines of
    its sample. It recovered nothing: fairseq's "attempting to recover from OOM in forward/backward pass" and then
    the spawn's traceback ended the run (a new user's walkthrough, session 28, was told "No failure", exit 0).
    An OOM line there is not the crash: fairseq may announce the recovery just before the OOM it caught."""
    if m.kind in SELF_CONTAINED:
        return False
    end = m.last_line or m.line
    got = _around(m, scan, end, end)
    if got is None:
        return False
    said = [ln for ln in got[1] if ln.strip()][:CRASH_AFTER_LINES]
    return any(_CRASH.search(ln) and not _GLOG_IWE.match(ln) and classify_line(ln) is None for ln in said)


_DIGITS_RUN = re.compile(r"\d+")
# (any framework's allocator: a loop that caught a JAX or CuPy OOM went on as one that caught PyTorch's; session 27)
_LOOP_KINDS = frozenset({"torch_oom", "cuda_driver_oom", "generic_oom", "torch_oom_legacy", "jax_oom", "cupy_oom"})
LOOP_LINES = 20  # lines looked at on each side of a caught OOM


# What keeps an OOM line from being a loop's caught one: the uncaught format ("...Error: msg", C++'s
# "what():"), an error level or field ("error=", glog's E, "ERROR").
_RAISED = re.compile(r"\w(?:Error|Exception)\b:|\bwhat\(\):|\berror=|\bERROR\b|^\s*E\d{4} |\[E ")
# a rank, process or worker prefix: its digits are kept ("[rank1]" is another loop than "[rank0]")
_WHO = re.compile(r"^\s*(?:\[(?:rank|default|worker|pid|GPU|gpu|cuda|TP|DP|PP)[^\]]*\]|\((?:pid|rank)[^)]*\)|"
                  r"(?:rank|worker)\s*\d+\s*[:|]|\d+:)")
# a shell prompt or an access log is no loop of the job (a re-run; a server answering a request)
_NOT_LOOP = re.compile(r"^\s*(?:\$ |PS [^>]*>|>>> |% )|\b(?:GET|POST|PUT|HTTP/\d)\b|\|\s*[45]\d\d\s*\|")


# mpirun/Horovod's "[1,0]<stderr>:" (gloo: "[1]<stderr>:") in front of each line: whose line it is, with
# _WHO's rank prefixes
_MPI_WHO = re.compile(r"^\s*\[(?:\d+,)?(\d+)\]<std(?:out|err)>:")
_RAY_PID = re.compile(r"pid\d+")  # Ray's "(pid=4242, ip=10.0.0.5)" and "(pid=4242)": one process
# srun -l's task label ("0: ..."), not a grep -n line number ("1412:WARNING") or a clock ("10:59:59")
_SRUN_LABEL = re.compile(r"^\s*\d{1,4}:(?=\s)")


def _prefix(line: str) -> tuple[str, int]:
    """Whose line it is: the launcher prefixes in front of it, in order and normalised ("[rank: 0]" and
    "[rank0]:" are one rank; srun -l's "0: " before torchrun's "[default3]:" keeps both; "" where there is
    none), and where the line's own text starts."""
    parts: list[str] = []
    pos = 0
    for _ in range(3):
        rest = line[pos:]
        mpi = _MPI_WHO.match(rest)
        who = None if mpi else _WHO.match(rest)
        if mpi:
            parts.append("rank" + mpi.group(1))
            pos += mpi.end()
        elif who is not None and (not who.group(0).strip()[:1].isdigit() or _SRUN_LABEL.match(rest)):
            label = re.sub(r"[^a-z0-9]", "", who.group(0).lower())
            pid = _RAY_PID.match(label)
            parts.append(pid.group(0) if pid else label)
            pos += who.end()
        else:
            break
    return "/".join(parts), pos


def _loop_shape(line: str) -> str:
    head, start = _prefix(line)
    return head + "|" + _DIGITS_RUN.sub("#", line[start:].strip())


def loop_went_on(e: OomEvent, scan: LogScan) -> bool:
    """An OOM printed by a loop that caught it (`print("Error", e)`: no traceback, not the uncaught
    "...Error: msg" format, no error level) after which the same process printed the line it printed
    before the OOM, numbers aside ("Testing 0 02" ... "Testing 1 03"), and no error: the job went on to
    its next item (Real-ESRGAN's per-image loop). Another rank's line, a shell prompt or an access log
    does not count. A loop that printed the same OOM again (a batch-size probe: "Trying batch size 256...
    Failed (CUDA out of memory...)" twice) went on only as _repeats_went_on says: an item succeeded
    between the repeats and the log goes on, with no error, after the last."""
    if e.kind not in _LOOP_KINDS or "traceback_line" in e.details or _RAISED.search(e.text):
        return False
    n = e.text.count("\n")
    got = _around(e, scan, e.line, e.line + n)
    if got is None:
        return False
    own = _prefix(e.text)[0]
    before = {_loop_shape(ln) for ln in got[0][-LOOP_LINES:]}
    for ln in got[1][:LOOP_LINES]:
        if _LOGGED_OR_ERROR.search(ln) or classify_line(ln) or _NOT_LOOP.search(ln):
            return False
        shape = _loop_shape(ln)
        head, body = shape.split("|", 1)
        if len(body) >= 4 and any(c.isalpha() for c in body) and shape in before and head == own:
            return e.count == 1 or _repeats_went_on(e, scan, n, before, got[1])
    return False


# A program's own retry after an OOM it caught ("OOM with chunk=200000: CUDA out of memory ..." then
# "retrying with chunk=100000"): the announcement, on the first lines after the OOM.
_RETRY = re.compile(r"(?i)^\W{0,3}(?:retry(?:ing)?|trying again|try(?:ing)? (?:again|a smaller|smaller|with)|"
                    r"falling back|fall(?:ing)? ?back to|reducing|halving|lowering|decreasing)\b")
RETRY_LINES = 3
# after the retry: the work said it finished, and nothing said it gave up (review, session 15)
_FINISHED = re.compile(r"(?i)\b(?:done|finished|complete[ds]?|completed|succeeded|success(?:fully)?|saved|wrote)\b")
_GAVE_UP = re.compile(r"(?i)\bfail(?:s|ed|ure)?\b|giv(?:e|ing) up|\bexceeded\b|\bexit(?:ed)?(?: with)? (?:status|code) "
                      r"[1-9]|\bnon-?zero\b|\bstill\b")


def retry_went_on(e: OomEvent, scan: LogScan) -> bool:
    """An OOM a loop caught (no traceback, not raised, printed once) whose next lines announce a retry, after
    which the log, read to its end, says the work finished and holds no error, failure, memory line or new
    OOM (GPU run, session 14: validation/explain_logs_gpu.py retry_smaller_chunks; review, session 15)."""
    if e.kind not in _LOOP_KINDS or e.count != 1 or "traceback_line" in e.details or _RAISED.search(e.text):
        return False
    if any(o is not e and o.source == e.source and o.line > e.line for o in scan.events):
        return False
    n = e.text.count("\n")
    got = _around(e, scan, e.line, e.line + n)
    if got is None:
        return False
    tail = got[1][:-1] if got[1][-1:] == [""] else got[1]
    if e.line + n + len(tail) < scan.lines:  # the sample stops before the log's end: lines after it unread
        return False
    after = [ln for ln in got[1] if ln.strip()]
    own = _prefix(e.text)[0]
    at = next((i for i, ln in enumerate(after[:RETRY_LINES]) if _RETRY.search(ln[_prefix(ln)[1]:])), None)
    if at is None or _prefix(after[at])[0] != own:
        return False
    rest = after[at + 1:]
    return (any(_FINISHED.search(ln) for ln in rest)
            and not any(_LOGGED_OR_ERROR.search(ln) or _GAVE_UP.search(ln) or MEMORY_WORD.search(ln)
                        or classify_line(ln) or _NOT_LOOP.search(ln) for ln in rest))


# A program's own step down after an OOM it caught, said anywhere on the line ("batch size 256 does not fit; halving",
# "trying per-device batch size 128", "retrying with batch_size=64"): a lower setting tried next.
_STEPPED_DOWN = re.compile(r"(?i)\b(?:retry(?:ing)?|trying again|halving|fall(?:ing)? ?back to)\b|"
                           r"\btry(?:ing)?\b[^\n]{0,40}\b(?:batch|chunk|micro[ _-]?batch)[ _-]?size\b|"
                           r"\b(?:reduc|lower|decreas|shrink|halv)\w*\b[^\n]{0,30}\b(?:batch|chunk|micro[ _-]?batch)")
# a step down that names the size it lowers ("Decreasing batch size to: 32", accelerate's find_executable_batch_size):
# with no later failure only this covers a raised OOM, not a bare "retrying" (tests/test_explain_retry_recovered.py)
_SIZE_STEPPED_DOWN = re.compile(r"(?i)\btry(?:ing)?\b[^\n]{0,40}\b(?:batch|chunk|micro[ _-]?batch)[ _-]?size\b|"
                                r"\b(?:reduc|lower|decreas|shrink|halv)\w*\b[^\n]{0,30}\b(?:batch|chunk|micro[ _-]?batch)")
# what an XLA OOM message goes on with (BufferAssignment's statistics and peak buffers: indented or headed lines)
_MESSAGE_TAIL = re.compile(r"^\s*$|^\s|^(?:BufferAssignment|Peak buffers)")


def stepped_down_before(e: OomEvent, scan: LogScan, events: list[OomEvent]) -> bool:
    """An OOM, of any framework, after which the program said it stepped down (_STEPPED_DOWN: the first lines after
    the message) and printed its own output with no error, before a later failure of the same log whose traceback
    begins after it: the job caught this one and went on, the later one ended it (a new user's walkthrough, session
    26: a JAX batch-size search's caught OOM, then a fatal PyTorch OOM, took the answer)."""
    if e.kind in NEVER_RECOVERED or e.count != 1:
        return False
    later = [o.details.get("traceback_line") or o.line for o in events
             if o is not e and o.source == e.source and o.line > e.line]
    got = _around(e, scan, e.line, e.line)
    if got is None:
        return False
    if not later:
        # no later failure: the search ended well, as retry_went_on asks it of a loop's OOM (accelerate's
        # find_executable_batch_size: "Decreasing batch size to: 32", its steps, "Training finished successfully.";
        # a walkthrough, session 27)
        return _stepped_down_and_finished(e, scan, got[1])
    stop = min(later)  # the later failure (or its traceback) begins here
    after = [ln for i, ln in enumerate(got[1], e.line + 1) if i < stop]
    while after and _MESSAGE_TAIL.match(after[0]):
        after = after[1:]
    said = [ln for ln in after if ln.strip()]
    at = next((i for i, ln in enumerate(said[:RETRY_LINES]) if _STEPPED_DOWN.search(ln[_prefix(ln)[1]:])), None)
    if at is None or _prefix(said[at])[0] != _prefix(e.text)[0]:
        return False
    rest = said[at + 1:]  # the program's own output after the step down, and before it nothing that failed
    return bool(rest) and not any(_LOGGED_OR_ERROR.search(ln) or classify_line(ln) or _NOT_LOOP.search(ln)
                                  for ln in said[:at] + rest)


def _stepped_down_and_finished(e: OomEvent, scan: LogScan, after_lines: list[str]) -> bool:
    """After the OOM, read to the log's end: a step down on the first lines, then the work said it finished, and
    nothing after the step down failed, gave up, spoke of memory or ran out again."""
    if any(o is not e and o.source == e.source and o.line > e.line for o in scan.events):
        return False
    tail = after_lines[:-1] if after_lines[-1:] == [""] else after_lines
    if e.line + len(tail) < scan.lines:  # the sample stops before the log's end: lines after it unread
        return False
    after = list(after_lines)
    while after and _MESSAGE_TAIL.match(after[0]):
        after = after[1:]
    said = [ln for ln in after if ln.strip()]
    at = next((i for i, ln in enumerate(said[:RETRY_LINES]) if _SIZE_STEPPED_DOWN.search(ln[_prefix(ln)[1]:])), None)
    if at is None or _prefix(said[at])[0] != _prefix(e.text)[0]:
        return False
    rest = said[at + 1:]
    return (any(_FINISHED.search(ln) for ln in rest)
            and not any(_LOGGED_OR_ERROR.search(ln) or _GAVE_UP.search(ln) or MEMORY_WORD.search(ln)
                        or classify_line(ln) or _NOT_LOOP.search(ln) for ln in said[:at] + rest))


def _repeats_went_on(e: OomEvent, scan: LogScan, n: int, before: set[str], after_first: list[str]) -> bool:
    """A repeated OOM of a loop: between the repeats some item of the loop succeeded (a loop line not
    followed by the OOM: "* Trying batch size 192... Ok"), and after the last repeat the log goes on with a
    line that is no OOM's own advice, and no error. A loop whose every item failed (each "Testing N" line
    followed by the OOM) did not go on."""
    last = e.last_line or e.line
    oom_shape = _loop_shape(e.text.split("\n", 1)[0])
    between = after_first[:max(0, last - (e.line + n) - 1)]
    succeeded = False
    for i, ln in enumerate(between):
        if _loop_shape(ln) in before:
            nxt = next((x for x in between[i + 1:] + [e.text] if x.strip()), "")
            if _loop_shape(nxt) != oom_shape:
                succeeded = True
                break
    if not succeeded:
        return False
    got = _around(e, scan, last, last + n)
    if got is None:
        return False
    after = [ln for ln in got[1][:LOOP_LINES] if ln.strip()]
    return (any(not MEMORY_WORD.search(ln) for ln in after)
            and not any(_LOGGED_OR_ERROR.search(ln) or classify_line(ln) or _NOT_LOOP.search(ln) for ln in after))


# DeepSpeed's count of the caching allocator's own retries (cudaMalloc failed, the cache was freed, the retry
# worked): a step that went on. It catches nothing, so an OOM raised as an exception near it (another rank's,
# printed in the same log) is not recovered by it (review-2 residual, session 9).
_ALLOCATOR_RETRIES = re.compile(r"pytorch allocator cache flushes since last step")
def _covers(m: OomEvent, e: OomEvent) -> bool:
    """A recovery line can speak for this OOM: not another rank's or process's line (both prefixed, differently),
    and not an allocator's retry count beside an OOM that was raised."""
    mw, ew = _prefix(m.text)[0], _prefix(e.text)[0]
    # (one chain may be shorter: srun -l's "0: " alone is still that task's line; third review, session 10)
    if mw and ew and not (mw + "/").startswith(ew + "/") and not (ew + "/").startswith(mw + "/"):
        return False
    return not (_ALLOCATOR_RETRIES.search(m.text) and ("traceback_line" in e.details or _RAISED.search(e.text)))


def recovered_events(events: list[OomEvent], markers: list[OomEvent]) -> list[OomEvent]:
    out = []
    covering = [m for m in markers if m.kind not in SELF_CONTAINED]
    for e in events:
        if e.kind in NEVER_RECOVERED:
            continue
        end = e.last_line or e.line
        # a traceback that begins after the recovery line is a new, uncaught failure
        tb = e.details.get("traceback_line", 0)
        if any(m.source == e.source and (m.last_line or m.line) >= e.line - (RECOVERY_BEFORE if _ANNOUNCES.search(m.text) else 0)
               and m.line <= end + RECOVERY_WINDOW and not (tb and (m.last_line or m.line) < tb <= e.line)
               and _covers(m, e)
               for m in covering):
            out.append(e)
    # A recovery line with no OOM text before it (Lightning's finder catches the exception silently)
    # is itself the recovered event.
    covered = {(m.source, m.line) for m in markers for e in out
               if m.source == e.source and m.line >= e.line - RECOVERY_BEFORE}
    return out + [m for m in markers if (m.source, m.line) not in covered and m.kind in RECOVERY_ALONE]
