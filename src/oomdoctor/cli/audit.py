"""Find OOM risks in Kubernetes manifests, compose files, `docker run` lines and Slurm batch scripts; `--fix` writes
a patched copy. A file that cannot be read is skipped (stderr, the report, JSON `skipped`); the others are audited."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from oomdoctor.cli.common import write_stdout
from oomdoctor.errors import EXIT_FINDINGS, EXIT_OK, InputError, OomDoctorError, UsageError
from oomdoctor.redact import redact_rendered

NAME = "audit"
HELP = "find OOM risks in Kubernetes manifests, compose files, docker run lines and Slurm batch scripts"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE",
                        help="manifests (multi-document, Helm output, List), compose files, scripts with `docker run`, "
                             "Slurm batch scripts (#SBATCH)")
    parser.add_argument("--format", choices=("text", "json", "html"), default=None,
                        help="report format (default: html or json when -o's name ends so, else text)")
    parser.add_argument("-o", "--output", metavar="PATH", default=None,
                        help="report destination; with --fix: where the patched copy goes (a directory for several files)")
    parser.add_argument("--fix", action="store_true",
                        help="write a patched copy that adds /dev/shm, sizeLimits, GPU limits (needs -o or --in-place)")
    parser.add_argument("--in-place", action="store_true", help="with --fix: patch the files themselves, keeping FILE.bak")


def run(args: argparse.Namespace) -> int:
    from oomdoctor.checks.audit import audit
    from oomdoctor.collectors.configs import load_config
    from oomdoctor.render import audit as render

    if args.in_place:
        args.fix = True
    if args.fix and not args.in_place and not args.output:
        raise UsageError("--fix writes a patched copy: give -o OUT (or --in-place to patch FILE, keeping FILE.bak)")
    if args.fix and "-" in args.files:
        raise UsageError("--fix cannot patch standard input; give a file")
    if args.fix and args.output and not args.in_place and len(args.files) > 1 and not Path(args.output).is_dir():
        raise UsageError(f"--fix with {len(args.files)} files: -o must be an existing directory")

    results = []
    skipped: list[tuple[str, str]] = []  # (path, why): one file audit cannot read does not stop the others
    for path in args.files:
        try:
            cfg = load_config(path)
        except InputError as exc:
            skipped.append((path, _reason(path, exc.message)))
            continue
        findings = audit(cfg)
        entry = render.AuditedFile(cfg.path, cfg.type, len(cfg.workloads), findings, notes=list(cfg.notes))
        for note in cfg.notes:
            print(f"oomdoctor audit: {cfg.path}: {note}", file=sys.stderr)
        if args.fix:
            _fix(cfg, entry, args)
        results.append(entry)

    if not results:  # nothing could be audited: the run failed (exit 2), one line naming the file(s)
        raise InputError("; ".join(f"{p}: {why}" for p, why in skipped))
    for path, why in skipped:
        print(redact_rendered(f"oomdoctor audit: skipped {path}: {why}", "text"), file=sys.stderr)
    fmt = args.format or "text"
    content = {"json": render.to_json, "html": render.to_html}.get(fmt, render.to_text)(results, skipped)
    report_to = None if (args.fix and not args.in_place) else args.output
    _emit(redact_rendered(content, fmt), report_to)  # the report only: fixed files keep their values
    worst = [a for f in results for a in f.findings
             if a.finding.severity.rank >= 1 and a.finding.id not in f.fixed_ids]
    return EXIT_FINDINGS if worst else EXIT_OK


def _reason(path: str, message: str) -> str:
    """The InputError's text without the file name it starts with (the skip line names the file)."""
    for prefix in (f"{path}: ", "<stdin>: "):
        if message.startswith(prefix):
            return message[len(prefix):]
    return message


def _emit(content: str, output: str | None) -> None:
    from oomdoctor.collectors.configs import write_text

    if output and output != "-":
        write_text(output, content)
        print(f"wrote {output}", file=sys.stderr)
    else:
        write_stdout(content)


def _fix(cfg, entry, args) -> None:
    from oomdoctor.checks.audit import audit
    from oomdoctor.checks.audit.fix import fix_config
    from oomdoctor.collectors.configs import validate_manifest, write_text
    from oomdoctor.parsers.config_file import parse_config

    result = fix_config(cfg)
    for note in result.skipped:
        print(f"oomdoctor audit: {cfg.path}: not patched automatically: {note}", file=sys.stderr)
    if result.text == cfg.text:
        return
    try:
        fixed = parse_config(result.text, cfg.path)  # the patch must still parse, with the same workloads
    except InputError as exc:
        raise OomDoctorError(f"{cfg.path}: the patch would not parse ({exc.message}); nothing written") from None
    if cfg.type == "kubernetes":
        for i in result.changed_docs:
            before = validate_manifest(_plain(cfg.docs[i].data, cfg.path))
            after = validate_manifest(_plain(fixed.docs[i].data, cfg.path))
            if after and after != before:
                raise OomDoctorError(f"{cfg.path}: the patched manifest fails schema validation ({after}); nothing written")
            if before:
                print(f"oomdoctor audit: {cfg.path}: note: the input already fails validation: {before}", file=sys.stderr)
    remaining = {a.finding.id for a in audit(fixed)}
    entry.fixed = result.changes
    entry.fixed_ids = {a.finding.id for a in entry.findings} - remaining
    if args.in_place:
        shutil.copy2(cfg.path, cfg.path + ".bak")
        out = cfg.path
    else:
        out = args.output
        if Path(out).is_dir():
            out = str(Path(out) / Path(cfg.path).name)
        if Path(out).resolve() == Path(cfg.path).resolve():
            raise UsageError(f"-o {args.output} is the input itself; use --in-place to patch it (keeps a .bak)")
    write_text(out, result.text)
    entry.output = out


def _plain(data, path: str):
    try:
        return json.loads(json.dumps(data, default=str))
    except (ValueError, RecursionError):  # self-referencing YAML aliases
        raise InputError(f"{path}: recursive YAML aliases; cannot validate the patched manifest") from None
