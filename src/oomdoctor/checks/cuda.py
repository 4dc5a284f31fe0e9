"""CUDA layer: the driver's max CUDA vs torch's runtime vs the image's toolkit, arch list vs GPU."""

from __future__ import annotations

from collections.abc import Iterator

from oomdoctor.checks._util import (
    Category,
    Confidence,
    FactSet,
    Finding,
    Layer,
    Severity,
    as_list,
    ev,
    ev_value,
    finding,
    gpus,
    truthy,
)
from oomdoctor.checks.registry import check
from oomdoctor.knowledge import torch_arch
from oomdoctor.knowledge.cuda_driver import FWD, MVC, RN132, runtime_on_driver
from oomdoctor.knowledge.versions import cuda_mm, fmt

L = Layer.CUDA


def _compat_findings(facts: FactSet, check_id: str, key: str, what: str) -> Iterator[Finding]:
    runtime = facts.value(key)
    drv, dmax = facts.value("driver.version"), facts.value("cuda.driver_max")
    if not runtime or not (drv or dmax):
        return
    c = runtime_on_driver(runtime, drv, dmax)
    rt = cuda_mm(runtime)
    evidence = [ev(facts, key)] + [ev(facts, k) for k in ("driver.version", "cuda.driver_max") if facts.has(k)]
    if c.needed:
        evidence.append(ev_value(f"CUDA {fmt(rt)} toolkit driver", f">= {c.needed}", RN132))
    if c.status == "native":
        yield finding(check_id, L, Severity.INFO, Confidence.HIGH,
                      f"{what} CUDA {runtime} on driver {drv or '?'}: fine by NVIDIA's rules ({c.reason}, and "
                      "a driver runs every older CUDA runtime: backward compatibility)",
                      "nothing to do: a lower CUDA version in the container than `nvidia-smi` shows is expected and supported",
                      None, evidence)
    elif c.status == "mvc":
        evidence.append(ev_value("MVC minimum", f">= {c.mvc_min}", MVC))
        yield finding(check_id, L, Severity.WARNING, Confidence.MEDIUM,
                      f"{what} CUDA {runtime} is newer than the driver's CUDA {fmt(c.driver_max)}; it runs only through "
                      "minor version compatibility (limited features: PTX JIT of newer PTX fails with error 222)",
                      f"upgrade the driver to >= {c.needed} (the CUDA {fmt(rt)} toolkit driver), or use a build for "
                      f"CUDA {fmt(c.driver_max)}", Category.CONTEXT_OR_DRIVER, evidence)
    elif c.status == "too_old":
        compat = truthy(facts.value("cuda.compat_libs"))
        if compat:
            evidence.append(ev(facts, "cuda.compat_libs"))
        yield finding(check_id, L, Severity.ERROR if key == "cuda.torch_runtime" else Severity.WARNING,
                      Confidence.MEDIUM if compat else Confidence.HIGH,
                      f"Driver {drv or '?'} (CUDA {fmt(c.driver_max)}) is too old for {what} CUDA {runtime} "
                      f"(needs >= {c.needed or c.mvc_min})"
                      + ("; forward-compat libraries are present (data-center GPUs only)" if compat else ""),
                      f"upgrade the host driver to >= {c.needed or c.mvc_min}, or install a torch build for CUDA "
                      f"<= {fmt(c.driver_max)} (e.g. `pip install torch --index-url https://download.pytorch.org/whl/"
                      f"cu{c.driver_max[0] if c.driver_max else 'XY'}{c.driver_max[1] if c.driver_max else ''}`)",
                      Category.CONTEXT_OR_DRIVER, evidence)


@check("CUDA001", L, "PyTorch's CUDA runtime vs the driver")
def torch_runtime_vs_driver(facts: FactSet) -> Iterator[Finding]:
    """A CUDA runtime runs on a driver that supports its version (backward compatibility: any newer
    driver is fine), or on an older driver of the same major through minor version compatibility
    (driver >= the family's MVC minimum: 525.60.13 for 12.x, 450.80.02 for 11.1-11.8, 580 for 13.x) with a
    limited feature set. Below that, PyTorch reports "The NVIDIA driver on your system is too old" and
    `torch.cuda.is_available()` is False. Says explicitly when the pair is fine, e.g. CUDA 11.3 on a
    driver for 12.2. Sources: environment-facts.md 1a-1e [RN132][MVC][TORCHDRV].
    """
    yield from _compat_findings(facts, "CUDA001", "cuda.torch_runtime", "PyTorch's")


@check("CUDA002", L, "The image's CUDA toolkit vs the driver")
def image_toolkit_vs_driver(facts: FactSet) -> Iterator[Finding]:
    """The toolkit in the image (nvcc, /usr/local/cuda) follows the same driver rules as torch's runtime
    (tables 1a/1b). PyTorch wheels carry their own CUDA runtime, so the image toolkit matters for
    compiled extensions and for other CUDA programs in the image. Sources: environment-facts.md 1a-1b
    [RN132][MVC].
    """
    yield from _compat_findings(facts, "CUDA002", "cuda.image_toolkit", "the image's toolkit")


