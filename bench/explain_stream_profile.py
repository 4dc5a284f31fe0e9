"""Where `explain`'s time goes on a large log: start-up, reading, indexing threads, the scanner.

Companion to bench/explain_stream.py (same generated log): each stage alone, in this process, best
of --repeat, for several reader-thread counts, so a ratio that does not improve with cores can be
traced to the stage that stays serial.
Usage: PYTHONPATH=src python bench/explain_stream_profile.py [--path LOG] [--threads 1 2 4 8]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from oomdoctor.explain import patterns as P
from oomdoctor.explain import prefilter as PF
from oomdoctor.explain.events import LogScanner
from oomdoctor.explain.read import iter_blocks, iter_prepared, usable_cpus


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def _startup(repeat: int) -> tuple[float, float]:
    """Seconds for `explain` on a 1-line log, and for `python -c pass` (fresh interpreters)."""
    with open("/tmp/oomdoctor-bench-tiny.log", "w") as f:
        f.write("hello\n")
    cmd = [sys.executable, "-m", "oomdoctor", "explain", "/tmp/oomdoctor-bench-tiny.log", "--format", "json"]
    tiny = _best(lambda: subprocess.run(cmd, stdout=subprocess.DEVNULL, timeout=60), repeat)
    bare = _best(lambda: subprocess.run([sys.executable, "-c", "pass"], timeout=60), repeat)
    return tiny, bare


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--path", default="/tmp/oomdoctor-bench-explain.log")
    ap.add_argument("--threads", type=int, nargs="*", default=[1, 2, 4, 8])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    path = args.path

    def noop(b, s, e, o):
        return None

    def full(w):
        sc = LogScanner()
        sc.start_source(path)
        for b, s, e, i in iter_prepared(path, PF.index_block, workers=w):
            sc.feed(b, s, e, i)
        sc.finish()

    tiny, bare = _startup(args.repeat)
    rows = [("usable CPUs", str(usable_cpus())),
            ("`python -c pass`", f"{bare:.3f} s"),
            ("explain on a 1-line log (start-up)", f"{tiny:.3f} s"),
            ("read only, 1 thread (ring of aligned buffers)",
             f"{_best(lambda: [0 for _ in iter_blocks(path)], args.repeat):.3f} s")]
    pf = PF._prefilter(False)
    main_ac, side_ac = pf._automata if len(pf._automata) == 2 else (None, None)
    if main_ac is not None:
        rows.append((f"Teddy pass, {len(P.EVENT_LITERALS)} event literals, 1 thread", f"{_best(lambda: [main_ac.find_matches_as_indexes(memoryview(b)[s:e]) for b, s, e in iter_blocks(path)], args.repeat):.3f} s"))
        rows.append((f"side pass {P.SIDE_LITERALS}, 1 thread", f"{_best(lambda: [side_ac.find_matches_as_indexes(memoryview(b)[s:e]) for b, s, e in iter_blocks(path)], args.repeat):.3f} s"))
    rows.append((f"newline count ({PF.COUNTER}), 1 thread",
                 f"{_best(lambda: [PF._count_newlines(b, s, e) for b, s, e in iter_blocks(path)], args.repeat):.3f} s"))
    for w in args.threads:
        rows.append((f"threads {w}: read + no-op prepare",
                     f"{_best(lambda w=w: [0 for _ in iter_prepared(path, noop, workers=w)], args.repeat):.3f} s"))
        rows.append((f"threads {w}: read + index_block",
                     f"{_best(lambda w=w: [0 for _ in iter_prepared(path, PF.index_block, workers=w)], args.repeat):.3f} s"))
        rows.append((f"threads {w}: read + index + scanner", f"{_best(lambda w=w: full(w), args.repeat):.3f} s"))
    print("| stage (1 GB log) | seconds |\n|---|---:|")
    for k, v in rows:
        print(f"| {k} | {v} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
