"""How the GPU facts are read, one way for the doctor's checks and for explain: the cards (driver.gpus),
the processes on one card (sharing.processes), whether a card is in MIG mode (sharing.mig, which lists
every MIG-capable card, "Disabled" included: an A100, H100 or H200 with MIG off is there too), and which
HAMi limit applies to a device (sharing.hami)."""

from __future__ import annotations

from typing import Any

from oomdoctor.facts.base import FactSet
from oomdoctor.units import parse_limit

MIG_ON = ("enabled", "true", "1")


def as_list(value: Any) -> list[Any]:
    """A fact's value as a list: None is empty, a single item is one (the checks read it so too)."""
    return list(value) if isinstance(value, (list, tuple)) else [] if value is None else [value]


def truthy(value: Any) -> bool:
    """An environment switch's value as set ("1", "true", "yes", "on", "enabled") or a plain truth value."""
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on", "enabled")
    return bool(value)


def hami_limit(h: dict, gpu: object) -> int | None:
    """The HAMi limit of device `gpu` as HAMi-core reads it: CUDA_DEVICE_MEMORY_LIMIT_<i> by the process's CUDA
    ordinal (the index PyTorch's message prints, after CUDA_VISIBLE_DEVICES), the global variable where that is
    unset or 0; HAMi's device plugin sets only the per-device ones, so with no index a single one is it."""
    per = h.get("memory_limits") if isinstance(h.get("memory_limits"), dict) else {}
    sized = {str(k): b for k, v in per.items() if (b := parse_limit(v)) is not None and b > 0}
    if gpu is not None and sized.get(str(gpu)):
        return sized[str(gpu)]
    g = parse_limit(h["memory_limit"]) if h.get("memory_limit") is not None else None
    if g is not None and g > 0:
        return g
    return next(iter(sized.values())) if gpu is None and len(sized) == 1 else None


def gpus(facts: FactSet) -> list[dict[str, Any]]:
    """driver.gpus as a list of dicts (anything else dropped), with `index` filled in."""
    out = []
    for i, g in enumerate(as_list(facts.value("driver.gpus"))):
        if isinstance(g, dict):
            g = dict(g)
            g.setdefault("index", i)
            out.append(g)
    return out


def procs_on(facts: FactSet, g: dict) -> list[dict]:
    """The compute processes NVML lists on card `g` (matched by index, UUID or PCI bus id)."""
    out = []
    for p in as_list(facts.value("sharing.processes")):
        if not isinstance(p, dict):
            continue
        gi = p.get("gpu")
        if gi == g.get("index") or (gi is not None and gi in (g.get("uuid"), g.get("pci_bus_id"))):
            out.append(p)
    return out


def mig_mode_on(entry: Any) -> bool:
    """One sharing.mig entry says MIG is on (its current mode, not the pending one)."""
    return isinstance(entry, dict) and str(entry.get("current", "")).lower() in MIG_ON


def mig_enabled(facts: FactSet, gpu: int | None = None) -> bool:
    """Card `gpu` (an NVML index; None: any card) is in MIG mode. An entry without a card comes from MIG-
    device names in CUDA_VISIBLE_DEVICES and applies to whichever card the job used."""
    return any(mig_mode_on(m) and (gpu is None or m.get("gpu") is None or m.get("gpu") == gpu)
               for m in as_list(facts.value("sharing.mig")))


def is_mps_server(p: dict) -> bool:
    """MPS's server holds only its own context (68 MiB on an H200); NVML lists each client's memory under the
    client (H200, session 15, validation/doctor_mps_gpu.py): the server is no co-tenant. While it runs, clients
    that connected through it keep their limits even if the control daemon is gone (H100, session 16)."""
    name = str(p.get("name") or "").split(" ", 1)[0]
    return name.rsplit("/", 1)[-1] == "nvidia-cuda-mps-server"
