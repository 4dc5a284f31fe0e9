"""Options and output plumbing shared by every reporting command."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

from oomdoctor.errors import InputError, UsageError

FORMATS = ("text", "json", "html")


def add_output_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=FORMATS, default=None,
                        help="output format (default: html or json when -o's name ends so, else text)")
    parser.add_argument("-o", "--output", metavar="PATH", default=None, help="write here instead of stdout")


def settle_format(args: argparse.Namespace) -> None:
    """No --format: the -o file's extension says it (`report RUN -o report.html`, as the README writes it, wrote
    text into report.html), else text. A report's -o must name a file: `-o out/` (or an existing directory)
    wrote a file named `out` (session 27), so it is refused here, for every command, with one line.

    `audit --fix -o OUT` names the patched copy (a directory for several files), not the report: left alone."""
    patching = bool(getattr(args, "fix", False) or getattr(args, "in_place", False))
    out = getattr(args, "output", None) or ""
    if out and out != "-" and not patching:
        from pathlib import Path  # lazily: ~5 ms of every command's start-up

        if out.endswith(("/", os.sep)) or Path(out).is_dir():
            raise UsageError(f"-o {out}: is a directory; -o takes a file name (e.g. -o {out.rstrip('/' + os.sep) or '.'}/"
                             f"{'node.tar.gz' if not hasattr(args, 'format') else 'report.' + (args.format or 'txt')})")
    if getattr(args, "format", "") is None:
        low = "" if patching else out.lower()
        args.format = "html" if low.endswith((".html", ".htm")) else "json" if low.endswith(".json") else "text"


def wants_color(args: argparse.Namespace) -> bool:
    """Colour only for a terminal on stdout, and never when NO_COLOR is set."""
    if getattr(args, "output", None) or os.environ.get("NO_COLOR"):
        return False
    return sys.stdout.isatty()


def wants_spinner(args: argparse.Namespace) -> bool:
    """Animate progress only for a person at a terminal: stderr a TTY, NO_COLOR unset, TERM not dumb,
    and not --format json (whose reader wants the document and a quiet stderr)."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb" or getattr(args, "format", None) == "json":
        return False
    return sys.stderr.isatty()


def stderr_console() -> Any:
    """A rich Console for lines on stderr; plain text, no escape codes, under NO_COLOR or off a terminal.

    rich alone drops colours under NO_COLOR but keeps styles such as dim (ESC[2m).
    """
    from rich.console import Console

    plain = bool(os.environ.get("NO_COLOR")) or not sys.stderr.isatty()
    return Console(stderr=True, highlight=False, color_system=None if plain else "auto", emoji=False)


@contextlib.contextmanager
def progress(text: str, args: argparse.Namespace) -> Iterator[Callable[[str], None]]:
    """Progress on stderr, never on stdout: a spinner where wants_spinner(); one plain line for a
    terminal without it (NO_COLOR, TERM=dumb); nothing with --format json or when stderr is a pipe or
    a file, where bad input must stay one line. Yields update(msg), which only the spinner shows.

    What libraries warn meanwhile is shown once each, on lines of its own on stderr: above the spinner
    (through its console), else as it comes (library_warnings_once). What they print goes to stderr too
    (rich's redirect under the spinner), so that stdout holds the report alone (--format json)."""
    if wants_spinner(args):
        console = stderr_console()

        def above(line: str) -> None:  # verbatim: no markup ("[transformers]"), no wrapping inside words
            console.print(line, markup=False, highlight=False, emoji=False, soft_wrap=True)

        with library_warnings_once(above), console.status(text) as status:
            yield lambda msg: status.update(f"{text}: {msg}")
        return
    if getattr(args, "format", None) != "json" and sys.stderr.isatty():
        print(f"{text} ...", file=sys.stderr, flush=True)
    with library_warnings_once(lambda line: print(line, file=sys.stderr, flush=True)), \
            contextlib.redirect_stdout(sys.stderr):
        yield lambda msg: None


