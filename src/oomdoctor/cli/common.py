"""Options and output plumbing shared by every reporting command."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from oomdoctor.errors import InputError

FORMATS = ("text", "json", "html")


def add_output_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=FORMATS, default="text", help="output format (default: text)")
    parser.add_argument("-o", "--output", metavar="PATH", default=None, help="write here instead of stdout")


def wants_color(args: argparse.Namespace) -> bool:
    """Colour only for a terminal on stdout, and never when NO_COLOR is set."""
    if getattr(args, "output", None) or os.environ.get("NO_COLOR"):
        return False
    return sys.stdout.isatty()


def terminal_width() -> int:
    try:
        return max(60, min(os.get_terminal_size().columns, 160))
    except OSError:
        return 100


def emit(content: str, args: argparse.Namespace) -> None:
    """Write a rendered report to -o PATH or stdout."""
    out = getattr(args, "output", None)
    if out and out != "-":
        path = Path(out)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content, encoding="utf-8")
        except OSError as exc:
            raise InputError(f"cannot write {out}: {exc.strerror or exc}") from exc
        print(f"wrote {out}", file=sys.stderr)
        return
    write_stdout(content)


def write_stdout(content: str) -> None:
    """Print a report, ending in a newline, on any stdout encoding."""
    if content and not content.endswith("\n"):
        content += "\n"
    try:
        sys.stdout.write(content)
    except UnicodeEncodeError:
        # stdout is not UTF-8 (PYTHONIOENCODING=ascii, a latin-1 or cp1252 console): '…', '─', '§'
        # become '?', rather than the whole report becoming an internal error. The encoder fails
        # before anything is written, so nothing is printed twice.
        reconfigure = getattr(sys.stdout, "reconfigure", None)
        if reconfigure is None:
            raise
        reconfigure(errors="replace")
        sys.stdout.write(content)
    sys.stdout.flush()
