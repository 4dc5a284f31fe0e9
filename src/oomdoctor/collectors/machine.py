"""Assemble a FactSet from the live machine or from a bundle, with the same collectors.

Every collector returns Fact/Unavailable entries and is additionally guarded here: a bug in one
area costs that area's facts (reported as unavailable with the error), never the report.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from oomdoctor.collectors.bundle_read import read_bundle, read_meta
from oomdoctor.collectors.cgroup import collect_cgroup
from oomdoctor.collectors.container import collect_runtime
from oomdoctor.collectors.context import CollectContext, CommandRunner, NoCommands
from oomdoctor.collectors.gpu import collect_cuda, collect_driver
from oomdoctor.collectors.kernel_log import collect_kernel_log
from oomdoctor.collectors.nvml import BundleSmiBackend, LiveBackend, PynvmlBackend, SmiCommandBackend
from oomdoctor.collectors.probe import collect_probe_facts
from oomdoctor.collectors.sharing import collect_sharing
from oomdoctor.collectors.storage import collect_storage
from oomdoctor.collectors.system import collect_system
from oomdoctor.collectors.torch_child import collect_framework
from oomdoctor.collectors.workload import collect_workload, self_gpu_usage
from oomdoctor.facts import Fact, FactSet, Unavailable
from oomdoctor.facts.base import Entry
from oomdoctor.facts.keys import FACT_KEYS
from oomdoctor.parsers.procfs import parse_environ
from oomdoctor.redact import redact_env

COLLECTORS: tuple[Callable[[CollectContext], list[Entry]], ...] = (
    collect_system, collect_cgroup, collect_runtime, collect_sharing, collect_driver, collect_cuda,
    collect_kernel_log, collect_storage, collect_workload,
)


def live_context(runner: CommandRunner | None = None, gpu: Any = None) -> CollectContext:
    runner = runner or CommandRunner()
    backend = gpu or LiveBackend(PynvmlBackend(), SmiCommandBackend(runner))
    # Collectors only ever see the redacted environment, so no fact (and no report) can carry a
    # secret; the sharing/runtime variables they read are not secret-named and pass unchanged.
    return CollectContext(root=Path("/"), env=redact_env(os.environ), gpu=backend, runner=runner,
                          bundle=False, self_pids=frozenset({os.getpid()}))


def bundle_context(root: Path) -> CollectContext:
    meta = read_meta(root)
    xml = None
    why = "commands/nvidia-smi-q.xml not in the bundle"
    try:
        with open(root / "commands" / "nvidia-smi-q.xml", "rb") as fh:
            xml = fh.read(32 << 20).decode("utf-8", errors="replace")
    except OSError:
        pass
    nvml_error = meta.get("nvml_error") if isinstance(meta.get("nvml_error"), str) else None
    env_bytes, env_missing = b"", None
    try:
        with open(root / "proc" / "self" / "environ", "rb") as fh:
            env_bytes = fh.read(4 << 20)
    except FileNotFoundError:
        env_missing = "bundle:proc/self/environ not present"
    except OSError as exc:
        env_missing = f"bundle:proc/self/environ: {exc.strerror or exc}"
    pid = meta.get("pid")
    return CollectContext(root=root, env=redact_env(parse_environ(env_bytes)), gpu=BundleSmiBackend(xml, why, nvml_error),
                          runner=NoCommands(), bundle=True, meta=meta, env_missing=env_missing,
                          self_pids=frozenset({pid}) if isinstance(pid, int) else frozenset())


def gather(ctx: CollectContext, *, probe: bool = False, probe_attempts: int = 5,
           import_torch: bool = True, torch_devices: bool = True) -> tuple[FactSet, dict[str, Any] | None]:
    """All collectors over one context; also returns the probe document (for bundles)."""
    entries: list[Entry] = []
    problems: list[str] = []
    collectors = [*COLLECTORS, lambda c: collect_framework(c, import_torch=import_torch, devices=torch_devices)]
    # Probes first, then a fresh GPU reading: when contexts fail, the NVML picture that explains it
    # must be from that moment, not from before (a neighbour may have grabbed the GPU meanwhile;
    # seen on the H100, docs/validation/doctor.md).
    probe_doc = None
    try:
        probe_entries, probe_doc = collect_probe_facts(ctx, probe, probe_attempts)
        entries += probe_entries
    except Exception as exc:  # noqa: BLE001
        problems.append(f"probe: {type(exc).__name__}: {exc}")
    if probe and not ctx.bundle:
        ctx._gpu_snapshot = None  # noqa: SLF001 - drop the pre-probe NVML reading
    for collector in collectors:
        try:
            entries += collector(ctx)
        except Exception as exc:  # noqa: BLE001 - a collector bug must not cost the report
            problems.append(f"{getattr(collector, '__name__', 'collector')}: {type(exc).__name__}: {exc}")
    procs = next((e for e in entries if e.key == "sharing.processes"), None)
    if procs is not None and procs.available:
        entries.append(Fact("workload.gpu_processes_self", self_gpu_usage(procs.value), procs.source))
    else:
        entries.append(Unavailable("workload.gpu_processes_self", "GPU processes unknown", "sharing.processes"))
    entries += _capabilities_from_torch(entries)
    seen = {e.key for e in entries}
    reason = ("internal error: " + "; ".join(problems))[:500] if problems else "not collected"
    entries += [Unavailable(k, reason, "oomdoctor") for k in FACT_KEYS if k not in seen]
    return FactSet(entries), probe_doc


def _capabilities_from_torch(entries: list[Entry]) -> list[Entry]:
    """nvidia-smi XML has no compute capability; torch's device list (child or bundle) does."""
    by_key = {e.key: e for e in entries}
    caps, devices = by_key.get("cuda.device_capabilities"), by_key.get("torch.devices")
    if caps is None or caps.available or devices is None or not devices.available or not devices.value:
        return []
    values = [d.get("capability") for d in devices.value if isinstance(d, dict)]
    return [Fact("cuda.device_capabilities", values, devices.source)] if values and all(values) else []


