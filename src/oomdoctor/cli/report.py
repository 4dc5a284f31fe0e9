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
from oomdoctor.redact import MASK, is_secret_flag, redact_text
from oomdoctor.render import record as render

NAME = "report"
HELP = "report on a run recorded by `oomdoctor record` (HTML, text or JSON)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", help="directory written by oomdoctor record / oomdoctor.watch")
    add_output_options(parser)


def _environment_findings(env: dict | None) -> list[dict]:
    """`oomdoctor doctor`'s checks over the facts saved in env.json, warnings and worse only."""
    if not env or not isinstance(env.get("facts"), dict):
        return []
    from oomdoctor.checks.engine import diagnose
    from oomdoctor.facts import FactSet

    report = diagnose(FactSet.from_json(env["facts"]), {"source": "env.json"}).to_json()
    return [f for f in report.get("findings", []) if f.get("severity") in ("warning", "error", "critical")]


def _redacted(value):
    """The recorded command line, OOM messages and problems may hold tokens (`--hf-token hf_...`,
    `PASSWORD=...`); a report is made to be shared, so every string goes through oomdoctor.redact."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {k: _redacted(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):  # argv: ["--hf-token", "hf_..."] hides the word after the option
        return [MASK if i and isinstance(v, str) and isinstance(value[i - 1], str) and is_secret_flag(value[i - 1])
                else _redacted(v) for i, v in enumerate(value)]
    return value


def run(args: argparse.Namespace) -> int:
    files = rundir.load(args.run_dir)
    doc = timeline.analyse(files)
    try:
        doc["environment_findings"] = _environment_findings(files.env)
    except Exception as exc:  # a newer/older env.json must not stop the report
        doc["environment_findings"] = []
        doc["problems"].append(f"env.json: environment checks failed ({type(exc).__name__}: {exc})")
    doc = _redacted(doc)
    if args.format == "html":
        out = render.render_html(doc)
    elif args.format == "json":
        out = render.render_json(doc)
    else:
        out = render.render_text(doc)
    emit(out, args)
    return EXIT_FINDINGS if doc["verdict"]["severity"] in ("warning", "error") else EXIT_OK