@check("CUDA003", L, "PyTorch build has no kernels for the GPU's compute capability")
def arch_list(facts: FactSet) -> Iterator[Finding]:
    """A build runs on a GPU when its arch list has SASS for the same major and a lower-or-equal minor, or
    PTX for an equal-or-lower capability. Otherwise PyTorch warns "... with CUDA capability sm_XY is not
    compatible with the current PyTorch installation" and kernels fail with "no kernel image is available
    for execution on the device" (error 209): a crash, not a memory problem. When the arch list was not
    collected it is taken from the documented wheel variant. Sources: environment-facts.md 3b/3c
    [PTCI][PTTESTFIX][USRARCH].
    """
    caps_raw = as_list(facts.value("cuda.device_capabilities"))
    if not caps_raw:
        caps_raw = [d.get("capability") for d in as_list(facts.value("torch.devices")) if isinstance(d, dict)]
    caps = [c for c in (torch_arch.parse_capability(x) for x in caps_raw) if c]
    if not caps:
        return
    arch = [str(a) for a in as_list(facts.value("cuda.arch_list"))]
    source = facts.source("cuda.arch_list")
    confidence = Confidence.HIGH
    if not arch:
        tv = facts.value("torch.version")
        documented = torch_arch.variant_arch_list(str(tv), cuda_mm(facts.value("cuda.torch_runtime"))) if tv else None
        if not documented:
            return
        arch, source, confidence = documented, f"documented arch list of the wheel ({torch_arch.SOURCE})", Confidence.MEDIUM
    names = [g.get("name") for g in gpus(facts)]
    for i, cap in enumerate(sorted(set(caps))):
        if torch_arch.covers(arch, cap):
            continue
        yield finding("CUDA003", L, Severity.ERROR, confidence,
                      f"PyTorch {facts.value('torch.version') or ''} has no kernels for compute capability {cap[0]}.{cap[1]}"
                      + (f" ({names[i]})" if i < len(names) and names[i] else ""),
                      "install a torch build whose arch list covers the GPU (see `torch.cuda.get_arch_list()`; "
                      "Pascal/Maxwell need cu126 or older, Blackwell sm_120 needs cu128 or newer)",
                      Category.NOT_OOM,
                      [ev_value("cuda.arch_list", ";".join(arch), source),
                       ev_value("cuda.device_capabilities", f"{cap[0]}.{cap[1]}",
                                facts.source("cuda.device_capabilities") or facts.source("torch.devices"))])


DATACENTER_HINTS = ("A100", "A800", "H100", "H800", "H200", "B100", "B200", "GB200", "A10", "A30", "A40", "L4",
                    "L40", "T4", "V100", "P100", "A2", "A16", "Tesla", "RTX PRO 6000 Blackwell Server")


@check("CUDA004", L, "Forward-compatibility libraries on a GPU that does not support them")
def forward_compat(facts: FactSet) -> Iterator[Finding]:
    """CUDA forward compatibility (cuda-compat-X-Y, /usr/local/cuda/compat/libcuda) lets a newer CUDA major
    run on an older driver, but only on data-center GPUs (and select NGC-ready RTX, Jetson). On GeForce /
    workstation cards context creation fails with cudaErrorCompatNotSupportedOnDevice (804). The kernel
    module is not upgraded by it. Source: environment-facts.md 1d [FWD][GLCUDA183][CUDAERR].
    """
    if not truthy(facts.value("cuda.compat_libs")):
        return
    names = [str(g.get("name") or "") for g in gpus(facts)] or [str(n) for n in as_list(facts.value("driver.gpu_names"))]
    consumer = [n for n in names if n and not any(h.lower() in n.lower() for h in DATACENTER_HINTS)]
    if consumer:
        yield finding("CUDA004", L, Severity.WARNING, Confidence.MEDIUM,
                      f"Forward-compat libcuda is present but {consumer[0]} is not a data-center GPU (error 804 if used)",
                      "remove the compat package from the image (or LD_LIBRARY_PATH), or upgrade the host driver "
                      f"so that no compat layer is needed ({FWD})", Category.CONTEXT_OR_DRIVER,
                      [ev(facts, "cuda.compat_libs"), ev_value("GPU", consumer[0], facts.source("driver.gpus"))])


@check("CUDA005", L, "Eager module loading inflates every CUDA context")
def module_loading(facts: FactSet) -> Iterator[Finding]:
    """With CUDA_MODULE_LOADING=EAGER every kernel of every library is loaded into each context at start:
    PyTorch measured 287 MB (lazy) vs 667 MB (eager) per process, and >1000 MB before CUDA 11.7. Many
    ranks or workers per GPU multiply it. PyTorch sets LAZY itself when the variable is unset. Source:
    memory-tools-and-papers.md section 5 (pytorch#85692, #107667; NVIDIA lazy-loading guide).
    """
    v = facts.value("cuda.module_loading")
    if v and str(v).strip().upper() == "EAGER":
        yield finding("CUDA005", L, Severity.WARNING, Confidence.HIGH,
                      "CUDA_MODULE_LOADING=EAGER: each CUDA context loads all kernels (hundreds of MiB more per process)",
                      "unset CUDA_MODULE_LOADING (PyTorch then uses LAZY) or set CUDA_MODULE_LOADING=LAZY",
                      Category.TRUE_CAPACITY, [ev(facts, "cuda.module_loading")])
