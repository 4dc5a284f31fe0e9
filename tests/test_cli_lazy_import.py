"""GIVEN one command on the command line WHEN the parser is built THEN only that command's module is
imported (start-up time, bench/explain_stream.py), and every command is still listed without one."""

from __future__ import annotations

import subprocess
import sys

from oomdoctor.cli import _COMMAND_MODULES, build_parser


def _commands(parser) -> set[str]:
    sub = next(a for a in parser._actions if a.dest == "command")
    return set(sub.choices)


def test_full_parser_lists_every_command_and_single_parser_only_its_own():
    assert _commands(build_parser()) == set(_COMMAND_MODULES)
    assert _commands(build_parser("explain")) == {"explain"}


def test_explain_does_not_import_other_commands(tmp_path):
    log = tmp_path / "a.log"
    log.write_text("step 1 loss 0.3\n")
    code = ("import sys; from oomdoctor.cli import main; rc = main(['explain', sys.argv[1], '--format', 'json']);"
            "print('\\n' + ','.join(sorted(m for m in sys.modules if m.startswith('oomdoctor.cli.'))))")
    out = subprocess.run([sys.executable, "-c", code, str(log)], capture_output=True, text=True, timeout=60)
    loaded = out.stdout.strip().splitlines()[-1].split(",")
    assert "oomdoctor.cli.explain" in loaded
    assert not {"oomdoctor.cli.report", "oomdoctor.cli.doctor", "oomdoctor.cli.max_batch"} & set(loaded)
