"""Turn a recorded run directory into a report: timelines, fragmentation, leaks, the OOM, the verdict.

`--format html` writes one self-contained page (inline SVG, no scripts, no network). Exit code 1
when the run hit an OOM or a leak/fragmentation warning was found, 0 otherwise.
"""

from __future__ import annotations

import argparse

from oomdoctor.analysis import timeline
from oomdoctor.cli.common import add_output_options, emit
from oomdoctor.collectors import rundir
from oomdoctor.errors import EXIT_FINDINGS, EXIT_OK
from oomdoctor.render import record as render

NAME = "report"
HELP = "report on a run recorded by `oomdoctor record` (HTML, text or JSON)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", help="directory written by oomdoctor record / oomdoctor.watch")
    add_output_options(parser)


def run(args: argparse.Namespace) -> int:
    doc = timeline.analyse(rundir.load(args.run_dir))
    if args.format == "html":
        out = render.render_html(doc)
    elif args.format == "json":
        out = render.render_json(doc)
    else:
        out = render.render_text(doc)
    emit(out, args)
    return EXIT_FINDINGS if doc["verdict"]["severity"] in ("warning", "error") else EXIT_OK
