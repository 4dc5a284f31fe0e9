"""Streaming speed and memory of `oomdoctor explain` on a large log, against `grep -c "out of memory"`.

Generates a log of --size bytes in /tmp (training lines, per-step memory readings, warnings, and a
CUDA OOM traceback every ~100 MB), then times, interleaved and --repeat times each, the two commands
on the same file in the same run. Reports the best time of each, their ratio, the peak RSS of
`explain` for this file and for a file 10x smaller (constant memory = same peak), and the prefilter
engine (hyperscan with the `fast` extra, else one bytes.find pass per literal).
Usage: PYTHONPATH=src python bench/explain_stream.py [--size 1GB] [--repeat 3] [--markdown]
"""

from __future__ import annotations

import argparse
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

from oomdoctor.collectors.logs import usable_cpus
from oomdoctor.parsers.oom_prefilter import prefilter_engine
from oomdoctor.units import parse_size

OOM = (
    "Traceback (most recent call last):\n"
    '  File "train.py", line 210, in <module>\n'
    "    loss.backward()\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.95 GiB. GPU 0 has a total capacity of "
    "44.35 GiB of which 1.27 GiB is free. Including non-PyTorch memory, this process has 43.07 GiB memory in "
    "use. Of the allocated memory 30.02 GiB is allocated by PyTorch, and 12.46 GiB is reserved by PyTorch but "
    "unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.\n"
)


def generate(path: Path, size: int, seed: int = 0) -> None:
    rnd = random.Random(seed)
    chunk: list[str] = []
    written, step, next_oom = 0, 0, 100 << 20
    with open(path, "w", encoding="utf-8") as f:
        while written < size:
            step += 1
            r = rnd.random()
            if r < 0.05:
                line = f"step {step} loss {rnd.random():.4f} lr 3e-4 mem {10 + step % 7 * 0.1:.2f} GiB\n"
            elif r < 0.06:
                line = f"2026-11-22 03:{step % 60:02d}:00 WARNING dataloader slow batch {step} took {rnd.random():.2f}s\n"
            else:
                line = (f"2026-11-22 03:{step % 60:02d}:{step % 59:02d} INFO rank0 processed batch {step} "
                        f"tokens/s {rnd.randint(9000, 13000)} loss={rnd.random():.3f}\n")
            chunk.append(line)
            if len(chunk) >= 4096:
                s = "".join(chunk)
                f.write(s)
                written += len(s)
                chunk = []
                if written >= next_oom:
                    f.write(OOM)
                    written += len(OOM)
                    next_oom += 100 << 20
        f.write("".join(chunk))


def _run(cmd: list[str]) -> tuple[float, int]:
    """Wall seconds and the child's peak RSS (KiB) for one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t = time.perf_counter()
    # stdout to a pipe, not /dev/null: GNU grep stops at the first match when it sees /dev/null.
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=600)
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


def scan_seconds(path: Path, hyperscan: bool, workers: int | None = None) -> float:
    """Collector + parser + classifier in this process, with the chosen prefilter engine and reader threads."""
    from oomdoctor.analysis.explain import explain_scan
    from oomdoctor.collectors.logs import iter_prepared
    from oomdoctor.parsers import oom_events, oom_patterns, oom_prefilter

    saved = dict(oom_prefilter._PREFILTERS)
    oom_prefilter._PREFILTERS.clear()
    if not hyperscan:
        oom_prefilter._PREFILTERS[True] = oom_prefilter._Prefilter(False, oom_patterns.PREFILTER_LITERALS)
        oom_prefilter._PREFILTERS[False] = oom_prefilter._Prefilter(False, oom_patterns.EVENT_LITERALS)
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
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--path", default="/tmp/oomdoctor-bench-explain.log")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--threads", type=int, action="append", help="time explain with --threads N (repeatable); default: its default")
    ap.add_argument("--no-numpy", action="store_true", help="also time explain counting newlines without numpy")
    ap.add_argument("--fallback", action="store_true", help="also time the pure-Python (re) prefilter in-process")
    args = ap.parse_args(argv)
    size = parse_size(args.size)
    big, small = Path(args.path), Path(args.path + ".small")
    if not big.exists() or abs(big.stat().st_size - size) > size // 50:
        generate(big, size)
    if not small.exists():
        generate(small, size // 10)
    explain = [sys.executable, "-m", "oomdoctor", "explain", str(big), "--format", "json"]
    grep = ["grep", "-c", "out of memory", str(big)]
    variants = {"default": explain}
    for n in args.threads or []:
        variants[f"--threads {n}"] = [*explain, "--threads", str(n)]
    if args.no_numpy:  # the same CLI with newline counting by bytes.count (what it does without numpy)
        code = ("import sys; import oomdoctor.parsers.oom_prefilter as pf; pf._NUMPY_MIN = 1 << 62; "
                "from oomdoctor.cli import main; sys.exit(main(sys.argv[1:]))")
        variants["bytes.count, no numpy"] = [sys.executable, "-c", code, *explain[3:]]
    _run(grep)  # warm the page cache
    t_grep: list[float] = []
    times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(args.repeat):  # interleaved, so load changes hit every command alike
        t_grep.append(_run(grep)[0])
        for k, cmd in variants.items():
            times[k].append(_run(cmd)[0])
    rss_big = peak_rss(explain)
    rss_small = peak_rss([*explain[:4], str(small), *explain[5:]])  # same command, 10x smaller log
    g = min(t_grep)
    rows = [
        ("log size", f"{big.stat().st_size / 1e9:.2f} GB"),
        ("prefilter engine", prefilter_engine()),
        ("usable CPUs", str(usable_cpus())),
        (f"grep -c 'out of memory' (best of {args.repeat})", f"{g:.2f} s"),
    ]
    for k, ts in times.items():
        e = min(ts)
        rows.append((f"oomdoctor explain, {k} (best of {args.repeat})",
                     f"{e:.2f} s ({big.stat().st_size / e / 1e9:.2f} GB/s)"))
        rows.append((f"ratio explain / grep, {k}", f"{e / g:.1f}x"))
    rows += [
        ("peak RSS explain, this log", f"{rss_big / 1024:.0f} MiB"),
        ("peak RSS explain, log 10x smaller", f"{rss_small / 1024:.0f} MiB"),
    ]
    if args.fallback:
        rows.append(("in-process scan, find prefilter (no hyperscan)", f"{scan_seconds(big, False):.2f} s"))
        rows.append(("in-process scan, default prefilter", f"{scan_seconds(big, True):.2f} s"))
        rows.append(("in-process scan, default prefilter, 1 thread", f"{scan_seconds(big, True, 1):.2f} s"))
    if args.markdown:
        print("| measure | value |\n|---|---|")
        for k, v in rows:
            print(f"| {k} | {v} |")
    else:
        for k, v in rows:
            print(f"{k:<52}{v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
