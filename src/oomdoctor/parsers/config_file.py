"""Recognise what a config file is (Kubernetes, compose, `docker run` script) and parse it.

Pure: takes the text and the name to quote in errors. The collector reads the bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from oomdoctor.errors import InputError
from oomdoctor.parsers.compose import is_compose, workloads_from_compose
from oomdoctor.parsers.config_model import Workload
from oomdoctor.parsers.docker_run import DockerRun, find_docker_runs
from oomdoctor.parsers.manifests import workloads_from_documents
from oomdoctor.parsers.yamldocs import YamlDoc, load_documents

_SCRIPT_SUFFIXES = (".sh", ".bash", ".zsh", ".txt", ".cmd", ".run", ".md")
_YAML_SUFFIXES = (".yaml", ".yml", ".json")


@dataclass
class ConfigFile:
    path: str
    text: str
    type: str  # kubernetes | compose | docker-run
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
    if not runs:
        raise InputError(f"{name}: no `docker run` / `podman run` command found")
    return ConfigFile(name, text, "docker-run", [r.workload for r in runs], runs=runs, notes=notes)


def _yaml(text: str, name: str) -> ConfigFile:
    docs = load_documents(text, name)
    if not docs:
        raise InputError(f"{name}: no YAML documents (only comments or blank lines)")
    if len(docs) == 1 and is_compose(docs[0].data):
        return ConfigFile(name, text, "compose", workloads_from_compose(docs[0], name), docs)
    if all(isinstance(d.data, str) for d in docs):
        raise InputError(f"{name}: not a Kubernetes manifest, compose file or `docker run` script")
    return ConfigFile(name, text, "kubernetes", workloads_from_documents(docs, name), docs)
