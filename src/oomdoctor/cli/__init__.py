"""The thin CLI: parse, call the library, render, map errors to exit codes.

Each subcommand is one module exposing `NAME`, `HELP`, `add_arguments(parser)` and `run(args) -> int`
(memray's Command pattern). Adding a command is one module plus one line in `_COMMAND_MODULES`.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from oomdoctor._version import __version__
from oomdoctor.errors import EXIT_INTERNAL, EXIT_USAGE, OomDoctorError

# name -> module under oomdoctor.cli; imported lazily so `oomdoctor doctor` never imports torch.
_COMMAND_MODULES: dict[str, str] = {
    # In the order a user meets them: the machine, the log, the next run, the cluster.
    "doctor": "doctor",
    "bundle": "bundle",
    "explain": "explain",
    "estimate": "estimate",
    "record": "record",
    "report": "report",
    "max-batch": "max_batch",
    "audit": "audit",
    "diff": "diff",
    "fleet": "fleet",
}


class _Parser(argparse.ArgumentParser):
    """argparse that exits 2 with one line, as the contract asks."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"oomdoctor: error: {message}\n")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """All commands, or just `only`: importing every command module (jinja2, timelines, ...) is ~50 ms
    of start-up, a quarter of `grep`'s time over 1 GB in bench/explain_stream.py."""
    parser = _Parser(prog="oomdoctor", description="Find out why a PyTorch job ran out of GPU memory.")
    parser.add_argument("--version", action="version", version=f"oomdoctor {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, modname in _COMMAND_MODULES.items():
        if only is not None and name != only:
            continue
        module = importlib.import_module(f"oomdoctor.cli.{modname}")
        p = sub.add_parser(name, help=module.HELP, description=module.__doc__)
        module.add_arguments(p)
        p.set_defaults(_module=module)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv == ["--version"]:  # answered without loading any command (and its packages), as argparse would
        print(f"oomdoctor {__version__}")
        raise SystemExit(0)
    try:
        parser = build_parser(argv[0] if argv and argv[0] in _COMMAND_MODULES else None)
    except ImportError as exc:  # a broken install (seen on a machine whose wheel install had failed): one line
        if _debug():
            raise
        print(f"oomdoctor: {_missing(exc)}", file=sys.stderr)
        return EXIT_INTERNAL
    args = parser.parse_args(argv)
    from oomdoctor.cli.common import settle_format

    module = getattr(args, "_module", None)
    if module is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        settle_format(args)  # may refuse -o (a directory): one line, exit 2, like every other usage error
        return int(module.run(args))
    except OomDoctorError as exc:
        print(f"oomdoctor {args.command}: {_one_line(exc.message)}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("oomdoctor: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # noqa: BLE001 - the last line of defence: one line, exit 3
        if isinstance(exc, ModuleNotFoundError) and (exc.name or "oomdoctor").split(".")[0] != "oomdoctor" \
                and not _debug():  # a package of the environment, not oomdoctor's own code
            print(f"oomdoctor {args.command}: {_missing(exc)}", file=sys.stderr)
            return EXIT_INTERNAL
        print(f"oomdoctor {args.command}: internal error: {type(exc).__name__}: {_one_line(str(exc), 300)} "
              "(please report it; set OOMDOCTOR_DEBUG=1 for the traceback)", file=sys.stderr)
        if _debug():
            raise
        return EXIT_INTERNAL


def _missing(exc: ImportError) -> str:
    """A broken install (seen on a machine whose wheel install had failed), in one line."""
    return (f"a package it needs is missing ({_one_line(str(exc), 200)}): install it in this environment "
            "(`pip install oomdoctor` brings the core packages; the README says which extra each command needs)")


def _one_line(message: str, limit: int = 1000) -> str:
    """Error lines are one line of bounded length, whatever the input put into them (member names, paths)."""
    text = " ".join(message.split()) if ("\n" in message or "\r" in message) else message
    text = "".join(c if c.isprintable() else "?" for c in text[: limit * 4])
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _debug() -> bool:
    import os

    return os.environ.get("OOMDOCTOR_DEBUG", "") not in ("", "0")
