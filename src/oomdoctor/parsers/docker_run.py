"""`docker run` / `podman run` / `nvidia-docker run` command lines in scripts -> `Workload`s.

Commands are found with a regex; what precedes one on its logical line (continuations joined) says whether
it is a command (`shell_context`), and its words are read as POSIX shell does, quotes and shell operators
split off (`shell_words`), up to where the command ends. Everything is read front to back once, however
many commands one logical line holds. `insert_at` records the offset just after `run`, where `--fix`
inserts `--shm-size`. Option semantics: https://docs.docker.com/reference/cli/docker/container/run/
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from oomdoctor.errors import InputError
from oomdoctor.parsers.config_model import ContainerSpec, VolumeSpec, Workload, parse_docker_size
from oomdoctor.parsers.shell_context import CommandContext
from oomdoctor.parsers.shell_lines import LogicalLine, ScriptLines
from oomdoctor.parsers.shell_words import ShellSyntaxError, words

# A path before the engine (`/usr/bin/docker`) starts only where a path word starts: allowed to start after
# any `/` as well, the engine retried every such start over a long `/a/a/a...` word, quadratic in it.
_RUN = re.compile(r"(?<![\w.-])(?:(?<![\w./-])[\w./-]*/)?(docker|nvidia-docker|podman)(?:[ \t]+container)?[ \t]+run"
                  r"(?![\w-])")
# Flags without a value; everything else that starts with `-` takes one (docker's own parser rule).
_BOOL = frozenset({
    "-d", "--detach", "-i", "--interactive", "-t", "--tty", "--rm", "--privileged", "--init", "-P",
    "--publish-all", "--read-only", "--no-healthcheck", "--oom-kill-disable", "--help", "-q", "--quiet",
    "--disable-content-trust", "--sig-proxy", "--use-api-socket", "--replace", "--no-hosts", "--tls-verify",
    "--http-proxy", "--env-host",
})
_SHORT_BOOL = set("ditP")
_SHELL_OPS = frozenset({";", "&&", "||", "|", "&", ")", "(", ";;", "|&", ">", ">>", "<", "2>", "2>&1"})


@dataclass(frozen=True)
class DockerRun:
    workload: Workload
    insert_at: int  # character offset after `run` in the file


def find_docker_runs(text: str, name: str, notes: list[str] | None = None) -> list[DockerRun]:
    """Every `docker run` that the shell would run. Words inside a quoted string (`echo "usage: docker run
    --gpus all IMAGE"`) or handed to a command that prints them are not a command; a candidate whose words
    do not tokenise (an unclosed quote) is skipped with a note in `notes` (the others are still audited).
    Only when no candidate parses at all is the file an input error."""
    runs: list[DockerRun] = []
    failed: list[str] = []
    commands = list(_commands(text))
    for c, stop in zip(commands, _next_commands(commands)):
        end = c.logical.string_end(c.off, c.quote) if c.quote else len(c.logical.text)  # `bash -c "docker run ..."`
        try:
            workload = _parse(_tokens(c.logical.text, c.off, end, stop), c.lineno, c.match.group(1), len(runs))
        except ShellSyntaxError as exc:
            failed.append(f"line {c.lineno}: cannot parse the {c.match.group(1)} run command ({exc})")
            continue
        runs.append(DockerRun(workload, c.match.end()))
    if failed and not runs:
        raise InputError(f"{name}: {failed[0]}")
    if notes is not None:
        notes.extend(f"{f}; skipped" for f in failed)
    return runs


@dataclass(frozen=True)
class _Command:
    match: re.Match
    lineno: int  # the physical line where `docker run` starts
    quote: str  # '' or the quote of the string a shell runs it from
    logical: LogicalLine
    begin: int  # offsets in `logical.text`: where the match starts, and just after `run`
    off: int


def _commands(text: str) -> Iterator[_Command]:
    """The candidates that stand where a command does, in file order."""
    lines = ScriptLines(text)
    context: CommandContext | None = None
    logical: LogicalLine | None = None
    for m in _RUN.finditer(text):
        lines.visit(m.start())
        if lines.commented(m.start()):
            continue  # a commented-out command
        start = lines.logical_start()
        if context is None or context.start != start:
            context, logical = CommandContext(text, start), None
        quote = context.command_quote(m.start())
        if quote is None:
            continue
        if logical is None or logical.start != start:
            logical = LogicalLine(text, start)
        yield _Command(m, lines.index + 1, quote, logical, logical.offset(lines.start, m.start()),
                       logical.offset(lines.start, m.end()))


def _next_commands(commands: list[_Command]) -> list[int | None]:
    """For each command, where the next command outside any string on the same logical line starts, if one
    does: there its words end (`docker run img docker run ...`: the inner run is a command of its own,
    audited with its own words; read as the outer one's arguments too, each run read the rest of the line,
    quadratic in a line of many)."""
    stops: list[int | None] = [None] * len(commands)
    after: _Command | None = None
    for k in range(len(commands) - 1, -1, -1):
        c = commands[k]
        stops[k] = after.begin if after is not None and after.logical is c.logical else None
        if not c.quote:
            after = c
    return stops


def _tokens(line: str, pos: int, end: int, stop: int | None = None) -> Iterator[str]:
    """The command's words, read only as far as the command needs them (to its first shell operator, or
    the next command's first word at `stop`)."""
    return words(line, pos, end, stop)


