"""How the GPU facts are read, one way for the doctor's checks and for explain: the cards (driver.gpus),
the processes on one card (sharing.processes), and whether a card is in MIG mode (sharing.mig, which lists
every MIG-capable card, "Disabled" included: an A100, H100 or H200 with MIG off is there too)."""

from __future__ import annotations

from typing import Any

from oomdoctor.facts.base import FactSet

MIG_ON = ("enabled", "true", "1")


def as_list(value: Any) -> list[Any]:
    """A fact's value as a list: None is empty, a single item is one (the checks read it so too)."""
    return list(value) if isinstance(value, (list, tuple)) else [] if value is None else [value]


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
