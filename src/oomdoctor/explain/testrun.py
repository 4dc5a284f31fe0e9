"""Where a test runner said that every test passed: the OOMs printed before that are a test's own.

A test suite that checks its OOM handling prints the allocator's whole message (pytest's `-rA` or `-s`
shows what a passing test printed; `pytest.raises(torch.OutOfMemoryError)` caught it) and then says
"2 passed". That verdict is the runner's, not a guess from words: what came before it in that log is
no failure of the job. Only where no verdict of the log reports a failure or an error (a log of two
runs, one failing, stays a failure) and only for what comes before the last passing verdict (a
failure after it is a new one). Found on the GPU (validation/explain_logs_gpu.py, session 14: a
pytest run whose OOM test passed was read as a failure). Pure: the scanner's samples in.
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


def passing_verdicts(samples: list[tuple[str, int, str]]) -> dict[str, int]:
    """Per source, the line of the last verdict that every test passed, where no verdict in any source
    reports a failure or an error; {} otherwise."""
    good: dict[str, int] = {}
    for source, first, text in samples:
        lines = text.split("\n")
        for i, raw in enumerate(lines):
            line = raw[-_MAX_LINE:]
            m = _PYTEST.search(line)
            if m:
                if _PYTEST_BAD.search(m.group(1)):
                    return {}
                if _PYTEST_GOOD.search(m.group(1)):
                    good[source] = max(good.get(source, -1), first + i)
                continue
            if _UNITTEST_BAD.search(line) or _GTEST_BAD.search(line):
                return {}
            if _GTEST_GOOD.search(line):
                good[source] = max(good.get(source, -1), first + i)
            elif _UNITTEST_OK.search(line) and any(_UNITTEST_RAN.search(x[-_MAX_LINE:]) for x in lines[max(0, i - 3):i]):
                good[source] = max(good.get(source, -1), first + i)
    return good
