"""Aggregate many `doctor --format json` reports: configuration groups, outliers, findings across nodes.

Inputs are files, directories (every *.json below them) or `-` for standard input, which may hold many
reports back to back, e.g. `kubectl logs -l app=oomdoctor --prefix --tail=-1 | oomdoctor fleet -`.
A node's name is its report's `host.name`, else the file name without extension (or the kubectl pod).
"""

from __future__ import annotations

import argparse
import sys

from oomdoctor.cli.common import add_output_options, emit
from oomdoctor.errors import EXIT_FINDINGS, EXIT_OK, InputError

NAME = "fleet"
HELP = "aggregate many doctor JSON reports: groups by configuration, outliers, finding counts"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH", help="report files, directories, or - for stdin")
    parser.add_argument("--strict", action="store_true", help="exit 2 if any input is not a readable report")
    add_output_options(parser)


def run(args: argparse.Namespace) -> int:
    from oomdoctor.analysis.fleet import aggregate, summarize
    from oomdoctor.collectors.reports import iter_report_sources
    from oomdoctor.render import fleet as render

    skipped: list[tuple[str, str]] = []

    def summaries():
        for source, doc, error in iter_report_sources(args.paths):
            if error:
                skipped.append((source, error))
                continue
            try:
                yield summarize(doc, source.split("/")[1] if source.startswith("pod/") else source)
            except ValueError as exc:
                skipped.append((source, str(exc)))

    result = aggregate(summaries())
    result.skipped = skipped
    # A failing run says one line (docs/contracts.md §3), so the errors come before the per-input warnings.
    if result.nodes == 0:
        where = ", ".join(args.paths)
        raise InputError(f"{where}: no doctor reports found" + (f" ({skipped[0][0]}: {skipped[0][1]})" if skipped else ""))
    if args.strict and skipped:
        raise InputError(f"{skipped[0][0]}: {skipped[0][1]} (--strict)")
    for source, why in skipped[:5]:
        print(f"oomdoctor fleet: skipped {source}: {why}", file=sys.stderr)
    if len(skipped) > 5:
        print(f"oomdoctor fleet: skipped {len(skipped) - 5} more input(s)", file=sys.stderr)
    content = {"json": render.to_json, "html": render.to_html}.get(args.format, render.to_text)(result)
    emit(content, args)
    bad = any(sev in ("warning", "error", "critical") for sev in result.finding_severity.values())
    return EXIT_FINDINGS if bad else EXIT_OK
