"""FactSets for tests: a healthy GPU node, and the seed case, with overrides.

`make_facts(**overrides)`: keyword names are fact keys with '.' written as '__'
(`driver__version="535.129.03"`); a value of UNAVAILABLE makes the fact an Unavailable, DROP removes it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from oomdoctor.explain.facts import records_from_lines
from oomdoctor.facts import Fact, FactSet, Unavailable

MiB, GiB = 1024**2, 1024**3
UNAVAILABLE = object()
DROP = object()

SOURCES = {
    "host": "proc/meminfo", "cgroup": "sys/fs/cgroup", "kernel.oom_kills": "commands/dmesg.txt",
    "kernel.release": "proc/version", "os": "etc/os-release", "runtime": "proc/self/environ",
    "driver": "commands/nvidia-smi-q.xml", "cuda.driver_max": "commands/nvidia-smi-q.xml",
    "cuda": "commands/torch.json", "torch": "commands/torch.json", "shm": "proc/mounts",
    "sharing": "proc/self/environ", "probe": "commands/probe.json", "workload": "logs/", "k8s": "k8s/",
}


def _source(key: str) -> str:
    for prefix in sorted(SOURCES, key=len, reverse=True):
        if key.startswith(prefix):
            return SOURCES[prefix]
    return "test"


def log_events(*lines: str, file: str = "logs/train.log") -> list[dict[str, Any]]:
    """`workload.oom_events` for these log lines, made by the parser the bundle collector uses."""
    return records_from_lines(lines, file=file)


def a100(used: int = 4 * MiB, total: int = 80 * GiB, **extra: Any) -> dict[str, Any]:
    g = {"index": 0, "name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-1b2c", "pci_bus_id": "00000000:1B:00.0",
         "memory_total_bytes": total, "memory_used_bytes": used, "memory_free_bytes": total - used,
         "memory_reserved_bytes": 656 * MiB, "persistence_mode": "Enabled", "compute_mode": "Default",
         "ecc_uncorrected": 0, "retired_pages": 0, "retired_pending": False, "remapped_pending": False,
         "remapped_failure": False, "reset_required": False}
    g.update(extra)
    return g


HEALTHY: dict[str, Any] = {
    "host.name": "gpu-node-1", "host.mem_total_bytes": 512 * GiB, "host.mem_available_bytes": 480 * GiB,
    "host.cpu_count": 64, "cgroup.version": 2, "cgroup.memory_limit_bytes": None,
    "cgroup.memory_usage_bytes": 3 * GiB, "cgroup.oom_events": 0, "cgroup.oom_kill": 0, "kernel.oom_kills": [],
    "runtime.container": "docker", "runtime.kubernetes": False,
    "runtime.dev_nodes": ["nvidia0", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"],
    "runtime.nvidia_visible_devices": "all", "runtime.nvidia_driver_capabilities": "compute,utility",
    "sharing.processes": [], "sharing.ld_preload": [],
    "cuda.driver_max": "12.8", "cuda.torch_runtime": "12.8", "cuda.image_toolkit": "12.8.1",
    "cuda.arch_list": ["sm_70", "sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"],
    "cuda.device_capabilities": ["8.0"],
    "driver.version": "570.124.06", "driver.flavour": "open", "driver.gpu_count": 1,
    "driver.gpu_names": ["NVIDIA A100-SXM4-80GB"], "driver.gpus": [a100()], "driver.xid_events": [],
    "driver.nvrm_errors": [],
    "kernel.release": "5.15.0-1052-aws", "os.name": "Ubuntu 22.04.4 LTS", "os.id": "ubuntu 22.04",
    "shm.size_bytes": 16 * GiB, "shm.used_bytes": 12 * MiB, "shm.torch_segments": 0,
    "python.version": "3.11.9", "torch.version": "2.8.0+cu128", "torch.cuda_available": True,
    "torch.device_count": 1, "torch.devices": [{"name": "NVIDIA A100-SXM4-80GB", "total_memory": 80 * GiB,
                                                "capability": [8, 0]}],
    "torch.cudnn": 91002, "workload.oom_events": [],
}

SEED_LOG = "RuntimeError: CUDA error: out of memory"

SEED: dict[str, Any] = {
    **HEALTHY,
    "runtime.container": "kubernetes", "runtime.kubernetes": True,
    "kernel.release": "3.10.0-1062.9.1.el7.x86_64", "os.name": "Ubuntu 20.04.6 LTS", "os.id": "ubuntu 20.04",
    "driver.version": "535.129.03", "cuda.driver_max": "12.2", "driver.flavour": "proprietary",
    "torch.version": "1.10.1+cu113", "cuda.torch_runtime": "11.3", "cuda.image_toolkit": "11.3.109",
    "cuda.arch_list": ["sm_37", "sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86"], "torch.cudnn": 8200,
    "python.version": "3.8.18", "shm.size_bytes": 64 * MiB,
    "sharing.vcuda": {"config": "/etc/vcuda/vcuda.config", "pids_config": "/etc/vcuda/pids.config",
                      "socket": "/etc/vcuda/vcuda.sock", "client": None},
    "workload.oom_events": records_from_lines([SEED_LOG], file="logs/test.log"),
}


def make_facts(base: dict[str, Any] | None = None, **overrides: Any) -> FactSet:
    data = dict(HEALTHY if base is None else base)
    for name, value in overrides.items():
        data[name.replace("__", ".")] = value
    entries = []
    for key, value in data.items():
        if value is DROP:
            continue
        if value is UNAVAILABLE:
            entries.append(Unavailable(key, "not collected in this test", _source(key)))
        else:
            entries.append(Fact(key, value, _source(key)))
    return FactSet(entries)


def seed_facts(**overrides: Any) -> FactSet:
    return make_facts(SEED, **overrides)


def ids(report_or_findings: Any) -> set[str]:
    findings = getattr(report_or_findings, "findings", report_or_findings)
    return {f.id for f in findings}


def at_least(report: Any, severity: str) -> list[Any]:
    order = ["info", "warning", "error", "critical"]
    return [f for f in report.findings if order.index(f.severity.value) >= order.index(severity)]


def facts_from_json(raw: dict[str, dict[str, Any]]) -> FactSet:
    """A FactSet from the JSON the validation scripts record of what `--here` read ({key: {value, source} or
    {unavailable, source}}), as the replay tests load it."""
    return FactSet(Unavailable(k, v["unavailable"], v.get("source", "")) if "unavailable" in v
                   else Fact(k, v["value"], v["source"]) for k, v in raw.items())


def recorded_facts(directory: Path, case: str, edit: Callable[[dict], dict] | None = None) -> FactSet:
    """The facts a validation run recorded for `case` (<case>.facts.json in `directory`), optionally edited
    first (each call loads the file afresh, so an edit changes nothing for the next)."""
    raw = json.loads((directory / f"{case}.facts.json").read_text())
    return facts_from_json(edit(raw) if edit else raw)


def recorded_hypotheses(directory: Path, case: str, here: bool, log: str = "log") -> list[tuple[str, float]]:
    """explain's ranked (category, confidence) for a recorded case's log (<case>.<log>), with its recorded facts
    (`--here`) or the text alone."""
    from oomdoctor.explain.rank import explain_text

    facts = recorded_facts(directory, case) if here else None
    ex = explain_text((directory / f"{case}.{log}").read_text().splitlines(), facts)
    return [(h.category, h.confidence) for h in ex.hypotheses if h.category != "unknown"]
