"""GIVEN a hostile script with many `docker run` lines WHEN audit parses it THEN the per-file work (the
`#SBATCH` options) is done once, not once per command, and line numbers stay right when counted
incrementally (timings: bench/audit_hostile.py)."""

from __future__ import annotations

from oomdoctor.parsers import config_file
from oomdoctor.parsers.config_file import parse_config
from oomdoctor.parsers.docker_run import find_docker_runs

N = 20000


def test_sbatch_options_are_read_once_per_file_not_once_per_docker_run(monkeypatch):
    calls = []
    real = config_file.sbatch_options

    def counting(text):
        calls.append(1)
        return real(text)

    monkeypatch.setattr(config_file, "sbatch_options", counting)
    text = "#!/bin/bash\n#SBATCH --mem=64G\n#SBATCH --gres=gpu:1\n" + "docker run --gpus all img python t.py\n" * N
    cfg = parse_config(text, "many.sbatch")
    assert len(cfg.workloads) == N and len(calls) == 1
    assert {w.containers[0].memory_limit for w in cfg.workloads} == {64 * 2**30}


def test_line_numbers_survive_skipped_and_continued_candidates():
    text = ("#!/bin/sh\n"                          # 1
            "# docker run commented img\n"          # 2
            "docker run -m 4g a \\\n"               # 3
            "  python x.py\n"                       # 4
            "echo 'docker run in a string'\n"       # 5
            "\n"                                    # 6
            "docker run b\n"                        # 7
            "docker run c; docker run d\n")         # 8
    assert [r.workload.line for r in find_docker_runs(text, "x.sh")] == [3, 7, 8, 8]
