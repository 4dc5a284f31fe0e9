"""Framework layer: PyTorch build and init errors, PYTORCH_CUDA_ALLOC_CONF, active probe results."""

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
    finding,
    gpus,
    mib,
    short,
    truthy,
)
from oomdoctor.checks.registry import check
from oomdoctor.parsers.alloc_conf import DOC, parse_alloc_conf

L = Layer.FRAMEWORK


def _gpu_nearly_full(facts: FactSet) -> bool:
    for g in gpus(facts):
        used, total = as_int(g.get("memory_used_bytes")), as_int(g.get("memory_total_bytes"))
        if used and total and used >= 0.9 * total:
            return True
    return False


@check("FWK001", L, "PYTORCH_CUDA_ALLOC_CONF is invalid or partly ignored")
def alloc_conf(facts: FactSet) -> Iterator[Finding]:
    """PyTorch parses PYTORCH_CUDA_ALLOC_CONF (alias of PYTORCH_ALLOC_CONF) at the first CUDA allocation
    and raises on an unknown option or a bad value, so a typo kills the job; options the active backend
    ignores (cudaMallocAsync ignores max_split_size_mb, roundup_power2_divisions,
    garbage_collection_threshold) or that cannot act (garbage_collection_threshold without a memory
    fraction) silently do nothing. Source: docs/source/notes/cuda.md (memory-tools-and-papers.md 4.3-4.4).
    """
    raw = facts.value("torch.alloc_conf")
    if not raw:
        return
    values = [(k, v) for k, v in raw.items() if v] if isinstance(raw, dict) else [("torch.alloc_conf", raw)]
    for name, text in values:
        conf = parse_alloc_conf(str(text))
        for issue in conf.issues:
            sev = Severity.ERROR if issue.severity == "error" else Severity.WARNING
            yield finding("FWK001", L, sev, Confidence.HIGH, f"{name}: {issue.message}",
                          f"fix the variable (see {DOC}); e.g. PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
                          None, [ev(facts, "torch.alloc_conf", text)])
        if conf.ok and conf.expandable_segments:
            yield finding("FWK001", L, Severity.INFO, Confidence.HIGH,
                          "expandable_segments:True is set: fragmentation of the caching allocator is largely avoided",
                          "nothing to do", None, [ev(facts, "torch.alloc_conf", text)])


_INIT_ERRORS: tuple[tuple[str, str, Category, str], ...] = (
    (r"driver on your system is too old|insufficient for CUDA runtime|cuda runtime error \(35\)",
     "the NVIDIA driver is too old for this PyTorch build", Category.CONTEXT_OR_DRIVER,
     "upgrade the driver or install a torch wheel for the driver's CUDA (see CUDA001)"),
    (r"Found no NVIDIA driver|no CUDA-capable device|CUDA driver initialization failed|cudaErrorNoDevice",
     "CUDA found no driver or no GPU", Category.CONTEXT_OR_DRIVER,
     "start the container with GPUs and the compute capability (docker --gpus all; NVIDIA_DRIVER_CAPABILITIES=compute,utility)"),
    (r"out of memory", "CUDA ran out of memory while initialising", Category.CONTEXT_OR_DRIVER,
     "check other processes on the GPU (SHR010) and the driver/kernel pair (DRV003); run `oomdoctor doctor --probe`"),
    (r"busy or unavailable|cudaErrorDevicesUnavailable", "the GPU is busy or unavailable (exclusive compute mode?)",
     Category.CONTEXT_OR_DRIVER, "`nvidia-smi -q -d COMPUTE`; stop the process holding the GPU or set compute mode DEFAULT"),
    (r"no kernel image is available|not compatible with the current PyTorch", "the PyTorch build has no kernels for this GPU",
     Category.NOT_OOM, "install a torch build whose arch list covers the GPU (see CUDA003)"),
    (r"version mismatch", "driver/library version mismatch", Category.CONTEXT_OR_DRIVER,
     "reload the nvidia kernel modules or reboot (see DRV001)"),
)


