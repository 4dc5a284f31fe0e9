"""Recognise what a config file is (Kubernetes, compose, `docker run` script) and parse it.

Pure: takes the text and the name to quote in errors. The collector reads the bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Optional

from oomdoctor.errors import InputError
from oomdoctor.parsers.compose import is_compose, workloads_from_compose
from oomdoctor.parsers.config_model import Workload
from oomdoctor.parsers.docker_run import DockerRun, find_docker_runs
from oomdoctor.parsers.manifests import workloads_from_documents
from oomdoctor.parsers.slurm import docker_size as slurm_docker_size
from oomdoctor.parsers.slurm import (
    gpus_per_node,
    is_slurm_script,
    memory_per_node,
    sbatch_options,
    slurm_workload,
)
from oomdoctor.parsers.yamldocs import YamlDoc, load_documents

_SCRIPT_SUFFIXES = (".sh", ".bash", ".zsh", ".txt", ".cmd", ".run", ".md", ".sbatch", ".slurm")
_YAML_SUFFIXES = (".yaml", ".yml", ".json")


@dataclass
class ConfigFile:
    path: str
    text: str
    type: str  # kubernetes | compose | docker-run | slurm
    workloads: list[Workload]
    docs: list[YamlDoc] = field(default_factory=list)
    runs: list[DockerRun] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what was left out (an unparseable `docker run` candidate)


def parse_config(text: str, name: str) -> ConfigFile:
    lower = name.lower()
    if not text.strip():
        raise InputError(f"{name}: empty file")
    if lower.endswith(_SCRIPT_SUFFIXES) or text.startswith("#!"):
        return _script(text, name)
    if lower.endswith(_YAML_SUFFIXES):
        return _yaml(text, name)
    # no telling extension (stdin, `Dockerfile.run`, ...): YAML first, then `docker run` lines
    try:
        return _yaml(text, name)
    except InputError as exc:
        try:
            return _script(text, name)
        except InputError:
            raise exc from None


def _script(text: str, name: str) -> ConfigFile:
    notes: list[str] = []
    runs = find_docker_runs(text, name, notes)
    slurm = is_slurm_script(text)
    if not runs and slurm:
        return ConfigFile(name, text, "slurm", [slurm_workload(text, name)], notes=notes)
    if not runs:
        raise InputError(f"{name}: no `docker run` / `podman run` command found (audit reads Kubernetes manifests, "
                         "compose files, scripts with `docker run`, and Slurm batch scripts with #SBATCH lines)")
    workloads = [r.workload for r in runs]
    if slurm:  # `srun docker run ...` in a batch script: the job's --mem bounds a container that sets no -m
        opts = sbatch_options(text)  # once per file: per `docker run` it made a hostile script quadratic
        mem, src = memory_per_node(opts, gpus_per_node(opts)[0])
        workloads = [_with_slurm_memory(w, mem, src) for w in workloads]
    return ConfigFile(name, text, "docker-run", workloads, runs=runs, notes=notes)


def _with_slurm_memory(w: Workload, mem: Optional[int], src: str) -> Workload:
    c = w.containers[0]
    if not mem or c.memory_limit_raw:
        return w
    c = replace(c, memory_limit_raw=slurm_docker_size(mem), memory_limit_source=f"#SBATCH {src}")
    return replace(w, containers=(c,))


def _yaml(text: str, name: str) -> ConfigFile:
    docs = load_documents(text, name)
    if not docs:
        raise InputError(f"{name}: no YAML documents (only comments or blank lines)")
    if len(docs) == 1 and is_compose(docs[0].data):
        return ConfigFile(name, text, "compose", workloads_from_compose(docs[0], name), docs)
    if all(isinstance(d.data, str) for d in docs):
        raise InputError(f"{name}: not a Kubernetes manifest, compose file or `docker run` script")
    return ConfigFile(name, text, "kubernetes", workloads_from_documents(docs, name), docs)