@contextlib.contextmanager
def library_warnings_once(show: Callable[[str], None]) -> Iterator[None]:
    """Within the block, Python warnings and the log records that logging handlers would write to the
    terminal go to show(text) instead, each text once; nothing is dropped but repeats.

    transformers (like many libraries) gives its logger a StreamHandler when imported, bound to the
    stderr of that moment: the spinner's redirect of sys.stderr never saw its lines, which were written
    onto the spinner's line (session 25), and a search that builds the model twenty times printed each
    twenty times. The handlers keep their formatting, levels and filters; a filter added to each, and
    removed after, hands the formatted record over instead of letting it be written."""
    import logging
    import warnings

    seen: set[str] = set()

    def once(text: str) -> None:
        text = text.rstrip("\n")
        if text.strip() and text not in seen:
            seen.add(text)
            show(text)

    class _Hand(logging.Filter):
        def __init__(self, handler: logging.Handler):
            super().__init__()
            self.handler = handler

        def filter(self, record: logging.LogRecord) -> bool:
            try:
                text = self.handler.format(record)
            except Exception:  # noqa: BLE001 - a bad record: the handler reports it as it always has
                return True
            once(text)
            return False

    terminal = {id(s) for s in (sys.stderr, sys.__stderr__, sys.stdout, sys.__stdout__) if s is not None}
    loggers = [logging.getLogger(), *(lg for lg in list(logging.Logger.manager.loggerDict.values())
                                      if isinstance(lg, logging.Logger))]
    handlers = {id(h): h for lg in loggers for h in lg.handlers
                if isinstance(h, logging.StreamHandler) and id(getattr(h, "stream", None)) in terminal}
    if logging.lastResort is not None:  # what logging uses when no logger has a handler: sys.stderr
        handlers[id(logging.lastResort)] = logging.lastResort
    added = [(h, _Hand(h)) for h in handlers.values()]
    for h, f in added:
        h.addFilter(f)
    shown = warnings.showwarning

    def showwarning(message, category, filename, lineno, file=None, line=None):  # noqa: ANN001 - warnings' own
        once(warnings.formatwarning(message, category, filename, lineno, line))

    warnings.showwarning = showwarning
    try:
        yield
    finally:
        warnings.showwarning = shown
        for h, f in added:
            h.removeFilter(f)


def warn_skipped(bundle: str, notes: list[str]) -> None:
    """One stderr line saying what a bundle's safe copy left out (links, FIFOs, logs past the cap)."""
    if notes:
        name = bundle if len(bundle) <= 200 else bundle[:197] + "..."
        print(f"oomdoctor: bundle {name}: skipped " + "; ".join(notes), file=sys.stderr)


def terminal_width() -> int:
    try:
        return max(60, min(os.get_terminal_size().columns, 160))
    except OSError:
        return 100


def emit(content: str, args: argparse.Namespace) -> None:
    """Write a rendered report to -o PATH or stdout, redacted.

    Every report leaves through here, so this is where secrets are hidden once more, whatever a
    collector or renderer forgot (oomdoctor.redact.redact_rendered, docs/security.md).
    """
    from oomdoctor.redact import redact_rendered

    fmt = getattr(args, "format", None) or "text"
    content = redact_rendered(content, fmt)
    if fmt == "text":
        content = terminal_safe(content, keep_colour=wants_color(args) and not getattr(args, "output", None))
    out = getattr(args, "output", None)
    if out and out != "-":
        from pathlib import Path  # lazily: ~5 ms of every command's start-up

        path = Path(out)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content, encoding="utf-8")
        except OSError as exc:
            raise InputError(f"cannot write {out}: {exc.strerror or exc}") from exc
        print(f"wrote {out}", file=sys.stderr)
        return
    write_stdout(content)


_CONTROL = re.compile(r"\x1b\[[0-9;]{0,64}m|[\x00-\x08\x0b-\x1f\x7f\x80-\x9f]")
_SGR = re.compile(r"\x1b\[[0-9;]{0,64}m")


def terminal_safe(text: str, *, keep_colour: bool = False) -> str:
    """Control characters from logs and bundles shown as `cat -v` would (`^[`), so that a stranger's log cannot set
    the reader's terminal title, clear the screen or move the cursor (a walkthrough's `ESC]0;...BEL`); the colour codes
    the renderer itself wrote (SGR, `ESC[...m`) are kept when the report is coloured."""
    def shown(m: re.Match[str]) -> str:
        s = m.group(0)
        if len(s) > 1:
            return s if keep_colour else "^[" + s[1:]
        c = ord(s)
        return f"^{chr(c + 64)}" if c < 32 else ("^?" if c == 127 else "?")

    return _CONTROL.sub(shown, text)


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
