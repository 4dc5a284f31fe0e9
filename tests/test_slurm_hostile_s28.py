"""GIVEN a hostile Slurm batch script (many blank lines, a very long #SBATCH word) WHEN audit reads it THEN it
reads the same exports and options as before, in linear time: `^\\s*export` ran from every line start over
all the blank lines after it, and shlex copies a word per character (timings: bench/audit_hostile.py)."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from oomdoctor.parsers import slurm
from oomdoctor.parsers.config_file import parse_config

_OLD_EXPORT = re.compile(r"^\s*export\s+([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.MULTILINE)  # the regex it replaces
_PARTS = st.sampled_from(["\n", " ", "\t", "\r", "\x0c", "export", " X=1", "Y=2", "x", "#", "\u2028", "=", "\n\n"])


@settings(max_examples=500, deadline=None)
@given(st.lists(_PARTS, max_size=25).map("".join))
def test_the_export_lines_found_are_the_same(text):
    assert slurm._EXPORT.findall(text) == _OLD_EXPORT.findall(text)


def test_exports_after_many_blank_lines_are_read():
    text = "#!/bin/bash\n#SBATCH --mem=8G\n" + "\n" * 50_000 + "  export NUM_WORKERS=8\npython train.py\n"
    w = parse_config(text, "job.sbatch").workloads[0]
    assert ("NUM_WORKERS", "8") in w.containers[0].env


def test_a_long_sbatch_word_is_one_value():
    comment = "a" * 300_000
    opts = slurm.sbatch_options(f"#!/bin/bash\n#SBATCH --comment='{comment} b' --mem=8G # note\npython t.py\n")
    assert opts == {"--comment": f"{comment} b", "--mem": "8G"}
