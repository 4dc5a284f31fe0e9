"""Driver layer, device state: memory an idle GPU shows, NVRM errors, compute mode."""

from __future__ import annotations

import re
from collections.abc import Iterator

from oomdoctor.checks._util import (
    Category,
    Confidence,
    FactSet,
    Finding,
    Layer,
    Severity,
    as_dict,
    as_int,
    as_list,
    ev,
    ev_value,
    finding,
    gpus,
    mib,
)
from oomdoctor.checks.registry import check
from oomdoctor.facts.gpu import procs_on

L = Layer.DRIVER
MiB = 1024**2
# What nvidia-smi shows as "used" on a GPU with no context: 0-~10 MiB on R5xx drivers (public
# nvidia-smi pastes of idle A100 80GB show "4MiB / 81920MiB"; an idle H200 on 580 shows ~9 MiB).
IDLE_MAX = 32 * MiB
# A live CUDA context costs far more: ~250-500 MiB with lazy loading (memory-tools-and-papers.md s.5).
CONTEXT_MIN = 100 * MiB
HOOKS = ("sharing.vcuda", "sharing.hami", "sharing.cgpu")


@check("DRV008", L, "Used memory inconsistent with the GPU's contexts")
def idle_memory(facts: FactSet) -> Iterator[Finding]:
    """What "used" should read on a GPU, and when a tiny number is abnormal.

    With no CUDA context, nvidia-smi / NVML v2 "used" is a few MiB on current drivers (driver reservations
    are reported separately as "reserved"); public nvidia-smi pastes of idle A100 80GB show 4 MiB. But one
    live CUDA context alone takes ~250-500 MiB (lazy loading; memory-tools-and-papers.md section 5), so a
    GPU that shows a few MiB *while* processes hold contexts on it is not reporting the device: either
    NVML is virtualised by a sharing hook (HAMi, gpu-manager/vcuda and cGPU hook NVML, environment-facts.md
    section 4) or the device's contexts were never really set up. In the seed case (000) nvidia-smi showed
    4 MiB "after initialisation" behind gpu-manager while PyTorch could not allocate: the tool flags a
    few-MiB reading behind an NVML hook, or next to live contexts, as abnormal, and says that the same
    reading on a plain idle GPU is normal. Sources: [NVMLMEM2][NVMLWRAP57][HAMICORE][TKEHIJ].
    """
    hooks = [k.split(".")[1] for k in HOOKS if as_dict(facts.value(k)) or facts.value(k) is True]
    for g in gpus(facts):
        used = as_int(g.get("memory_used_bytes"))
        total = as_int(g.get("memory_total_bytes"))
        if used is None or used >= IDLE_MAX:
            continue
        idx = g.get("index")
        procs = procs_on(facts, g)
        proc_bytes = sum(as_int(p.get("used_bytes")) or 0 for p in procs)
        evidence = [ev_value(f"driver.gpus[{idx}].memory_used_bytes",
                             f"{mib(used)} of {mib(total)} ({g.get('name', 'GPU')})", facts.source("driver.gpus"))]
        if procs:
            evidence.append(ev_value("sharing.processes", f"{len(procs)} process(es) on GPU {idx}, {mib(proc_bytes)}",
                                     facts.source("sharing.processes")))
            yield finding("DRV008", L, Severity.ERROR, Confidence.HIGH,
                          f"GPU {idx} shows only {mib(used)} used while {len(procs)} process(es) hold CUDA contexts on it "
                          f"(a context alone takes >= {mib(CONTEXT_MIN)}): abnormal",
                          "the device view is not real: check which sharing hook virtualises NVML "
                          "(`cat /etc/ld.so.preload`, `ls /etc/vcuda`), compare `nvidia-smi` on the host with the "
                          "container, and run `oomdoctor doctor --probe` to test context creation",
                          Category.CONTEXT_OR_DRIVER, evidence)
        elif hooks:
            evidence += [ev(facts, f"sharing.{h}") for h in hooks]
            yield finding("DRV008", L, Severity.WARNING, Confidence.MEDIUM,
                          f"GPU {idx} shows only {mib(used)} used as seen through a {'/'.join(hooks)} NVML hook: abnormal "
                          "after CUDA initialisation, and no proof the device has room",
                          "read the GPU's memory on the host (`nvidia-smi` outside the container) and run "
                          "`oomdoctor doctor --probe` in the container: if contexts fail while the host shows free "
                          "memory, the hook or the driver/kernel pair is at fault, not capacity",
                          Category.CONTEXT_OR_DRIVER, evidence)
        else:
            yield finding("DRV008", L, Severity.INFO, Confidence.MEDIUM,
                          f"GPU {idx} shows {mib(used)} used with no CUDA context: the normal idle reading",
                          "nothing to do; a reading this small would be abnormal only while processes hold contexts "
                          "(each takes hundreds of MiB)", None, evidence)


