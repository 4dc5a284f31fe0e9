"""Compare two bundles or two `doctor --format json` reports; the differences that matter for OOM come first."""

from __future__ import annotations

import argparse
from pathlib import Path

from oomdoctor.cli.common import add_output_options, emit, warn_skipped
from oomdoctor.errors import EXIT_FINDINGS, EXIT_OK, InputError

NAME = "diff"
HELP = "compare two bundles or doctor JSON reports, most relevant differences first"
RELEVANT_SCORE = 50  # exit 1 when a difference at least this relevant exists


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("a", metavar="A", help="bundle (directory or .tar.gz) or doctor JSON report, e.g. the good machine")
    parser.add_argument("b", metavar="B", help="the other one, e.g. the machine with OOMs")
    parser.add_argument("--all", action="store_true", help="text: show every difference, not only the top 25")
    add_output_options(parser)


def load_report(path: str):
    """A DoctorReport from a bundle (collect + diagnose) or from doctor JSON."""
    from oomdoctor.collectors.reports import collect_bundle_facts, is_bundle, read_json_report
    from oomdoctor.facts.report import DoctorReport, report_from_json

    if is_bundle(path):
        notes: list[str] = []
        facts = collect_bundle_facts(path, notes)
        warn_skipped(path, notes)
        meta = {"source": "bundle", "bundle": path}
        try:
            from oomdoctor.checks.engine import diagnose
        except ImportError:  # checks engine not in this build: compare facts only
            from oomdoctor.facts import Category, Verdict
            return DoctorReport(facts, (), Verdict(Category.UNKNOWN, "no checks engine"), {}, meta)
        return diagnose(facts, meta)
    doc = read_json_report(path)
    try:
        return report_from_json(doc)
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{path}: {exc}") from None


def _name(path: str, report) -> str:
    host = report.facts.value("host.name")
    return f"{path} (host {host})" if host else path


def run(args: argparse.Namespace) -> int:
    from oomdoctor.analysis.diff import diff_reports, top_explanation
    from oomdoctor.render import diff as render

    if Path(args.a).resolve() == Path(args.b).resolve() if Path(args.a).exists() else False:
        raise InputError(f"{args.a}: A and B are the same input")
    ra, rb = load_report(args.a), load_report(args.b)
    result = diff_reports(ra, rb, _name(args.a, ra), _name(args.b, rb))
    headline = top_explanation(result)
    if args.format == "json":
        content = render.to_json(result, headline)
    elif args.format == "html":
        content = render.to_html(result, headline)
    else:
        content = render.to_text(result, headline, None if args.all else 25)
    emit(content, args)
    return EXIT_FINDINGS if any(d.score >= RELEVANT_SCORE for d in result.differences) else EXIT_OK
