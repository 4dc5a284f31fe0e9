"""`docker run` / `podman run` / `nvidia-docker run` command lines in scripts -> `Workload`s.

Lines are found with a regex, continuation backslashes joined, and the command tokenised with
`shlex` (POSIX rules, shell operators split off) so quoting works as the shell would do it.
`insert_at` records the offset just after `run`, where `--fix` inserts `--shm-size`.
Option semantics: https://docs.docker.com/reference/cli/docker/container/run/
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from oomdoctor.errors import InputError
from oomdoctor.parsers.config_model import ContainerSpec, VolumeSpec, Workload, parse_docker_size

_RUN = re.compile(r"(?<![\w.-])(?:[\w./-]*/)?(docker|nvidia-docker|podman)(?:[ \t]+container)?[ \t]+run(?![\w-])")
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


def _logical_line(text: str, start: int) -> str:
    """From `start` to the end of the shell line, joining `\\<newline>` continuations."""
    out = []
    i = start
    n = len(text)
    while i < n:
        j = text.find("\n", i)
        if j < 0:
            out.append(text[i:])
            break
        seg = text[i:j].rstrip("\r")
        if seg.endswith("\\") and not seg.endswith("\\\\"):
            out.append(seg[:-1] + " ")
            i = j + 1
            continue
        out.append(seg)
        break
    return "".join(out)


def _tokens(line: str) -> list[str]:
    lex = shlex.shlex(line, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    lex.commenters = "#"
    return list(lex)


def find_docker_runs(text: str, name: str, notes: list[str] | None = None) -> list[DockerRun]:
    """Every `docker run` that the shell would run. Words inside a quoted string (`echo "usage: docker run
    --gpus all IMAGE"`) or handed to a command that prints them are not a command; a candidate that does
    not tokenise is skipped with a note in `notes` (the others are still audited). Only when no candidate
    parses at all is the file an input error."""
    runs: list[DockerRun] = []
    failed: list[str] = []
    counted, lineno = 0, 1  # line numbers counted on from the previous match: linear in the file, not quadratic
    for m in _RUN.finditer(text):
        line_start = text.rfind("\n", 0, m.start()) + 1
        before = text[line_start:m.start()]
        if "#" in before and before.lstrip().startswith("#"):
            continue  # a commented-out command
        quote = _command_quote(text[_logical_start(text, line_start):m.start()])
        if quote is None:
            continue
        lineno += text.count("\n", counted, m.start())
        counted = m.start()
        logical = _logical_line(text, m.end())
        if quote:  # `bash -c "docker run ..."`: the command ends where the string does
            logical = _until_quote(logical, quote)
        try:
            tokens = _tokens(logical)
        except ValueError as exc:
            failed.append(f"line {lineno}: cannot parse the {m.group(1)} run command ({exc})")
            continue
        workload = _parse(tokens, lineno, m.group(1), len(runs))
        runs.append(DockerRun(workload, m.end()))
    if failed and not runs:
        raise InputError(f"{name}: {failed[0]}")
    if notes is not None:
        notes.extend(f"{f}; skipped" for f in failed)
    return runs


# Commands whose arguments are text to show, not a command to run: `echo docker run ...`, `log "..."`.
_PRINTERS = frozenset({"echo", "printf", "print", "cat", "log", "logger", "info", "warn", "warning", "error", "die",
                       "fail", "usage", "msg", "note", "debug", "say", "grep", "man", "read", ":", "true", "local",
                       "export", "declare", "readonly"})
_SEPARATOR = re.compile(r"(?:;|&&|\|\||\||&|\(|\)|\{|\}|`|\$\(|\bthen\b|\bdo\b|\belse\b|\btime\b|!)\s*$")
# A quoted string is itself a command when a shell (or ssh, eval, su -c) runs it: `bash -lc "docker run ..."`;
# or a command kept for later, `CMD="docker run ..."` (then `$CMD` or `eval "$CMD"`).
_RUNS_STRING = re.compile(r"(?:\beval|\bssh\b.*|\b\w*sh\s+(?:-\w+\s+)*-\w*c|\bsu\b.*-c|\bwatch\b.*)\s*$"
                          r"|(?:^|[\s;&|(])(?:export\s+|local\s+|readonly\s+)?[A-Za-z_]\w*=$")


def _logical_start(text: str, line_start: int) -> int:
    """The start of the logical shell line holding `line_start`: back over `\\<newline>` continuations."""
    while line_start > 0:
        prev = text.rfind("\n", 0, line_start - 1) + 1
        seg = text[prev:line_start - 1].rstrip("\r")
        if not (seg.endswith("\\") and not seg.endswith("\\\\")):
            break
        line_start = prev
    return line_start


def _until_quote(line: str, quote: str) -> str:
    i = 0
    while i < len(line):
        if line[i] == "\\" and quote == '"':
            i += 2
            continue
        if line[i] == quote:
            return line[:i]
        i += 1
    return line


def _command_quote(prefix: str) -> str | None:
    """Whether what precedes `docker` on its shell line leaves it in a command's place: not inside a quoted
    string (unless a shell runs that string), and not an argument of echo/printf/log. None: not a command;
    '' a command; a quote character: a command inside a string of that quote that a shell runs."""
    quote, opened, i = "", -1, 0
    while i < len(prefix):
        ch = prefix[i]
        if quote == "'":
            if ch == "'":
                quote = ""
        elif ch == "\\":
            i += 1
        elif quote == '"':
            if ch == '"':
                quote = ""
        elif ch in "'\"":
            quote, opened = ch, i
        i += 1
    if quote:
        inside = prefix[opened + 1:]
        runs = (not inside.strip() or bool(_SEPARATOR.search(inside))) and bool(_RUNS_STRING.search(prefix[:opened]))
        return quote if runs else None
    segment = re.split(r";|&&|\|\||\||&|\(|`|\$\(|\bthen\b|\bdo\b|\belse\b", prefix)[-1].split()
    words = [w for w in segment if not re.match(r"^[A-Za-z_]\w*=", w) and w not in ("$", ">", "-", "*", "+", "sudo",
                                                                                  "exec", "nohup", "command")]
    return "" if not words or words[0] not in _PRINTERS else None


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


def _parse(tokens: list[str], lineno: int, engine: str, index: int) -> Workload:
    opts: list[tuple[str, str]] = []
    i = 0
    image = ""
    rest: list[str] = []
    while i < len(tokens):
        tok = tokens[i]
        if tok in _SHELL_OPS:
            break
        if tok == "--":
            i += 1
            continue
        if tok.startswith("--"):
            key, eq, val = tok.partition("=")
            if eq or key in _BOOL:
                opts.append((key, val))
                i += 1
            else:
                opts.append((key, tokens[i + 1] if i + 1 < len(tokens) else ""))
                i += 2
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
                if not val:
                    val = tokens[i + 1] if i + 1 < len(tokens) else ""
                    i += 1
                opts.append((key, val))
            i += 1
            continue
        image = tok
        for t in tokens[i + 1:]:
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

