"""Shared-GPU resources (time-slicing, HAMi, MIG, gpu-manager, Aliyun gpushare) and what they need."""

from __future__ import annotations

import re
from collections.abc import Iterator

from oomdoctor.checks.audit.base import AuditFinding, env_value, finding, gib, pod_containers, shown_env
from oomdoctor.checks.registry import audit_check
from oomdoctor.facts import Category, Confidence, Layer, Severity
from oomdoctor.parsers.config_model import ContainerSpec, Workload

_MIG = re.compile(r"^nvidia\.com/mig-(?:\d+c\.)?(\d+)g\.(\d+)gb(?:\+me)?$")
_CUDA_TAG = re.compile(r"(?:cuda|cu)[-_]?(\d{2})(?:\.?(\d))?", re.IGNORECASE)


def _num(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _lim(c: ContainerSpec, name: str) -> str | None:
    req, lim = c.resource(name)
    return lim if lim is not None else req


@audit_check("AUD008", Layer.GPU_SHARING, "time-sliced GPU (nvidia.com/gpu.shared): no memory isolation")
def time_slicing(w: Workload, path: str) -> Iterator[AuditFinding]:
    """With device-plugin time-slicing every replica sees the full physical GPU memory and nothing
    isolates it: one tenant's allocations OOM the others, and their processes are invisible from inside
    the container [K8SDP]. With `failRequestsGreaterThanOne` a request above 1 is refused
    (`UnexpectedAdmissionError ... maximum request size for shared resources is 1`), and without it
    several replicas of one GPU give no more memory. The job must cap itself, e.g.
    `torch.cuda.set_per_process_memory_fraction(1 / replicas)`, or use MIG / MPS for real limits.
    """
    for c in pod_containers(w):
        value = _lim(c, "nvidia.com/gpu.shared")
        if value is None:
            continue
        n = _num(value) or 0
        ev = [("resources.limits.nvidia.com/gpu.shared", value)]
        if n > 1:
            yield finding("AUD008", Layer.GPU_SHARING, Severity.ERROR, Confidence.HIGH,
                          f"nvidia.com/gpu.shared: {value}: shared replicas are slices of one GPU's time, not more "
                          "memory (and >1 is refused with failRequestsGreaterThanOne)",
                          "request nvidia.com/gpu.shared: 1, or whole GPUs (nvidia.com/gpu) for multi-GPU jobs",
                          w, c, path, ev, Category.GPU_SHARING_LIMIT)
        else:
            yield finding("AUD008", Layer.GPU_SHARING, Severity.WARNING, Confidence.HIGH,
                          "time-sliced GPU: co-tenants share the GPU memory with no isolation; any of them can OOM the job",
                          "cap the job's share in code: torch.cuda.set_per_process_memory_fraction(1/replicas), or "
                          "move to MIG/MPS for enforced limits", w, c, path, ev, Category.OTHER_PROCESS)
        if _lim(c, "nvidia.com/gpu") is not None:
            yield finding("AUD008", Layer.GPU_SHARING, Severity.WARNING, Confidence.MEDIUM,
                          "container asks for both nvidia.com/gpu and nvidia.com/gpu.shared",
                          "request one kind: whole GPUs or shared replicas", w, c, path,
                          [*ev, ("resources.limits.nvidia.com/gpu", _lim(c, "nvidia.com/gpu") or "")],
                          Category.GPU_SHARING_LIMIT)


@audit_check("AUD009", Layer.GPU_SHARING, "HAMi vGPU memory (nvidia.com/gpumem) without matching settings")
def hami(w: Workload, path: str) -> Iterator[AuditFinding]:
    """HAMi slices a GPU with `nvidia.com/gpu` (number of vGPUs) plus `nvidia.com/gpumem` (MiB per vGPU)
    or `nvidia.com/gpumem-percentage`, and `nvidia.com/gpucores`; HAMi-core then enforces the limit
    inside the container through `CUDA_DEVICE_MEMORY_LIMIT` and libvgpu.so [HAMICORE][HAMIDP]. Without
    `nvidia.com/gpu` the memory request means nothing; setting `CUDA_DEVICE_MEMORY_LIMIT` by hand fights
    the value HAMi injects; `CUDA_DISABLE_CONTROL=true` switches enforcement off. A slice under 1 GiB
    leaves almost nothing after the CUDA context (300-500 MiB). The OOM then reads
    `[HAMI-core ERROR ...]: Device N OOM <used> / <limit>` [HAMIOOM].
    """
    for c in pod_containers(w):
        mem, pct, cores = (_lim(c, n) for n in ("nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores"))
        if mem is None and pct is None and cores is None:
            continue
        ev = [(f"resources.limits.{n}", v) for n, v in (("nvidia.com/gpumem", mem), ("nvidia.com/gpumem-percentage", pct),
                                                        ("nvidia.com/gpucores", cores)) if v is not None]
        if _lim(c, "nvidia.com/gpu") is None:
            yield finding("AUD009", Layer.GPU_SHARING, Severity.ERROR, Confidence.HIGH,
                          "HAMi gpumem/gpucores without nvidia.com/gpu: no vGPU is allocated, the slice is ignored",
                          "add resources.limits.nvidia.com/gpu: 1 (the number of vGPUs; gpumem applies to each)",
                          w, c, path, ev, Category.GPU_SHARING_LIMIT)
        if mem is not None and pct is not None:
            yield finding("AUD009", Layer.GPU_SHARING, Severity.WARNING, Confidence.HIGH,
                          "both nvidia.com/gpumem and nvidia.com/gpumem-percentage are set", "keep one of them",
                          w, c, path, ev, Category.GPU_SHARING_LIMIT)
        mib = _num(mem)
        if mib is not None and mib < 1024:
            yield finding("AUD009", Layer.GPU_SHARING, Severity.WARNING, Confidence.MEDIUM,
                          f"HAMi slice of {int(mib)} MiB: the CUDA context alone takes 300-500 MiB of it",
                          "request nvidia.com/gpumem of at least the model's peak (`oomdoctor estimate`) plus ~1 GiB",
                          w, c, path, ev, Category.GPU_SHARING_LIMIT)
        for var in ("CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DISABLE_CONTROL"):
            v = env_value(c, var)
            if v is not None and (var != "CUDA_DISABLE_CONTROL" or v.lower() == "true"):
                yield finding("AUD009", Layer.GPU_SHARING, Severity.WARNING, Confidence.HIGH,
                              f"{var} set by hand in a HAMi pod: it overrides the limit HAMi injects from gpumem",
                              f"remove {var}; size the slice with nvidia.com/gpumem", w, c, path,
                              [*ev, (f"env {var}", shown_env(var, v))], Category.GPU_SHARING_LIMIT)


@audit_check("AUD010", Layer.GPU_SHARING, "MIG resources a single CUDA process cannot use as requested")
def mig(w: Workload, path: str) -> Iterator[AuditFinding]:
    """A MIG resource `nvidia.com/mig-<g>g.<gb>gb` gives a fixed slice: the job sees `<gb>` GB of GPU
    memory, not the card's [MIGNAMES]. A CUDA process enumerates only one MIG device, so asking for
    several MIG slices in one container does not give one process more memory (data parallelism across
    MIG slices is not supported by NCCL either). Mixing `nvidia.com/gpu` and MIG resources in one
    container mixes strategies [K8SDP].
    """
    for c in pod_containers(w):
        slices = {n: _lim(c, n) for n in c.gpu_resources() if n.startswith("nvidia.com/mig-")}
        if not slices:
            continue
        total = sum(int(_num(v) or 0) for v in slices.values())
        ev = [(f"resources.limits.{n}", str(v)) for n, v in slices.items()]
        mems = [int(m.group(2)) for n in slices if (m := _MIG.match(n))]
        if total > 1:
            yield finding("AUD010", Layer.GPU_SHARING, Severity.WARNING, Confidence.HIGH,
                          f"{total} MIG slices in one container: a CUDA process uses only one MIG device"
                          + (f" ({max(mems)} GB)" if mems else ""),
                          "run one process per MIG slice (one container each), or use a larger profile / a whole GPU",
                          w, c, path, ev, Category.CONTEXT_OR_DRIVER)
        if _lim(c, "nvidia.com/gpu") is not None:
            yield finding("AUD010", Layer.GPU_SHARING, Severity.WARNING, Confidence.MEDIUM,
                          "container asks for both nvidia.com/gpu and MIG slices", "request one kind",
                          w, c, path, ev, Category.CONTEXT_OR_DRIVER)
        if mems and total == 1:
            yield finding("AUD010", Layer.GPU_SHARING, Severity.INFO, Confidence.HIGH,
                          f"MIG slice: the job has {mems[0]} GB of GPU memory, not the whole card's",
                          f"size batch and model to {mems[0]} GB (`oomdoctor estimate --max-batch --memory-limit {mems[0]}GB`)",
                          w, c, path, ev, Category.TRUE_CAPACITY)


@audit_check("AUD011", Layer.GPU_SHARING, "tkestack gpu-manager vcuda resources without matching settings")
def vcuda(w: Workload, path: str) -> Iterator[AuditFinding]:
    """gpu-manager shares GPUs with `tencent.com/vcuda-core` (100 = one GPU; above 100 only whole
    multiples) and `tencent.com/vcuda-memory` (units of 256 MiB) [TKEGM]. A fractional core share needs
    a memory share, and memory without cores allocates nothing. The vcuda hook library supports CUDA up
    to 11.5.1 [TKEVC]: a newer CUDA in the image bypasses or breaks the hooks (wrong totals, context
    failures that look like OOM). Even with whole GPUs (core >= 100) the hooks stay in the path; in the
    seed case switching gpu-manager off made the OOMs vanish for a while (info).
    """
    for c in pod_containers(w):
        core, mem = _lim(c, "tencent.com/vcuda-core"), _lim(c, "tencent.com/vcuda-memory")
        if core is None and mem is None:
            continue
        ev = [(f"resources.limits.tencent.com/vcuda-{n}", v) for n, v in (("core", core), ("memory", mem)) if v is not None]
        ncore, nmem = _num(core), _num(mem)
        if mem is not None and core is None:
            yield finding("AUD011", Layer.GPU_SHARING, Severity.ERROR, Confidence.HIGH,
                          "tencent.com/vcuda-memory without tencent.com/vcuda-core: no vGPU is allocated",
                          "add tencent.com/vcuda-core (e.g. 50 for half a GPU)", w, c, path, ev, Category.GPU_SHARING_LIMIT)
        if ncore is not None and ncore < 100 and mem is None:
            yield finding("AUD011", Layer.GPU_SHARING, Severity.WARNING, Confidence.MEDIUM,
                          f"vcuda-core {core} (a fraction of a GPU) without tencent.com/vcuda-memory",
                          "set tencent.com/vcuda-memory (x 256 MiB) to the job's peak GPU memory", w, c, path, ev,
                          Category.GPU_SHARING_LIMIT)
        if ncore is not None and ncore > 100 and ncore % 100:
            yield finding("AUD011", Layer.GPU_SHARING, Severity.ERROR, Confidence.HIGH,
                          f"vcuda-core {core}: above 100 only whole GPUs (multiples of 100) are allowed",
                          "use 100, 200, ... or a fraction below 100", w, c, path, ev, Category.GPU_SHARING_LIMIT)
        m = _CUDA_TAG.search(c.image.split("/")[-1])
        if m and (int(m.group(1)), int(m.group(2) or 0)) > (11, 5):
            yield finding("AUD011", Layer.GPU_SHARING, Severity.WARNING, Confidence.MEDIUM,
                          f"image built for CUDA {m.group(1)}.{m.group(2) or 0}: vcuda hooks support CUDA <= 11.5.1",
                          "use an image with CUDA <= 11.5, or whole GPUs (nvidia.com/gpu) without gpu-manager",
                          w, c, path, [*ev, ("image", c.image)], Category.CONTEXT_OR_DRIVER)
        if nmem is not None and nmem > 0 and (ncore is None or ncore < 100):
            yield finding("AUD011", Layer.GPU_SHARING, Severity.INFO, Confidence.HIGH,
                          f"vcuda slice: the job sees {gib(int(nmem) * 256 * 2**20)} of GPU memory",
                          "size batch and model to the slice", w, c, path, ev, Category.TRUE_CAPACITY)
        elif ncore is not None and ncore >= 100:
            yield finding("AUD011", Layer.GPU_SHARING, Severity.INFO, Confidence.MEDIUM,
                          "whole GPU(s) through gpu-manager: the vcuda hooks still sit between the job and CUDA/NVML",
                          "if allocations fail while the host's nvidia-smi shows free memory, run once with "
                          "nvidia.com/gpu instead of vcuda resources: if the errors stop, the hooks were the cause", w, c, path, ev,
                          Category.CONTEXT_OR_DRIVER)


@audit_check("AUD012", Layer.GPU_SHARING, "Aliyun gpushare (aliyun.com/gpu-mem): limit only advisory without cGPU")
def aliyun(w: Workload, path: str) -> Iterator[AuditFinding]:
    """`aliyun.com/gpu-mem` schedules a share of a GPU's memory (GiB; MiB in old gpushare) and passes it
    as `ALIYUN_COM_GPU_MEM_CONTAINER` [ALIGS]. Only with the cGPU kernel module is it enforced; with
    plain gpushare the container sees the whole card and a greedy allocator (PyTorch's caching
    allocator grows until OOM) takes memory promised to others [ALICGPU]. Mixing it with
    `nvidia.com/gpu` in one container requests two different device plugins.
    """
    for c in pod_containers(w):
        value = _lim(c, "aliyun.com/gpu-mem")
        if value is None:
            continue
        ev = [("resources.limits.aliyun.com/gpu-mem", value)]
        yield finding("AUD012", Layer.GPU_SHARING, Severity.WARNING, Confidence.MEDIUM,
                      f"aliyun.com/gpu-mem: {value}: enforced only with cGPU isolation; otherwise co-tenants share "
                      "the whole card's memory",
                      "enable cGPU isolation on the node pool, or cap the job in code: "
                      "torch.cuda.set_per_process_memory_fraction(ALIYUN_COM_GPU_MEM_CONTAINER / ALIYUN_COM_GPU_MEM_DEV)",
                      w, c, path, ev, Category.GPU_SHARING_LIMIT)
        if _lim(c, "nvidia.com/gpu") is not None:
            yield finding("AUD012", Layer.GPU_SHARING, Severity.WARNING, Confidence.MEDIUM,
                          "container asks for both aliyun.com/gpu-mem and nvidia.com/gpu", "request one kind",
                          w, c, path, ev, Category.GPU_SHARING_LIMIT)