@check("FWK002", L, "Importing torch or initialising CUDA failed")
def torch_error(facts: FactSet) -> Iterator[Finding]:
    """What `import torch` and `torch.cuda.init()` raised in a child process. The CUDA init messages come
    from c10/cuda/CUDAFunctions.cpp ("The NVIDIA driver on your system is too old (found version
    NNNNN)", "Found no NVIDIA driver on your system") and the CUDA runtime error enum. Source:
    environment-facts.md 1e, 3c [TORCHDRV][CUDAERR].
    """
    err = facts.value("torch.error")
    if not err:
        if facts.value("torch.cuda_available") is False and (gpus(facts) or facts.value("driver.version")):
            if facts.has("cuda.torch_runtime") and facts.value("cuda.torch_runtime") is None:
                yield finding("FWK002", L, Severity.WARNING, Confidence.HIGH,
                              f"PyTorch {facts.value('torch.version') or ''} is a CPU-only build on a machine with GPUs",
                              "install a CUDA build: `pip install torch --index-url https://download.pytorch.org/whl/cu126` "
                              "(pick the cuXYZ the driver supports)", Category.NOT_OOM,
                              [ev(facts, "torch.version"), ev(facts, "cuda.torch_runtime", "None")])
            else:
                yield finding("FWK002", L, Severity.ERROR, Confidence.MEDIUM,
                              "torch.cuda.is_available() is False although the driver reports GPUs",
                              "run `python -c 'import torch; torch.cuda.init()'` to see CUDA's error; compare with CUDA001 / RUN002",
                              Category.CONTEXT_OR_DRIVER, [ev(facts, "torch.cuda_available")])
        return
    text = str(err)
    for pattern, what, cat, remedy in _INIT_ERRORS:
        if re.search(pattern, text, re.I):
            yield finding("FWK002", L, Severity.ERROR, Confidence.HIGH, f"CUDA initialisation failed: {what}",
                          remedy, cat, [ev(facts, "torch.error", short(text))])
            return
    if "No module named" in text:
        yield finding("FWK002", L, Severity.INFO, Confidence.HIGH, "PyTorch is not installed in this environment",
                      "nothing to do for a non-PyTorch machine; run doctor inside the job's environment", None,
                      [ev(facts, "torch.error", short(text))])
        return
    yield finding("FWK002", L, Severity.WARNING, Confidence.MEDIUM, f"Importing torch / CUDA init raised: {short(text, 100)}",
                  "reproduce with `python -c 'import torch; torch.cuda.init()'` and fix the reported error", None,
                  [ev(facts, "torch.error", short(text))])


