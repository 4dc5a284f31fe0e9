"""GPU sharing layer: other processes holding memory, and virtualised device totals."""

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
    as_int,
    as_list,
    cuda_totals,
    ev_value,
    finding,
    gpus,
    mib,
    truthy,
)
from oomdoctor.checks.registry import check
from oomdoctor.facts.gpu import is_mps_server, mig_enabled, procs_on

L = Layer.GPU_SHARING
GiB = 1024**3
_LOG_PID = re.compile(r"pid(?:\(s\))?[:=\s]*(\d+)", re.I)


def job_pids(facts: FactSet) -> set[int]:
    """PIDs the job's own log lines name (HAMi's 'pid:N', DataLoader's 'pid N'): not 'other' processes."""
    pids = set()
    for e in as_list(facts.value("workload.oom_events")):
        if isinstance(e, dict):
            pids.update(int(m) for m in _LOG_PID.findall(str(e.get("text", ""))))
    return pids


@check("SHR010", L, "Other processes hold GPU memory")
def other_processes(facts: FactSet) -> Iterator[Finding]:
    """Memory held by other processes (an earlier script that never exited, another rank, a co-tenant)
    is not available to the job; PyTorch's OOM then reports little free memory although the job itself
    uses little ("Process N has M memory in use"). Inside a container NVML's PIDs are host PIDs and other
    tenants are invisible, but their memory still counts in the device's "used": a large "used" with no
    visible process is the same problem. From inside a container the job's own process cannot be told
    apart from others (host PIDs), so PIDs named in the job's logs count as the job's, processes holding
    half the GPU or more are an error, a quarter to a half only a note. Source: environment-facts.md
    section 8 [NVMLPROC][NVD1483].
    """
    for g in gpus(facts):
        idx, total, used = g.get("index"), as_int(g.get("memory_total_bytes")), as_int(g.get("memory_used_bytes"))
        if not total:
            continue
        procs = procs_on(facts, g)
        mine = job_pids(facts)
        others = [p for p in procs if not truthy(p.get("self")) and as_int(p.get("pid")) not in mine
                  and not is_mps_server(p)]
        held = sum(as_int(p.get("used_bytes")) or 0 for p in others)
        evidence = [ev_value(f"driver.gpus[{idx}]", f"used {mib(used)} of {mib(total)}", facts.source("driver.gpus"))]
        if others and held >= 0.25 * total:
            big = held >= 0.5 * total
            top = sorted(others, key=lambda p: as_int(p.get("used_bytes")) or 0, reverse=True)[:3]
            evidence.append(ev_value("sharing.processes", "; ".join(
                f"pid {p.get('pid')} {p.get('name') or ''} {mib(p.get('used_bytes'))}" for p in top),
                facts.source("sharing.processes")))
            yield finding("SHR010", L, Severity.ERROR if big else Severity.INFO, Confidence.HIGH if big else Confidence.LOW,
                          f"GPU {idx}: {len(others)} process(es) not known to be this job hold {mib(held)} of {mib(total)} "
                          f"({100 * held / total:.0f}%): a job started now gets only the rest",
                          f"if they are not your job, stop them or move the job to a free GPU: `nvidia-smi --query-compute-apps=pid,process_name,"
                          f"used_memory --format=csv -i {idx}`, then `kill <pid>`; make earlier scripts exit before the job",
                          Category.OTHER_PROCESS, evidence)
        elif not procs and used is not None and used >= max(GiB, 0.1 * total):
            yield finding("SHR010", L, Severity.WARNING, Confidence.MEDIUM,
                          f"GPU {idx}: {mib(used)} of {mib(total)} used but no process is visible (other containers, "
                          "or host PIDs hidden by the PID namespace)",
                          "look on the host: `nvidia-smi --query-compute-apps=pid,used_memory --format=csv`; in k8s "
                          "`hostPID: true` (or docker `--pid=host`) makes them visible", Category.OTHER_PROCESS, evidence)


def _card_for(cards: list[dict], item: dict, index: object) -> dict:
    uuid = item.get("uuid")
    if uuid:
        for g in cards:
            if g.get("uuid") == uuid:
                return g
    if index is not None:
        for g in cards:
            if g.get("index") == index:
                return g
    return cards[0] if len(cards) == 1 else {}


@check("SHR011", L, "CUDA sees a different GPU size than NVML")
def virtual_total(facts: FactSet) -> Iterator[Finding]:
    """`torch.cuda.mem_get_info()` total (probe) and `torch.cuda.get_device_properties().total_memory`
    (the torch child) are what CUDA lets this process use; NVML's total is the card. A clearly smaller
    CUDA total is the signature of a slicing layer (MIG instance, HAMi, vcuda, cGPU, vGPU); the OOM
    message's "total capacity" shows the same smaller number. Unsliced, CUDA's total is NVML's total
    minus the driver's reserved memory (H100, driver 580: 85 017 493 504 = 85 520 809 984 - 503 316 480
    for both torch numbers; docs/validation/doctor-collect.md), so that is the baseline. Source:
    environment-facts.md section 4 (general note) and 3c [HAMICORE][MIGNAMES][TKEHIJ].
    """
    cards = gpus(facts)
    mig_on = mig_enabled(facts)
    seen: set[object] = set()
    for key, item, gi, cuda_total in cuda_totals(facts):
        card = _card_for(cards, item, gi)
        nvml_total = as_int(item.get("nvml_total_bytes")) or as_int(card.get("memory_total_bytes"))
        reserved = as_int(item.get("nvml_reserved_bytes")) or as_int(card.get("memory_reserved_bytes")) or 0
        if not nvml_total or cuda_total >= 0.97 * (nvml_total - reserved) or gi in seen:
            continue
        seen.add(gi)
        yield finding("SHR011", L, Severity.INFO if mig_on else Severity.WARNING, Confidence.HIGH,
                      f"GPU {gi}: CUDA reports {mib(cuda_total)} total but NVML reports {mib(nvml_total)}: "
                      + ("the MIG instance's size" if mig_on else "a slicing layer limits this process"),
                      "size the job for the CUDA total, or ask for a bigger share / whole GPU",
                      Category.GPU_SHARING_LIMIT,
                      [ev_value(key, f"total {mib(cuda_total)}", facts.source(key)),
                       ev_value(f"driver.gpus[{card.get('index', gi)}].memory_total_bytes", mib(nvml_total),
                                facts.source("driver.gpus"))])
