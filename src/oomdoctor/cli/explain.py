"""Explain every OOM-like event in logs: ranked root causes, evidence, and the fix for this case.

Reads files or `-` (standard input) in constant memory; `--bundle PATH` adds the environment facts
of an `oomdoctor bundle`; `--here` reads the facts that decide between causes from this machine
(GPU processes, sharing layers, cgroup OOM kills, the kernel log, /dev/shm). Exit 1 when a memory
failure was explained, 0 when the logs have none or only OOMs the job caught and recovered from.
"""

from __future__ import annotations

import argparse
import importlib

from oomdoctor.cli.common import add_output_options, emit, progress, terminal_width, wants_color, warn_skipped
from oomdoctor.errors import EXIT_FINDINGS, EXIT_OK, InputError, UsageError
from oomdoctor.explain.events import STDIN, LogScan, LogScanner, index_block
from oomdoctor.explain.rank import Explanation, explain_scan
from oomdoctor.explain.read import check_readable, iter_prepared_at, log_size
from oomdoctor.render import explain as render

NAME = "explain"
HELP = "explain OOM-like events in logs (files or -) and rank their root causes"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("logs", nargs="*", metavar="LOG",
                        help="log files of one job (its ranks, its launcher): read together, one answer for the job; "
                             "explain each job's logs in its own run. '-' reads standard input; with --bundle and no "
                             "LOG, the bundle's logs/")
    parser.add_argument("--bundle", metavar="PATH", help="an `oomdoctor bundle` (directory or .tar.gz) for environment evidence")
    parser.add_argument("--here", action="store_true",
                        help="the log comes from this machine: read the deciding facts from it (GPU processes, "
                             "sharing layers, cgroup/kernel OOM kills, /dev/shm); no CUDA, no torch")
    parser.add_argument("--threads", type=_threads, default=None, metavar="N",
                        help="reader threads for large logs (default: usable CPUs, at most 8; 1 = none)")
    add_output_options(parser)


def _machine(option: str):  # -> the collectors.machine module
    try:
        return importlib.import_module("oomdoctor.collectors.machine")
    except ImportError as exc:
        raise UsageError(f"{option}: reading environment facts is not available in this build ({exc})") from exc


def _redact(ex: Explanation) -> None:
    """Echoed log text may hold tokens: pass it through oomdoctor.redact when it is present."""
    try:
        redact_text = importlib.import_module("oomdoctor.redact").redact_text
    except (ImportError, AttributeError):
        return
    for e in ex.events:
        e.text = redact_text(e.text)
    for h in ex.hypotheses:  # evidence may quote the log (e.g. what the user wrote about memory)
        h.evidence = [redact_text(x) for x in h.evidence]
    ex.notes = [redact_text(n) for n in ex.notes]  # a note quotes the crash's line


def _threads(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if not 1 <= n <= 64:
        raise argparse.ArgumentTypeError(f"expected a number of threads from 1 to 64, got {text!r}")
    return n


PROGRESS_FROM = 256 << 20  # logs this large take ~0.3 s and more: show how far the reading is


def _scan(scanner: LogScanner, paths: list[str], labels: list[str] | None, args: argparse.Namespace) -> None:
    total = sum(log_size(p) for p in paths)
    if total < PROGRESS_FROM:
        _scan_files(scanner, paths, labels, args.threads)
        return
    from oomdoctor.units import format_bytes

    with progress(f"explain: reading {format_bytes(total)}", args) as update:
        _scan_files(scanner, paths, labels, args.threads, total, update)


def _scan_files(scanner: LogScanner, paths: list[str], labels: list[str] | None, threads: int | None,
                total: int = 0, update=None) -> None:
    done, shown = 0, -1
    for i, path in enumerate(paths):
        scanner.start_source(labels[i] if labels else (STDIN if path == "-" else path))
        for buf, start, end, index, offset, length in iter_prepared_at(path, index_block, workers=threads):
            scanner.feed(buf, start, end, index, offset, length)  # indexed ahead; places are the log's offsets
            if update is not None:
                done += length
                pct = min(99, done * 100 // total)
                if pct != shown:
                    shown = pct
                    update(f"{pct}%")


def _refuse_binary(scan: LogScan) -> None:
    """A log that is binary data (a core dump, a checkpoint, a wrong file) is unreadable input, as a missing one is:
    one line, exit 2, nothing else (an "OOM found" read from its bytes would be noise, "none found" a false pass)."""
    if scan.binary_sources:
        name, share = scan.binary_sources[0]
        raise InputError(f"{'standard input' if name == STDIN else name}: does not look like text ({share:.0%} of its "
                         "first and last bytes are NUL or other control bytes, which text logs do not hold)")


def run(args: argparse.Namespace) -> int:
    if not args.logs and not args.bundle:
        raise UsageError("give at least one LOG (or - for standard input), or --bundle PATH with logs/ in it")
    if args.logs.count("-") > 1:
        raise UsageError("'-' (standard input) can be given once")
    for path in args.logs:
        check_readable(path)
    if args.here and args.bundle:
        raise UsageError("--here reads this machine and --bundle another one's facts: give one of them")
    facts = _machine("--here").collect_deciding_facts() if args.here else None
    scanner = LogScanner()
    if args.bundle:  # copied once (a private, checked copy); facts and logs/ both come from it
        machine = _machine(f"--bundle {args.bundle}")
        from oomdoctor.collectors.bundle_read import read_bundle

        with read_bundle(args.bundle) as opened:
            warn_skipped(args.bundle, opened.notes)
            facts = machine.collect_bundle_root(opened.root)
            if not args.logs:  # the logs the user added to the bundle (docs/contracts.md §5 logs/*)
                logs = opened.root / "logs"
                files = sorted(p for p in logs.glob("*") if p.is_file()) if logs.is_dir() else []
                _scan(scanner, [str(p) for p in files], [f"logs/{p.name}" for p in files], args)
    if args.logs:
        _scan(scanner, args.logs, None, args)
    scan = scanner.finish()
    _refuse_binary(scan)
    ex = explain_scan(scan, facts, bundle=args.bundle)
    _redact(ex)
    if args.format == "json":
        out = render.to_json(ex)
    elif args.format == "html":
        out = render.to_html(ex)
    else:
        out = render.to_text(ex, color=wants_color(args), width=terminal_width())
    emit(out, args)
    return EXIT_FINDINGS if ex.explained else EXIT_OK
