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


def find_docker_runs(text: str, name: str) -> list[DockerRun]:
    runs: list[DockerRun] = []
    for m in _RUN.finditer(text):
        line_start = text.rfind("\n", 0, m.start()) + 1
        before = text[line_start:m.start()]
        if "#" in before and before.lstrip().startswith("#"):
            continue  # a commented-out command
        lineno = text.count("\n", 0, m.start()) + 1
        logical = _logical_line(text, m.end())
        try:
            tokens = _tokens(logical)
        except ValueError as exc:
            raise InputError(f"{name}: line {lineno}: cannot parse the {m.group(1)} run command ({exc})") from None
        workload = _parse(tokens, lineno, m.group(1), len(runs))
        runs.append(DockerRun(workload, m.end()))
    return runs


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