_NVRM_PATTERNS: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (re.compile(r"RmInitAdapter failed", re.I), "the driver failed to initialise a GPU (RmInitAdapter failed)",
     "check `dmesg | grep NVRM` for the cause; reseat/reset the GPU, reinstall the driver matching the kernel"),
    (re.compile(r"request_free_mem_region\(\) err -34|devmem_alloc_pagemap", re.I),
     "nvidia-uvm failed to register device memory (KASLR + HMM known issue): CUDA init fails",
     "boot with `nokaslr`, or add `options nvidia_uvm uvm_disable_hmm=1` to /etc/modprobe.d/nvidia-uvm.conf and reload"),
    (re.compile(r"API mismatch|version mismatch", re.I), "NVRM reports a client/kernel-module version mismatch",
     "reload the nvidia kernel modules or reboot so the module matches the user-space driver"),
    (re.compile(r"failed to allocate|out of memory", re.I), "the driver itself failed to allocate memory",
     "check the host's free RAM and the kernel log around it; update the driver"),
)


@check("DRV009", L, "NVRM errors in the kernel log")
def nvrm_errors(facts: FactSet) -> Iterator[Finding]:
    """NVRM lines other than Xid show the driver failing to set a GPU up (RmInitAdapter failed) or
    nvidia-uvm failing to register device memory (the CUDA 13 release notes' KASLR + HMM known issue:
    `request_free_mem_region() err -34`): CUDA context creation then fails, which PyTorch can surface as
    "CUDA error: out of memory". Source: environment-facts.md 2c [RN132].
    """
    lines = [str(x.get("text") or x.get("line") or "") if isinstance(x, dict) else str(x)
             for x in as_list(facts.value("driver.nvrm_errors"))]
    for pattern, what, remedy in _NVRM_PATTERNS:
        hits = [ln for ln in lines if pattern.search(ln)]
        if hits:
            yield finding("DRV009", L, Severity.ERROR, Confidence.MEDIUM, f"{what} ({len(hits)} line(s))", remedy,
                          Category.CONTEXT_OR_DRIVER,
                          [ev_value("driver.nvrm_errors", hits[0], facts.source("driver.nvrm_errors"))])


@check("DRV010", L, "Compute mode blocks extra contexts")
def compute_mode(facts: FactSet) -> Iterator[Finding]:
    """In EXCLUSIVE_PROCESS mode a GPU accepts one context; a second process (an earlier script still
    alive, a DataLoader worker touching CUDA) gets cudaErrorDevicesUnavailable = 46 "busy or unavailable".
    PROHIBITED allows none. Source: environment-facts.md section 8 [CUDAERR].
    """
    for g in gpus(facts):
        mode = str(g.get("compute_mode", "")).lower().replace(" ", "_")
        idx = g.get("index")
        if mode in ("exclusive_process", "3", "exclusive_thread", "1", "prohibited", "2"):
            prohibited = mode in ("prohibited", "2")
            yield finding("DRV010", L, Severity.ERROR if prohibited else Severity.INFO, Confidence.HIGH,
                          f"GPU {idx} compute mode is {g.get('compute_mode')}: "
                          + ("no process may create a context" if prohibited else "only one process may hold a context"),
                          f"`sudo nvidia-smi -i {idx} -c DEFAULT` unless MPS or exclusivity is intended; make sure no "
                          "earlier process still holds the GPU", Category.CONTEXT_OR_DRIVER if prohibited else None,
                          [ev_value(f"driver.gpus[{idx}].compute_mode", g.get("compute_mode"), facts.source("driver.gpus"))])
