"""GIVEN a shell script whose one logical line (backslash continuations) or one physical line holds many
`docker run` commands WHEN audit reads it THEN the work is linear in the script (each command's words are
read once, up to its end; the line before it is not re-read per command), each command is found at the
physical line where its `docker run` starts, and `--fix` edits that command at that place.
(Timings: bench/audit_hostile.py and docs/benchmarks.md.)"""

from __future__ import annotations

import re
import sys

from oomdoctor.checks.audit import audit
from oomdoctor.checks.audit.fix import fix_config
from oomdoctor.parsers import docker_run
from oomdoctor.parsers.config_file import parse_config
from oomdoctor.parsers.docker_run import find_docker_runs

RUN = "docker run --gpus all img python t.py"  # 7 words


def chained(n: int) -> str:  # one logical line over n physical lines, `&&` between the commands
    return "#!/bin/bash\n" + f"{RUN} \\\n&& " * (n - 1) + RUN + "\n"


def one_line(n: int) -> str:  # n commands on one physical line
    return "#!/bin/bash\n" + f"{RUN}; " * n + "\n"


def in_one_string(n: int) -> str:  # n commands in one string that a shell runs
    return '#!/bin/bash\nbash -lc "' + f"{RUN}; " * n + '"\n'


def printed(n: int) -> str:  # n candidates that are arguments of echo
    return "#!/bin/bash\necho " + f"{RUN} " * n + "\ndocker run img\n"


def nested(n: int) -> str:  # each command an argument of the one before: continued lines, no operator
    return "#!/bin/bash\n" + f"{RUN} \\\n" * (n - 1) + RUN + "\n"


def _counting_tokens(monkeypatch) -> list[int]:
    counted = [0]
    real = docker_run._tokens

    def counting(*args):
        got = real(*args)
        if isinstance(got, list):
            counted[0] += len(got)
            return got

        def each():
            for tok in got:
                counted[0] += 1
                yield tok
        return each()

    monkeypatch.setattr(docker_run, "_tokens", counting)
    return counted


def test_each_command_on_a_long_logical_line_reads_only_its_own_words(monkeypatch):
    n = 300
    for shape in (chained, one_line, in_one_string, nested):
        counted = _counting_tokens(monkeypatch)
        assert len(find_docker_runs(shape(n), "x.sh")) == n
        assert counted[0] <= 10 * n, (shape.__name__, counted[0])  # 7 words and an operator each; it was ~n*n*4


def _line_events(text: str, budget: int) -> int:
    """Python lines executed to parse `text` (parser, tokenizer, standard library): a count of work, not time."""
    n = [0]

    def trace(frame, event, arg):
        if event == "line":
            n[0] += 1
            if n[0] > budget:
                raise OverflowError
        return trace

    saved = sys.gettrace()
    sys.settrace(trace)
    try:
        parse_config(text, "x.sh")
    except OverflowError:
        pass
    finally:
        sys.settrace(saved)
    return n[0]


def test_parsing_work_grows_linearly_with_the_commands_on_one_line():
    for shape in (chained, one_line, in_one_string, printed, nested):
        small = _line_events(shape(150), 10**8)
        large = _line_events(shape(300), 3 * small)
        assert large <= 2.5 * small, (shape.__name__, small, large)  # twice the commands: twice the work, not 4x


def test_commands_on_one_continued_line_are_found_at_their_own_physical_lines():
    text = ("#!/bin/bash\n"                                          # 1
            "set -e\n"                                               # 2
            "docker run --gpus all -m 8g \\\n"                       # 3  first command starts here
            "  --ipc=host img-a python train.py \\\n"                # 4
            "  && docker run --gpus 1 img-b \\\n"                    # 5  second
            "     python train.py --num-workers 8 \\\n"              # 6
            "  ; echo docker run not-a-command \\\n"                 # 7  an argument of echo
            "  ; podman run --gpus all --shm-size 32m img-c \\\n"    # 8  third
            "     python train.py --num-workers 4\n")                # 9
    cfg = parse_config(text, "x.sh")
    got = [(w.containers[0].image, w.line, w.containers[0].args) for w in cfg.workloads]
    assert got == [("img-a", 3, ("python", "train.py")),
                   ("img-b", 5, ("python", "train.py", "--num-workers", "8")),
                   ("img-c", 8, ("python", "train.py", "--num-workers", "4"))]
    a, b, c = (w.containers[0] for w in cfg.workloads)
    assert (a.ipc, a.memory_limit_raw, b.gpu_count, c.shm_raw) == ("host", "8g", 1, "32m")
    findings = audit(cfg)
    assert findings and {f.line for f in findings} <= {3, 5, 8}
    assert {f.line for f in findings if f.finding.id in ("AUD001", "AUD002")} == {5, 8}  # b: no /dev/shm; c: 32m
    fixed = fix_config(cfg).text.splitlines()
    assert re.fullmatch(r"  && docker run --shm-size=\w+ --gpus 1 img-b \\", fixed[4])  # after its own `run`
    assert re.fullmatch(r"  ; podman run --gpus all --shm-size=\w+ img-c \\", fixed[7])  # its own option
    assert fixed[:4] == text.splitlines()[:4] and fixed[8:] == text.splitlines()[8:]
    assert [w.line for w in parse_config("\n".join(fixed) + "\n", "x.sh").workloads] == [3, 5, 8]


def test_a_command_is_audited_when_a_later_command_on_its_line_has_an_unclosed_quote():
    """The shell runs `docker run` before it reaches the quote (which may close lines later); reading the
    whole rest of the line made the command unparseable and skipped it."""
    notes: list[str] = []
    runs = find_docker_runs('docker run --gpus all img python t.py && echo "done\nthere"\n', "x.sh", notes)
    assert [(r.workload.containers[0].image, r.workload.line) for r in runs] == [("img", 1)] and notes == []


def test_an_inner_docker_run_is_its_own_command_and_not_the_outer_ones_arguments():
    text = "docker run --gpus all img docker run -m 4g img2 python t.py --num-workers 8\n"
    got = [(w.containers[0].image, w.containers[0].args) for w in parse_config(text, "x.sh").workloads]
    assert got == [("img", ()), ("img2", ("python", "t.py", "--num-workers", "8"))]
    text = 'docker run -e CMD="docker run x" img bash -c "docker run y" --workers 2\n'  # inside words: kept
    got = [(w.containers[0].image, w.containers[0].args) for w in parse_config(text, "x.sh").workloads]
    assert got == [("img", ("bash", "-c", "docker run y", "--workers", "2")), ("x", ()), ("y", ())]