@check("FWK003", L, "CUDA context creation fails (probe)")
def probe_context(facts: FactSet) -> Iterator[Finding]:
    """`doctor --probe` creates a CUDA context N times in fresh child processes. Any failure on a GPU that
    is not full points at the context/driver path (driver/kernel mismatch, a sharing hook, a
    half-initialised device), the seed case's intermittent "CUDA error: out of memory" during
    `model.to('cuda')`. Failures on a full GPU are other processes' memory (reproduced on an H200: a process
    that leaves 300 MiB free makes the next one fail while creating its context, fixtures/real-oom/
    hog_leaves_300MiB_then_alloc_1GiB.txt). Source: environment-facts.md 1e, 4 [CUDAERR][TORCHDRV].
    """
    p = as_dict(facts.value("probe.context"))
    attempts, failures = as_int(p.get("attempts")), as_int(p.get("failures"))
    if not attempts:
        return
    errors = []
    for e in as_list(p.get("errors")):  # strings, or {"error", "count"} from older collectors
        text = e.get("error") if isinstance(e, dict) else e
        if text:
            first = str(text).strip().splitlines()[0] if str(text).strip() else str(text)
            errors.append(first + (f" (x{e['count']})" if isinstance(e, dict) and e.get("count") else ""))
    evidence = [ev(facts, "probe.context", f"{failures or 0}/{attempts} failed" + (f"; first: {errors[0]}" if errors else ""))]
    if not failures:
        yield finding("FWK003", L, Severity.INFO, Confidence.HIGH, f"CUDA contexts created {attempts}/{attempts} times",
                      "nothing to do", None, evidence)
        return
    full = _gpu_nearly_full(facts)
    yield finding("FWK003", L, Severity.CRITICAL if failures == attempts else Severity.ERROR, Confidence.HIGH,
                  f"CUDA context creation failed {failures} of {attempts} times"
                  + (" (the GPU is nearly full)" if full else " while the GPU has free memory"),
                  "free the GPU: find the holder with `nvidia-smi --query-compute-apps=pid,process_name,used_memory "
                  "--format=csv` (SHR010 names it when visible) and stop it, or run on another GPU" if full else
                  "check the driver/kernel pair (DRV002/DRV003), the sharing layer (SHR003/SHR004), `dmesg | grep -E 'NVRM|Xid'`; "
                  "retry on a node with a validated kernel",
                  Category.OTHER_PROCESS if full else Category.CONTEXT_OR_DRIVER, evidence)


@check("FWK004", L, "A small allocation fails after the context (probe)")
def probe_alloc(facts: FactSet) -> Iterator[Finding]:
    """After a context exists, the probe allocates a small tensor; a failure there with memory free means
    the allocation path itself is broken (sharing-layer limit, driver): cudaErrorMemoryAllocation = 2 with
    room on the device. Source: environment-facts.md 4, 9 [CUDAERR][HAMICORE].
    """
    p = as_dict(facts.value("probe.alloc"))
    if not p or p.get("ok") is not False:
        return
    full = _gpu_nearly_full(facts)
    yield finding("FWK004", L, Severity.ERROR, Confidence.HIGH,
                  f"A small CUDA allocation failed after context creation: {short(p.get('error'), 100)}",
                  "see the sharing-layer and driver findings; retry with the sharing hook disabled",
                  Category.OTHER_PROCESS if full else Category.CONTEXT_OR_DRIVER, [ev(facts, "probe.alloc")])


@check("FWK005", L, "Large per-process CUDA context")
def context_size(facts: FactSet) -> Iterator[Finding]:
    """Every process that touches CUDA pays for a context outside PyTorch's allocator (~250-500 MiB with
    lazy loading, >1000 MiB before CUDA 11.7); with many ranks or workers per GPU it adds up. Source:
    memory-tools-and-papers.md section 5.
    """
    b = as_int(facts.value("probe.context_bytes"))
    if b is not None and b >= 1024**3:
        yield finding("FWK005", L, Severity.WARNING, Confidence.HIGH, f"A CUDA context takes {mib(b)} here",
                      "keep one CUDA process per GPU; make sure CUDA_MODULE_LOADING is unset or LAZY; never touch CUDA "
                      "in DataLoader workers", Category.TRUE_CAPACITY, [ev(facts, "probe.context_bytes", mib(b))])


@check("FWK006", L, "PyTorch's caching allocator is disabled")
def no_caching(facts: FactSet) -> Iterator[Finding]:
    """PYTORCH_NO_CUDA_MEMORY_CACHING=1 sends every allocation to cudaMalloc/cudaFree: meant for
    debugging (compute-sanitizer), much slower, and memory statistics no longer mean the usual thing.
    Source: memory-tools-and-papers.md 4.4.
    """
    if truthy(facts.value("torch.no_caching")):
        yield finding("FWK006", L, Severity.WARNING, Confidence.HIGH,
                      "PYTORCH_NO_CUDA_MEMORY_CACHING is set: the caching allocator is off",
                      "unset PYTORCH_NO_CUDA_MEMORY_CACHING outside debugging sessions", None, [ev(facts, "torch.no_caching")])