def _gpu_count(value: str) -> int | None:
    v = value.strip().strip("'\"")
    if v == "all" or not v:
        return None
    if v.isdigit():
        return int(v)
    for part in v.split(","):
        if part.startswith("count="):
            c = part[6:]
            return int(c) if c.isdigit() else None
    if v.startswith("device="):
        return len([d for d in v[7:].split(",") if d])
    if "device=" in v:
        return len(v.split("device=", 1)[1].split(","))
    return None


def _parse(tokens: Iterator[str], lineno: int, engine: str, index: int) -> Workload:
    """Options up to the image, then the container's command up to the first shell operator; tokens are
    pulled one by one, so the rest of the line is never read."""
    opts: list[tuple[str, str]] = []
    image = ""
    rest: list[str] = []

    def value() -> str:  # an option's value is the next word, whatever it is ("" at the end)
        v = next(tokens, None)
        return "" if v is None else v

    tok = next(tokens, None)
    while tok is not None:
        if tok in _SHELL_OPS:
            break
        if tok == "--":
            tok = next(tokens, None)
            continue
        if tok.startswith("--"):
            key, eq, val = tok.partition("=")
            opts.append((key, val) if eq or key in _BOOL else (key, value()))
            tok = next(tokens, None)
            continue
        if tok.startswith("-") and len(tok) > 1:
            flags = tok[1:]
            j = 0
            while j < len(flags) and flags[j] in _SHORT_BOOL:
                opts.append(("-" + flags[j], ""))
                j += 1
            if j < len(flags):
                key = "-" + flags[j]
                val = flags[j + 1:]
                if val.startswith("="):
                    val = val[1:]
                opts.append((key, val or value()))
            tok = next(tokens, None)
            continue
        image = tok
        for t in tokens:
            if t in _SHELL_OPS:
                break
            rest.append(t)
        break
    return _workload(opts, image, rest, lineno, engine, index)


def _workload(opts, image, rest, lineno, engine, index) -> Workload:
    env: list[tuple[str, str]] = []
    shm_raw, ipc, gpus, runtime, mem, name = "", "", "", "", "", ""
    tmpfs: list[VolumeSpec] = []
    problems: list[str] = []
    for key, val in opts:
        if key in ("-e", "--env"):
            k, _, v = val.partition("=")
            env.append((k, v))
        elif key == "--shm-size":
            shm_raw = val
        elif key == "--ipc":
            ipc = val
        elif key == "--gpus":
            gpus = val.strip("'\"") or "(empty)"
        elif key == "--runtime":
            runtime = val
        elif key in ("-m", "--memory"):
            mem = val
        elif key == "--name":
            name = val
        elif key == "--tmpfs":
            path, _, o = val.partition(":")
            size = next((x.split("=", 1)[1] for x in o.split(",") if x.startswith("size=")), "")
            tmpfs.append(VolumeSpec(path, "tmpfs", "Memory", parse_docker_size(size) if size else None, size))
        elif key == "--mount" and "type=tmpfs" in val:
            parts = dict(p.split("=", 1) for p in val.split(",") if "=" in p)
            size = parts.get("tmpfs-size", "")
            target = parts.get("destination") or parts.get("target") or parts.get("dst", "")
            tmpfs.append(VolumeSpec(target, "tmpfs", "Memory", parse_docker_size(size) if size else None, size))
        elif key == "--device" and "nvidia" in val:
            gpus = gpus or f"--device {val}"
    if shm_raw and parse_docker_size(shm_raw) is None:
        problems.append(f"--shm-size {shm_raw!r} is not a size docker accepts")
    container = ContainerSpec(
        name=name or image or "?", image=image, args=tuple(rest), env=tuple(env), line=lineno,
        shm_size=parse_docker_size(shm_raw) if shm_raw else None, shm_raw=shm_raw, ipc=ipc, gpus=gpus,
        gpu_count=_gpu_count(gpus) if gpus else None, runtime=runtime, memory_limit_raw=mem, tmpfs=tuple(tmpfs),
        problems=tuple(problems),
    )
    return Workload(
        source="docker-run", kind=f"{engine} run", name=name or image or "?", containers=(container,),
        volumes=tuple(tmpfs), doc_index=index, line=lineno, origin=f"line {lineno}", host_ipc=ipc == "host",
    )

