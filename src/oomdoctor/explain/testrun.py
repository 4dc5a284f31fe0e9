"""Where a test runner said that every test passed: the OOMs its tests printed are the tests' own.

A test suite that checks its OOM handling prints the allocator's whole message (pytest's `-rA` or `-s`
shows what a passing test printed; `pytest.raises(torch.OutOfMemoryError)` caught it) and then says
"2 passed". That verdict is the runner's, not a guess from words. Only the lines of that test session
count (from the runner's start line, "test session starts", "[==========] Running 3 tests", a
unittest result line, to its verdict, both in the same stretch of the log that was read), and only
where no verdict the log shows reports a failure or an error: an OOM before the session (a smoke run
whose failure was ignored) or after it (the training that followed) stays the job's failure, and so
does an event whose traceback began before the session. Found on the GPU (validation/explain_logs_gpu.py,
session 14: a pytest run whose OOM test passed was read as not_oom). Pure: the scanner's samples in.
"""

from __future__ import annotations

import re

_MAX_LINE = 400
# pytest's last line: "===== 2 passed, 1 skipped, 3 warnings in 4.39s =====" (maybe after a CI timestamp)
_PYTEST = re.compile(r"(?:^|\s)=+ ([^=\n]{1,200}?) in [\d.]+s(?: \([^)\n]{0,40}\))? =+\s*$")
_PYTEST_BAD = re.compile(r"\b(?:failed|errors?)\b")
_PYTEST_GOOD = re.compile(r"\b\d+ passed\b")
# unittest: "Ran 3 tests in 0.012s" then "OK" or "OK (skipped=1)"; "FAILED (failures=1)" otherwise
_UNITTEST_RAN = re.compile(r"(?:^|\s)Ran \d+ tests? in [\d.]+s\s*$")
_UNITTEST_OK = re.compile(r"(?:^|\s)OK(?: \([^)\n]{0,80}\))?\s*$")
_UNITTEST_BAD = re.compile(r"(?:^|\s)FAILED \((?:failures|errors)=\d+")
# GoogleTest: "[  PASSED  ] 12 tests." and, where any failed, "[  FAILED  ] 1 test, listed below:"
_GTEST_GOOD = re.compile(r"\[\s+PASSED\s+\] \d+ tests?\.")
_GTEST_BAD = re.compile(r"\[\s+FAILED\s+\]")
# where a session starts: pytest's header, GoogleTest's "[==========] Running 3 tests", unittest's first
# result line ("test_oom (tests.T.test_oom) ... ok")
_START = re.compile(r"=+ test session starts =+|\[=+\] Running \d+ tests?|^\s*\w+ \([\w.]+\)[^\n]{0,200}?\.\.\.(?: |$)")


def passing_sessions(samples: list[tuple[str, int, str]]) -> dict[str, list[tuple[int, int]]]:
    """Per source, the (start, verdict) lines of each test session whose verdict is that every test
    passed, where no verdict in any sample reports a failure or an error; {} otherwise."""
    spans: dict[str, list[tuple[int, int]]] = {}
    for source, first, text in samples:
        start: int | None = None
        ran = False
        for i, raw in enumerate(text.split("\n")):
            line = raw[-_MAX_LINE:]
            m = _PYTEST.search(line)
            verdict = None
            if m:
                if _PYTEST_BAD.search(m.group(1)):
                    return {}
                verdict = bool(_PYTEST_GOOD.search(m.group(1)))
            elif _UNITTEST_BAD.search(line) or _GTEST_BAD.search(line):
                return {}
            elif _GTEST_GOOD.search(line) or (_UNITTEST_OK.search(line) and start is not None and ran):
                verdict = True
            elif _START.search(line):
                if start is None:
                    start, ran = first + i, False
                continue
            elif _UNITTEST_RAN.search(line):
                ran = True
                continue
            if verdict is None:
                continue
            if verdict and start is not None:
                spans.setdefault(source, []).append((start, first + i))
            start = None
    return spans


def in_passing_session(line: int, last: int, tb: int | None, spans: list[tuple[int, int]]) -> bool:
    """An event (its first line, last repeat and traceback start) printed inside a passing session."""
    return any(s < min(line, tb if tb is not None else line) and last < v for s, v in spans)