def collect_live(*, probe: bool = False, probe_attempts: int = 5, import_torch: bool | None = None) -> FactSet:
    """Facts of this machine. Never initialises CUDA in this process; probes run in children.

    torch is imported (in a child, for cuDNN and the arch list) when `import_torch` is true; by
    default only with `probe`, because the import alone takes seconds and plain `doctor` must be
    fast. Without it, torch's version and CUDA come from torch/version.py read as text. The child
    asks torch for the devices (CUDA initialised there, no context) only with `probe`.
    """
    facts, _ = gather(live_context(), probe=probe, probe_attempts=probe_attempts,
                      import_torch=probe if import_torch is None else import_torch, torch_devices=probe)
    return facts


DECIDING_COLLECTORS: tuple[Callable[[CollectContext], list[Entry]], ...] = (
    collect_cgroup, collect_sharing, collect_driver, collect_kernel_log, collect_storage,
)


def collect_deciding_facts(ctx: CollectContext | None = None) -> FactSet:
    """The facts that separate explain's causes, read from this machine (`explain --here`): GPU
    processes and sharing layers (NVML / nvidia-smi), cgroup OOM kills, the kernel log, /dev/shm.
    No probes, no torch, no CUDA context; each collector's failure costs only its facts."""
    ctx = ctx or live_context()
    entries: list[Entry] = []
    for collector in DECIDING_COLLECTORS:
        try:
            entries += collector(ctx)
        except Exception:  # noqa: BLE001, S112 - a collector bug must not cost the explanation
            continue
    return FactSet(entries)


def collect_host_memory(ctx: CollectContext | None = None) -> FactSet:
    """The host's available memory and this process's cgroup limit and usage (no GPU, no commands): what a
    computation on this host may still take (estimate bounds fake tensors' CPU runs by it). Each collector's
    failure costs only its facts."""
    ctx = ctx or CollectContext(root=Path("/"), env={}, gpu=None, runner=NoCommands(), bundle=False,
                                self_pids=frozenset({os.getpid()}))
    entries: list[Entry] = []
    for collector in (collect_system, collect_cgroup):
        try:
            entries += collector(ctx)
        except Exception:  # noqa: BLE001, S112 - unknown memory: the estimate takes its fixed limit
            continue
    return FactSet(entries)


def collect_bundle(path: str | Path, notes: list[str] | None = None) -> FactSet:
    """Facts of a bundle (directory or .tar.gz); reads nothing else of this machine.

    `notes` receives what the bundle's copy skipped (links, FIFOs, logs past the cap), as counts.
    """
    with read_bundle(path) as opened:
        if notes is not None:
            notes.extend(opened.notes)
        return collect_bundle_root(opened.root)


def collect_bundle_root(root: Path) -> FactSet:
    """Facts of a bundle already opened with `bundle_read.read_bundle` (a private copy)."""
    facts, _ = gather(bundle_context(root))
    return facts
