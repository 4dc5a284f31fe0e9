"""Streaming speed and memory of `oomdoctor explain` on a large log, against `grep -c "out of memory"`.

Generates a log of --size bytes in /tmp (bench/loggen.py: --style train, hf or json; each has a CUDA
OOM traceback every ~100 MB), then times, interleaved and --repeat times each, the two commands on
the same file in the same run. Reports the best and the median time of each and their ratios, the
peak RSS of `explain` for this file and for a file 10x smaller (constant memory = same peak), and
the pre-filter engine (ahocorasick-rs, else one bytes.find pass per literal).
`--baseline DIR` also times, in the same interleaved rounds, explain from another source tree (DIR is its `src`,
e.g. `git archive COMMIT src | tar -x -C /tmp/before`): before and after on the same file under the same load.
Usage: PYTHONPATH=src python bench/explain_stream.py [--size 1GB] [--repeat 9] [--style hf] [--markdown]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from loggen import STYLES, generate  # noqa: E402

from oomdoctor.explain.prefilter import COUNTER, prefilter_engine  # noqa: E402
from oomdoctor.explain.read import usable_cpus  # noqa: E402
from oomdoctor.units import parse_size  # noqa: E402


def _run(cmd: list[str], src: str | None = None) -> tuple[float, int]:
    """Wall seconds and the child's peak RSS (KiB) for one run (`src`: PYTHONPATH for it, another source tree)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    env = dict(os.environ, PYTHONPATH=src) if src else None
    t = time.perf_counter()
    # stdout to a pipe, not /dev/null: GNU grep stops at the first match when it sees /dev/null.
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=600, env=env)
    dt = time.perf_counter() - t
    if p.returncode not in (0, 1):
        raise SystemExit(f"{cmd[0]} failed with {p.returncode}")
    return dt, max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)


def peak_rss(cmd: list[str]) -> int:
    """Peak RSS (KiB) of one command, measured in a fresh helper so earlier children do not count."""
    code = ("import resource,subprocess,sys;subprocess.run(sys.argv[1:],stdout=subprocess.DEVNULL,"
            "stderr=subprocess.DEVNULL);print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", code, *cmd], capture_output=True, text=True, timeout=600)
    return int(out.stdout.strip() or 0)


def scan_seconds(path: Path, engine: str, workers: int | None = None) -> float:
    """Collector + parser + classifier in this process, with the chosen pre-filter engine and reader threads."""
    from oomdoctor.explain import events as oom_events
    from oomdoctor.explain import patterns as oom_patterns
    from oomdoctor.explain import prefilter as oom_prefilter
    from oomdoctor.explain.rank import explain_scan
    from oomdoctor.explain.read import iter_prepared

    saved = dict(oom_prefilter._PREFILTERS)
    oom_prefilter._PREFILTERS.clear()
    oom_prefilter._PREFILTERS[True] = oom_prefilter._Prefilter(engine, oom_patterns.PREFILTER_LITERALS)
    oom_prefilter._PREFILTERS[False] = oom_prefilter._Prefilter(engine, oom_patterns.EVENT_LITERALS)
    t = time.perf_counter()
    scanner = oom_events.LogScanner()
    scanner.start_source(str(path))
    for buf, start, end, index in iter_prepared(str(path), oom_prefilter.index_block, workers=workers):
        scanner.feed(buf, start, end, index)
    explain_scan(scanner.finish())
    dt = time.perf_counter() - t
    oom_prefilter._PREFILTERS.clear()
    oom_prefilter._PREFILTERS.update(saved)
    return dt


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--size", default="1GB")
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--style", choices=STYLES, default="train", help="log shape (bench/loggen.py)")
    ap.add_argument("--path", help="the log to time (default: /tmp/oomdoctor-bench-explain[-STYLE].log, generated)")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--threads", type=int, action="append", help="time explain with --threads N (repeatable); default: its default")
    ap.add_argument("--fallback", action="store_true", help="also time the bytes.find pre-filter in-process")
    ap.add_argument("--baseline", metavar="DIR", help="also time explain from this source tree (its src directory)")
    args = ap.parse_args(argv)
    size = parse_size(args.size)
    default = "/tmp/oomdoctor-bench-explain.log" if args.style == "train" else f"/tmp/oomdoctor-bench-explain-{args.style}.log"
    big = Path(args.path or default)
    if args.path and not big.is_file():
        raise SystemExit(f"{big}: no such file (--path names a log to time; without it one is generated)")
    small = Path(str(big) + ".small")
    if not args.path and (not big.exists() or abs(big.stat().st_size - size) > size // 50):
        generate(big, size, args.style)
    if not small.exists():
        generate(small, max(1, big.stat().st_size // 10), args.style)
    # the `oomdoctor` command users run (its console script), else `python -m oomdoctor` (adds runpy, ~6 ms)
    script = Path(sys.executable).parent / "oomdoctor"
    launcher = [str(script)] if script.exists() else [sys.executable, "-m", "oomdoctor"]
    explain = [*launcher, "explain", str(big), "--format", "json"]
    grep = ["grep", "-c", "out of memory", str(big)]
    variants = {"default": explain}
    for n in args.threads or []:
        variants[f"--threads {n}"] = [*explain, "--threads", str(n)]
    if args.baseline:
        variants["baseline"] = explain
    _run(grep)  # warm the page cache
    t_grep: list[float] = []
    times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(args.repeat):  # interleaved, so load changes hit every command alike
        t_grep.append(_run(grep)[0])
        for k, cmd in variants.items():
            times[k].append(_run(cmd, args.baseline if k == "baseline" else None)[0])
    rss_big = peak_rss(explain)
    rss_small = peak_rss([str(small) if x == str(big) else x for x in explain])  # same command, 10x smaller log
    g, gm = min(t_grep), statistics.median(t_grep)
    rows = [
        ("log", f"{big.stat().st_size / 1e9:.2f} GB, style {args.style}"),
        ("pre-filter engine, newline counter", f"{prefilter_engine()}, {COUNTER}"),
        ("usable CPUs", str(usable_cpus())),
        ("explain command", " ".join(Path(x).name if i == 0 else x for i, x in enumerate(launcher))),
        (f"grep -c 'out of memory' (best / median of {args.repeat})", f"{g:.3f} s / {gm:.3f} s"),
    ]
    for k, ts in times.items():
        e, em = min(ts), statistics.median(ts)
        rows.append((f"oomdoctor explain, {k} (best / median of {args.repeat})",
                     f"{e:.3f} s / {em:.3f} s ({big.stat().st_size / e / 1e9:.2f} GB/s)"))
        rows.append((f"**ratio explain / grep, {k}** (best / median)", f"**{e / g:.2f}x** / {em / gm:.2f}x"))
    rows += [
        ("peak RSS explain, this log", f"{rss_big / 1024:.0f} MiB"),
        ("peak RSS explain, log 10x smaller", f"{rss_small / 1024:.0f} MiB"),
    ]
    if args.fallback:
        rows.append(("in-process scan, bytes.find pre-filter", f"{scan_seconds(big, 'find'):.2f} s"))
        rows.append(("in-process scan, default pre-filter", f"{scan_seconds(big, 'auto'):.2f} s"))
        rows.append(("in-process scan, default pre-filter, 1 thread", f"{scan_seconds(big, 'auto', 1):.2f} s"))
    if args.markdown:
        print("| measure | value |\n|---|---|")
        for k, v in rows:
            print(f"| {k} | {v} |")
    else:
        for k, v in rows:
            print(f"{k.replace('**', ''):<58}{v.replace('**', '')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
