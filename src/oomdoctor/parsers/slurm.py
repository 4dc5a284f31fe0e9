"""Slurm batch scripts (`#SBATCH` lines) -> a `Workload`: the node's memory limit and GPUs, the job's command.

Only what the existing memory rules need: `--mem` / `--mem-per-cpu` / `--mem-per-gpu` (the job's memory on
each node, enforced by the task cgroup where the site constrains RAM), the GPUs per node (`--gres=gpu[:type]:N`,
`--gpus-per-node`, `--gpus`/`-G` on one node, `--gpus-per-task` x tasks), the CPUs per node that
`--mem-per-cpu` multiplies (`--cpus-per-gpu` x GPUs, or `--cpus-per-task` x tasks per node; unknown, so no
limit, when the script does not pin the tasks per node), `export VAR=...` lines and the
commands (torchrun, `--num_workers`). Slurm sizes default to megabytes and take K/M/G/T suffixes, binary
(https://slurm.schedmd.com/sbatch.html). `/dev/shm` is the host's under Slurm (no container): no rule about
its size applies. Pure: takes the text.
"""

from __future__ import annotations

import re
from typing import Optional

from oomdoctor.parsers.config_model import ContainerSpec, Workload
from oomdoctor.parsers.shell_words import words as shell_words

_SBATCH = re.compile(r"^#SBATCH[ \t]+(.*)$", re.MULTILINE)
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)B?\s*$", re.IGNORECASE)
_UNIT = {"": 2**20, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
# Blanks before `export` on its own line only: `^\s*` ran from every line start over all the blank lines
# after it, quadratic in a script of many blank lines. The same export lines match.
_EXPORT = re.compile(r"^[^\S\n]*export\s+([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.MULTILINE)
_SHORT = {"-G": "--gpus", "-N": "--nodes", "-n": "--ntasks", "-c": "--cpus-per-task", "-J": "--job-name"}


def is_slurm_script(text: str) -> bool:
    return bool(_SBATCH.search(text))


def sbatch_options(text: str) -> dict[str, str]:
    """`#SBATCH` options as {long name: value}; a later line wins, as sbatch reads them. Stops at the first
    command line: sbatch ignores #SBATCH lines after it."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        s = line.strip()
        if not s or (s.startswith("#") and not s.startswith("#SBATCH")):
            continue
        if not s.startswith("#SBATCH"):
            break
        try:  # as shlex.split(..., comments=True) reads it, in linear time (shlex: quadratic in a long word)
            words = list(shell_words(s[len("#SBATCH"):], operators=False))
        except ValueError:
            words = s[len("#SBATCH"):].split()
        i = 0
        while i < len(words):
            w = words[i]
            if w.startswith("--"):
                key, eq, val = w.partition("=")
                if not eq and i + 1 < len(words) and not words[i + 1].startswith("-"):
                    val, i = words[i + 1], i + 1
                out[key] = val
            elif w[:2] in _SHORT:
                val = w[2:] or (words[i + 1] if i + 1 < len(words) else "")
                if not w[2:]:
                    i += 1
                out[_SHORT[w[:2]]] = val
            i += 1
    return out


def slurm_size(value: str) -> Optional[int]:
    """A Slurm memory size in bytes (`64G`, `64000` = MB, `1.5T`); None if it is not one. `0` means "all of
    the node's memory" to Slurm: None (no limit to compare)."""
    m = _SIZE.match(value or "")
    if not m:
        return None
    n = int(float(m.group(1)) * _UNIT[m.group(2).upper()])
    return n or None


def _count(value: str) -> Optional[int]:
    """'8', 'a100:8', 'gpu:a100:8' -> 8; 'gpu' -> 1."""
    last = value.split(",")[0].split(":")[-1].split("(")[0]
    if last.isdigit():
        return int(last)
    return 1 if value.split(":")[0] == "gpu" or not value else None


def gpus_per_node(opts: dict[str, str]) -> tuple[Optional[int], str]:
    """GPUs each node of the job gets, and the option that said so."""
    gres = opts.get("--gres", "")
    for part in gres.split(","):
        if part.split(":")[0] == "gpu":
            return _count(part), f"--gres={gres}"
    if "--gpus-per-node" in opts:
        return _count(opts["--gpus-per-node"]), f"--gpus-per-node={opts['--gpus-per-node']}"
    nodes = _int(opts.get("--nodes", "1").split("-")[0])
    if "--gpus" in opts and nodes == 1:
        return _count(opts["--gpus"]), f"--gpus={opts['--gpus']}"
    tasks = tasks_per_node(opts)
    if "--gpus-per-task" in opts and tasks:
        n = _count(opts["--gpus-per-task"])
        return (n * tasks if n else None), f"--gpus-per-task={opts['--gpus-per-task']} x {tasks} task(s) per node"
    return None, ""


def tasks_per_node(opts: dict[str, str]) -> Optional[int]:
    """Tasks on each node, or None when the script does not pin it. `--ntasks-per-node` says so; `--ntasks`
    spreads over `--nodes` (counted only when it divides evenly: Slurm may place the rest anywhere); without
    `--nodes`, sbatch takes "enough nodes to satisfy" the request, so more than one task gives no per-node count.
    No `--ntasks` at all is one task per node (sbatch's default)."""
    if "--ntasks-per-node" in opts:
        return _int(opts["--ntasks-per-node"]) or None
    if "--ntasks" not in opts:
        return 1
    ntasks = _int(opts["--ntasks"])
    if ntasks == 1:
        return 1
    nodes = _int(opts.get("--nodes", ""))  # a range ("2-4") is not a count: unknown
    if not ntasks or not nodes or ntasks % nodes:
        return None
    return ntasks // nodes


def cpus_per_node(opts: dict[str, str], gpus: Optional[int]) -> Optional[int]:
    """CPUs the job holds on each node (what `--mem-per-cpu` multiplies); None when the script does not say.
    `--cpus-per-gpu` x GPUs per node, else `--cpus-per-task` (default 1) x tasks per node."""
    if "--cpus-per-gpu" in opts:
        per = _int(opts["--cpus-per-gpu"])
        return per * gpus if per and gpus else None
    per_task = _int(opts.get("--cpus-per-task", "1"))
    tasks = tasks_per_node(opts)
    return per_task * tasks if per_task and tasks else None


def memory_per_node(opts: dict[str, str], gpus: Optional[int]) -> tuple[Optional[int], str]:
    """The job's memory limit on each node, and the option(s) it came from."""
    if "--mem" in opts:
        return slurm_size(opts["--mem"]), f"--mem={opts['--mem']}"
    if "--mem-per-gpu" in opts and gpus:
        per = slurm_size(opts["--mem-per-gpu"])
        return (per * gpus if per else None), f"--mem-per-gpu={opts['--mem-per-gpu']} x {gpus} GPU(s)"
    if "--mem-per-cpu" in opts:
        cpus = cpus_per_node(opts, gpus)
        per = slurm_size(opts["--mem-per-cpu"])
        if not per or not cpus:  # CPUs per node unknown: the limit is unknown, not "one CPU's worth"
            return None, ""
        return per * cpus, f"--mem-per-cpu={opts['--mem-per-cpu']} x {cpus} CPU(s)"
    return None, ""


def docker_size(n: int) -> str:
    return f"{n // 2**30}g" if n % 2**30 == 0 else f"{n // 2**20}m"


def _int(value: str) -> int:
    return int(value) if value.strip().isdigit() else 0


def slurm_workload(text: str, name: str) -> Workload:
    """The batch script as one workload: its commands, exported variables, GPUs and memory per node."""
    opts = sbatch_options(text)
    gpus, gpu_src = gpus_per_node(opts)
    mem, mem_src = memory_per_node(opts, gpus)
    env = tuple((k, v.strip().strip("'\"")) for k, v in _EXPORT.findall(text))
    commands = [ln.strip() for ln in text.splitlines()
                if ln.strip() and not ln.lstrip().startswith("#") and not _EXPORT.match(ln)]
    first = next((i + 1 for i, ln in enumerate(text.splitlines()) if ln.startswith("#SBATCH")), 1)
    job = opts.get("--job-name") or name.rsplit("/", 1)[-1]
    container = ContainerSpec(
        name=job, args=tuple(" ".join(commands).split()), env=env, line=first,
        gpus=gpu_src, gpu_count=gpus if gpu_src else None,
        memory_limit_raw=docker_size(mem) if mem else "", memory_limit_source=f"#SBATCH {mem_src}" if mem else "",
    )
    return Workload(source="slurm", kind="sbatch", name=job, containers=(container,), line=first,
                    origin=f"line {first}")
