"""Worst-case time of `explain` on one hostile line, the longest the reader keeps (read.MAX_LINE).

A regular expression that backtracks (two quantifiers side by side, a lookahead scanning to the end at
every position) turns one long line into seconds or minutes; the session-7 review found two such
(`mentions.EXAMPLE_INTRO` on a run of spaces: 4.7 s for 16k characters; `leak_said`'s bounded prefix:
0.2 s per line). This prints, for each shape, explain's time on one line of MAX_LINE characters that
also carries the words that wake the patterns (out of memory, leak, epoch, error like:, ...). A
third and fourth quadratic pattern turned up here, older than that review: the allocator's figures
(patterns._TORCH_FIELDS, _SIZE) and DeepSpeed's "N pytorch allocator cache flushes" tried at every digit
of a long digit run (15 s for one line of digits; now matched from a number's first digit).
No assertion: a table to read (docs/benchmarks.md). Usage: PYTHONPATH=src python bench/explain_hostile_lines.py
"""

from __future__ import annotations

import time

from oomdoctor.explain.rank import explain_text
from oomdoctor.explain.read import MAX_LINE

# Two endings: PyTorch's message (the event patterns and its figures), and prose with a bare "out of
# memory" (the generic kind, the mention and report checks).
TAILS = (" a memory leak at the 23rd epoch, error like: CUDA out of memory. Tried to allocate 2.00 GiB",
         " my training crashed, it ran out of memory")
SHAPES = {
    "spaces": " ",
    "tabs": "\t",
    "words": "word ",
    "leak words": "leak ",
    "memory leak": "memory leak ",
    "digits": "1234567890",
    "digit commas": "1,",
    "decimals": "1.5",
    "sizes": "12 MiB ",
    "sizes glued": "12MiB",
    "commas": ",",
    "quotes": "\"'",
    "CJK": "显存泄漏训练",
    "dashes": "- ",
    "hashes": "# ",
    "not not": "not ",
    "epochs": "at epoch 12 ",
    "OOM": "OOM ",
}


def main() -> int:
    print(f"{'shape':<14} {'line chars':>10} {'torch msg s':>12} {'prose s':>10}")
    worst = 0.0
    for name, unit in SHAPES.items():
        times = []
        for tail in TAILS:
            line = (unit * (MAX_LINE // len(unit) + 1))[: MAX_LINE - len(tail)] + tail
            t = time.perf_counter()
            explain_text([line])
            times.append(time.perf_counter() - t)
        worst = max(worst, *times)
        print(f"{name:<14} {MAX_LINE:>10} {times[0]:>12.3f} {times[1]:>10.3f}")
    print(f"worst: {worst:.3f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
