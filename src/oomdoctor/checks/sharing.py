"""GPU sharing layer: MIG, MPS, HAMi, gpu-manager/vcuda, cGPU, Run:ai, vGPU, time-slicing, preload hooks."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

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
    cuda_totals,
    ev,
    ev_value,
    finding,
    gpus,
    mib,
    short,
    truthy,
)
from oomdoctor.checks.registry import check
from oomdoctor.facts.gpu import hami_limit, mig_mode_on
from oomdoctor.knowledge.sharing import KNOWN_PRELOAD_HOOKS, LAYERS, VCUDA_MAX_CUDA, VCUDA_MEMORY_UNIT
from oomdoctor.knowledge.versions import cuda_mm, fmt
from oomdoctor.units import parse_device_limits, parse_limit

L = Layer.GPU_SHARING
SLICE = Category.GPU_SHARING_LIMIT


def present(value: Any) -> bool:
    if isinstance(value, dict):
        return any(v not in (None, False, "", [], {}) for v in value.values())
    return truthy(value) if not isinstance(value, (list, tuple)) else bool(value)


@check("SHR001", L, "MIG: the job gets a slice of the GPU")
def mig(facts: FactSet) -> Iterator[Finding]:
    """With MIG enabled a process sees one GPU instance: cudaMemGetInfo and the OOM message's "total
    capacity" are the instance's size (1g.10gb = 10 GB on an A100 80GB), not the card's. A job sized for
    the whole card OOMs although nvidia-smi on the host shows room. A pending mode change needs a GPU
    reset. Source: environment-facts.md section 4 [MIGNAMES][NVMLMIG][K8SDP].
    """
    for m in as_list(facts.value("sharing.mig")):
        if not isinstance(m, dict):
            continue
        cur, pend = str(m.get("current", "")).lower(), str(m.get("pending", "")).lower()
        gpu = m.get("gpu")
        insts = [i for i in as_list(m.get("instances")) if isinstance(i, dict)]
        if mig_mode_on(m):
            sizes = ", ".join(f"{i.get('name') or 'instance ' + str(i.get('index', '?'))} ({mib(i.get('memory_total_bytes'))})"
                              for i in insts[:4])
            yield finding("SHR001", L, Severity.WARNING, Confidence.HIGH,
                          f"GPU {gpu} is in MIG mode: each job sees only its instance" + (f": {sizes}" if sizes else ""),
                          "size the job for the instance (see `nvidia-smi -L`), request a larger profile "
                          "(e.g. nvidia.com/mig-3g.40gb), or disable MIG: `sudo nvidia-smi -i <gpu> -mig 0` and reset",
                          SLICE, [ev_value("sharing.mig", m, facts.source("sharing.mig"))])
        if pend and cur and pend != cur and pend not in ("n/a", "none"):
            yield finding("SHR001", L, Severity.WARNING, Confidence.HIGH,
                          f"GPU {gpu}: MIG mode change pending ({cur} -> {pend}) until a GPU reset",
                          f"drain GPU {gpu} and reset it (`sudo nvidia-smi -r -i {gpu}`)", Category.CONTEXT_OR_DRIVER,
                          [ev_value("sharing.mig", m, facts.source("sharing.mig"))])


@check("SHR002", L, "MPS: shared GPU, possibly a pinned per-client memory limit")
def mps(facts: FactSet) -> Iterator[Finding]:
    """Under MPS clients share one GPU. CUDA_MPS_PINNED_DEVICE_MEM_LIMIT (e.g. `0=1G,1=512M`) caps each
    client's device memory: allocations beyond it fail with out-of-memory while NVML still shows the
    full card free. The k8s device plugin's MPS mode gives each replica 1/replicas of the memory.
    Source: environment-facts.md section 4 [MPSENV][MPSTOOLS][K8SDPMPS].
    """
    m = as_dict(facts.value("sharing.mps"))
    if not present(m):
        return
    limit = m.get("pinned_device_mem_limit")
    evidence = [ev(facts, "sharing.mps")]
    if m.get("daemon_gone"):
        # Killed without `quit`: its pid file and socket stay, nothing answers on them (collectors/sharing.py).
        # No memory limit then and no OOM cause: on an H100 (validation/mps_killed_daemon_gpu.py, session 16)
        # clients with the pipe variable ran normally beside the leftovers; only MPS's sharing is gone.
        where = m.get("pipe_directory")
        yield finding("SHR002", L, Severity.INFO, Confidence.MEDIUM,
                      f"the MPS pipe directory {where or '/tmp/nvidia-mps'} holds the pid file and control socket of "
                      "a daemon that no longer answers (killed without `quit`): no new client gets an MPS limit or "
                      "MPS sharing (clients of a server still running keep theirs)",
                      "restart the MPS control daemon (nvidia-cuda-mps-control -d) if clients should share the GPU "
                      "through MPS; otherwise remove the stale files"
                      + (" and unset CUDA_MPS_PIPE_DIRECTORY" if where else " in /tmp/nvidia-mps"),
                      None, evidence)
        return
    if limit:
        shown = ", ".join(f"GPU {d}: {mib(b)}" for d, b in parse_device_limits(limit).items() if d != "*")
        yield finding("SHR002", L, Severity.WARNING, Confidence.HIGH,
                      f"MPS pins each client's device memory: {shown or limit}",
                      "raise or unset CUDA_MPS_PINNED_DEVICE_MEM_LIMIT for this client (or the MPS control daemon's "
                      "`set_default_device_pinned_mem_limit`), or size the job below the limit", SLICE, evidence)
    else:
        yield finding("SHR002", L, Severity.INFO, Confidence.MEDIUM,
                      "MPS is in use: clients share the GPU's memory without isolation",
                      "make sure co-located clients fit together; set CUDA_MPS_PINNED_DEVICE_MEM_LIMIT per client to "
                      "make one client's OOM not starve the others", Category.OTHER_PROCESS, evidence)


@check("SHR003", L, "HAMi limits this container's GPU memory")
def hami(facts: FactSet) -> Iterator[Finding]:
    """HAMi-core (libvgpu.so, preloaded via /etc/ld.so.preload) hooks the CUDA driver API and NVML: the
    container sees CUDA_DEVICE_MEMORY_LIMIT as the GPU's size, and exceeding it fails with
    "[HAMI-core ERROR ...]: Device N OOM <new> / <limit>" while the card has room. Statically linked CUDA
    or a dlopen'd libcuda bypasses it. Source: environment-facts.md section 4 [HAMICORE][HAMIDP][HAMIOOM].
    On an H200 (driver 580, CUDA 13; docs/validation/explain.md, session 19) HAMi-core 8f3a89c hooked NVML but
    limited no allocation, by the CUDA 13 runtime, by a program linked to libcuda (its build exports no cu*
    symbol) or by dlsym: hence the second warning, when CUDA's own total is above the limit.
    """
    h = as_dict(facts.value("sharing.hami"))
    preload = [str(p) for p in as_list(facts.value("sharing.ld_preload")) if "vgpu" in str(p).lower()]
    if not present(h) and not preload:
        return
    limits = {k: parse_limit(v) for k, v in as_dict(h.get("memory_limits")).items()}
    if h.get("memory_limit"):
        limits.setdefault("all", parse_limit(h.get("memory_limit")))
    shown = ", ".join(f"{k}: {mib(v)}" for k, v in limits.items() if v) or "limit not readable"
    totals = [g.get("memory_total_bytes") for g in gpus(facts)]
    evidence = [ev(facts, "sharing.hami")] if present(h) else [ev(facts, "sharing.ld_preload")]
    yield finding("SHR003", L, Severity.WARNING, Confidence.HIGH,
                  f"HAMi slices the GPU: this container may use {shown}"
                  + (f" (NVML total as seen here: {mib(totals[0])})" if totals and totals[0] else ""),
                  "request more `nvidia.com/gpumem` (or `nvidia.com/gpumem-percentage`) for the pod, or shrink the "
                  "job to fit; the OOM text's 'total capacity' is the slice", SLICE, evidence)
    yield from _hami_not_applied(facts, h)


def _hami_not_applied(facts: FactSet, h: dict[str, Any]) -> Iterator[Finding]:
    """CUDA in this container sees more than HAMi's limit: the hook is not in CUDA's path (a CUDA 13 runtime on
    an H200, driver 580, HAMi-core 8f3a89c: NVML showed the limit, PyTorch the whole card, and a 42 GiB job ran
    under a 21 GiB limit; HAMi-core#233; docs/validation/explain.md, session 19). The limit then isolates nothing."""
    seen: dict[object, tuple[int, str]] = {}
    for key, _, gi, total in cuda_totals(facts):
        seen.setdefault(gi, (total, key))  # the probe's reading first
    for gpu, (total, key) in seen.items():
        limit = hami_limit(h, gpu)
        if limit and total > 1.05 * limit:
            yield finding("SHR003", L, Severity.WARNING, Confidence.MEDIUM,
                          f"HAMi's limit ({mib(limit)}) is not applied to CUDA here: PyTorch sees {mib(total)} on GPU {gpu}",
                          "the hook is not in CUDA's path (a CUDA runtime newer than the HAMi-core build hooks, e.g. "
                          "CUDA 13, HAMi-core#233; static CUDA; a dlopen that bypasses it): the job may take the whole "
                          "card and co-tenants' OOMs follow. Upgrade HAMi-core or use a CUDA <= 12 image",
                          Category.OTHER_PROCESS, [ev(facts, "sharing.hami"), ev(facts, key)])
            return


@check("SHR004", L, "tkestack gpu-manager / vcuda present")
def vcuda(facts: FactSet) -> Iterator[Finding]:
    """gpu-manager's vcuda-controller replaces libcuda (and NVML via nvml-helper) in the container: the
    job sees `tencent.com/vcuda-memory` x 256 MiB as the GPU, and context creation goes through the
    vcuda.sock RPC to the node's gpu-manager. Problems in that path show up as CUDA errors during
    initialisation while the physical GPU is free; the seed case (000) improved when gpu-manager was
    turned off. vcuda supports CUDA <= 11.5.1. Source: environment-facts.md section 4 [TKEGM][TKEHIJ][TKEVC].
    """
    v = as_dict(facts.value("sharing.vcuda"))
    if not present(v):
        return
    evidence = [ev(facts, "sharing.vcuda")]
    rt = cuda_mm(facts.value("cuda.torch_runtime"))
    if rt and rt > VCUDA_MAX_CUDA:
        evidence.append(ev(facts, "cuda.torch_runtime"))
        yield finding("SHR004", L, Severity.ERROR, Confidence.HIGH,
                      f"gpu-manager/vcuda hooks CUDA only up to {fmt(VCUDA_MAX_CUDA)}.1, but PyTorch uses CUDA {fmt(rt)}",
                      "run this job on whole GPUs (nvidia.com/gpu without vcuda resources) or use a torch build for "
                      "CUDA <= 11.5", Category.CONTEXT_OR_DRIVER, evidence)
        return
    share = ""
    for r in as_list(facts.value("sharing.k8s_resources")):
        if isinstance(r, dict) and r.get("resource") == "tencent.com/vcuda-memory":
            units = as_int(r.get("value"))
            if units:
                share = f"; the pod requests {units} x 256 MiB = {mib(units * VCUDA_MEMORY_UNIT)} of GPU memory"
                evidence.append(ev_value("sharing.k8s_resources", r, facts.source("sharing.k8s_resources")))
                break  # requests and limits name the same share
    yield finding("SHR004", L, Severity.WARNING, Confidence.MEDIUM,
                  "GPU sharing layer tkestack gpu-manager/vcuda is present: CUDA and NVML calls go through its hooks"
                  + share,
                  "to rule it out, run the job once on a whole GPU without vcuda resources (if the errors stop, the hooks were the cause); "
                  "otherwise request enough `tencent.com/vcuda-memory` (units of 256 MiB)",
                  SLICE, evidence)


@check("SHR005", L, "Aliyun cGPU / gpushare share")
def cgpu(facts: FactSet) -> Iterator[Finding]:
    """Aliyun cGPU gives the container ALIYUN_COM_GPU_MEM_CONTAINER of the card's ALIYUN_COM_GPU_MEM_DEV
    (unit ALIYUN_COM_GPU_MEM_UNIT, GiB; old gpushare used MiB). With cGPU isolation the limit is
    enforced; plain gpushare only advises, so a neighbour can take the rest. Source: environment-facts.md
    section 4 [ALIGS][ALICGPU].
    """
    c = as_dict(facts.value("sharing.cgpu"))
    if not present(c):
        return
    yield finding("SHR005", L, Severity.WARNING, Confidence.HIGH,
                  f"Aliyun cGPU/gpushare: this container's share is {c.get('container_mem')} of {c.get('dev_mem')} "
                  f"{c.get('unit') or 'GiB'}",
                  "request more `aliyun.com/gpu-mem` for the pod, or size the job to the share", SLICE,
                  [ev(facts, "sharing.cgpu")])


@check("SHR006", L, "Run:ai / KAI GPU fraction")
def runai(facts: FactSet) -> Iterator[Finding]:
    """Run:ai / KAI fractions (GPU_PORTION, RUNAI_NUM_OF_GPUS) give a pod part of a GPU; the legacy engine
    virtualises memory to that fraction and v3.0 enforces it through MPS / dmem. Source:
    environment-facts.md section 4 [KAIGS][RUNAIMIG].
    """
    r = as_dict(facts.value("sharing.runai"))
    if not present(r):
        return
    portion = r.get("gpu_portion") or r.get("num_gpus")
    try:
        frac = float(portion)
    except (TypeError, ValueError):
        frac = None
    if frac is not None and frac >= 1:
        return
    yield finding("SHR006", L, Severity.WARNING, Confidence.MEDIUM,
                  f"Run:ai/KAI gives this pod a GPU fraction of {portion}",
                  "submit with a larger fraction (`--gpu-portion-request`) or whole GPUs, or size the job to the fraction",
                  SLICE, [ev(facts, "sharing.runai")])


@check("SHR007", L, "NVIDIA vGPU guest")
def vgpu(facts: FactSet) -> Iterator[Finding]:
    """In a vGPU guest (NVML virtualization mode VGPU) the VM sees only its profile's framebuffer, and
    the guest driver branch must match the host's. Source: environment-facts.md section 4 [NVMLVIRT][K8SDP].
    """
    for v in as_list(facts.value("sharing.vgpu")):
        mode = str(v.get("mode") if isinstance(v, dict) else v).upper()
        if mode in ("VGPU", "2", "NVML_GPU_VIRTUALIZATION_MODE_VGPU"):
            yield finding("SHR007", L, Severity.INFO, Confidence.HIGH,
                          "This is a vGPU guest: memory is the vGPU profile's framebuffer, not the card's",
                          "ask the platform for a larger vGPU profile if the job needs more; keep the guest driver on "
                          "the host's branch", SLICE, [ev_value("sharing.vgpu", v, facts.source("sharing.vgpu"))])
            return


@check("SHR008", L, "Time-sliced or shared GPU resources requested (no memory isolation)")
def timeslicing(facts: FactSet) -> Iterator[Finding]:
    """The k8s device plugin's time-slicing (`nvidia.com/gpu.shared`, sharing.timeSlicing replicas)
    schedules several pods on one GPU with no memory isolation: each sees the full card, co-tenants' PIDs
    are invisible, and one tenant can OOM the others. Resources like `nvidia.com/gpumem`,
    `tencent.com/vcuda-memory` or `nvidia.com/mig-*` name the slicing layer. Source: environment-facts.md
    section 4 [K8SDP].
    """
    raw = facts.value("sharing.k8s_resources")
    items = [short(x) for x in (raw.items() if isinstance(raw, dict) else as_list(raw))]
    shared = [i for i in items if re.search(r"gpu\.shared|time-?slic|replicas", i, re.I)]
    if shared:
        yield finding("SHR008", L, Severity.WARNING, Confidence.MEDIUM,
                      f"Time-sliced GPU requested ({shared[0]}): pods share the card's memory without isolation",
                      "give memory-heavy jobs a whole GPU (nvidia.com/gpu) or a MIG profile; with time-slicing, cap "
                      "each job (torch.cuda.set_per_process_memory_fraction) so one tenant cannot OOM the others",
                      Category.OTHER_PROCESS, [ev(facts, "sharing.k8s_resources")])


@check("SHR009", L, "Libraries preloaded into every process")
def preload(facts: FactSet) -> Iterator[Finding]:
    """/etc/ld.so.preload and LD_PRELOAD inject libraries into every process; GPU sharing layers (HAMi's
    libvgpu.so) use this to hook CUDA and NVML, so what the job sees as the GPU is what the hook decides.
    Source: environment-facts.md section 4 [HAMIDP][HAMICORE].
    """
    libs = [str(x) for x in as_list(facts.value("sharing.ld_preload")) if str(x).strip()]
    if not libs:
        return
    known = {lib: layer for lib in libs for pat, layer in KNOWN_PRELOAD_HOOKS if pat in lib.lower()}
    unknown = [lib for lib in libs if lib not in known]
    if known:
        names = ", ".join(sorted({LAYERS[v].name for v in known.values()}))
        yield finding("SHR009", L, Severity.INFO, Confidence.HIGH, f"GPU sharing hook preloaded: {names}",
                      "see the sharing-layer finding for its limit", None, [ev(facts, "sharing.ld_preload")])
    if unknown:
        yield finding("SHR009", L, Severity.INFO, Confidence.LOW,
                      f"Preloaded libraries: {', '.join(unknown[:3])}: they may intercept CUDA calls",
                      "if allocations fail unexpectedly, retry once with LD_PRELOAD unset / the preload entry removed",
                      None, [ev(facts, "sharing.ld_preload")])
