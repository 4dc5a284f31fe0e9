"""Diagnose this machine, or a bundle offline, across the eight layers; print facts, findings, verdict.

Exit 0 when nothing is at warning or above, 1 when something is, 2 for bad input (an unreadable bundle).
"""

from __future__ import annotations

import argparse
from datetime import datetime, timezone

from oomdoctor.cli.common import add_output_options, emit, terminal_width, wants_color, warn_skipped
from oomdoctor.errors import EXIT_FINDINGS, EXIT_OK, UsageError

NAME = "doctor"
HELP = "diagnose this machine (or a bundle) layer by layer and name the likely cause of OOMs"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bundle", metavar="PATH", help="diagnose a bundle (directory or .tar.gz) instead of this machine")
    parser.add_argument("--probe", action="store_true",
                        help="also run the active CUDA probes (child processes with time limits)")
    parser.add_argument("--probe-attempts", type=int, default=5, metavar="N",
                        help="CUDA contexts to create with --probe (default: 5)")
    parser.add_argument("--torch", action="store_true",
                        help="also import torch in a child process (60 s limit) for its compiled arch list and "
                             "cuDNN version; no CUDA call, no context (adds torch's import time, a few seconds)")
    add_output_options(parser)


def run(args: argparse.Namespace) -> int:
    from oomdoctor.checks.engine import diagnose
    from oomdoctor.collectors import machine
    from oomdoctor.collectors.workload import name_bundle

    if args.probe_attempts < 1:
        raise UsageError("--probe-attempts must be at least 1")
    created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    if args.bundle:
        if args.probe or args.torch:
            flag = "--probe" if args.probe else "--torch"
            raise UsageError(f"{flag} runs on a live machine; it cannot be combined with --bundle "
                             "(a bundle carries its torch facts in commands/torch.json)")
        notes: list[str] = []
        facts = name_bundle(machine.collect_bundle(args.bundle, notes), args.bundle)
        warn_skipped(args.bundle, notes)
        meta = {"source": "bundle", "bundle": str(args.bundle), "created": created}
    else:
        # --torch: the build's facts from a child; --probe implies it and adds the devices
        facts = machine.collect_live(probe=args.probe, probe_attempts=args.probe_attempts,
                                     import_torch=True if args.torch else None)
        meta = {"source": "live", "probe": bool(args.probe), "torch": bool(args.torch or args.probe),
                "created": created}
    report = diagnose(facts, meta)
    if args.format == "json":
        from oomdoctor.render.doctor_json import render_json

        content = render_json(report)
    elif args.format == "html":
        from oomdoctor.render.doctor_html import render_html

        content = render_html(report)
    else:
        from oomdoctor.render.doctor_text import render_text

        color = wants_color(args)
        content = render_text(report, color=color, width=terminal_width() if color else 100)
    emit(content, args)
    worst = report.worst_severity()
    return EXIT_FINDINGS if worst is not None and worst.rank >= 1 else EXIT_OK
