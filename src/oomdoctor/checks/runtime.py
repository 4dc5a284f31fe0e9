"""Runtime layer: container toolkit variables, device nodes, CUDA_VISIBLE_DEVICES vs devices seen."""

from __future__ import annotations

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
    ev,
    finding,
    gpus,
)
from oomdoctor.checks.registry import check
from oomdoctor.knowledge.cuda_driver import runtime_on_driver

L = Layer.RUNTIME
NCT = "https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/docker-specialized.html [NCT]"


def _in_container(facts: FactSet) -> bool:
    c = str(facts.value("runtime.container") or "none").lower()
    return c not in ("none", "", "bare", "bare_metal", "host")


@check("RUN001", L, "CUDA_VISIBLE_DEVICES does not match the devices")
def cuda_visible_devices(facts: FactSet) -> Iterator[Finding]:
    """CUDA_VISIBLE_DEVICES selects and renumbers GPUs for CUDA. An index beyond the GPUs present, an
    empty value or `-1` hides every GPU ("no CUDA GPUs are available" / invalid device ordinal), and a
    list shorter than the GPUs present makes `cuda:N` point at a different card than nvidia-smi's N.
    Source: environment-facts.md 5c and CUDA environment variables [CUDAENV].
    """
    cvd = facts.value("runtime.cuda_visible_devices")
    if cvd is None or not facts.has("runtime.cuda_visible_devices"):
        return
    n = as_int(facts.value("driver.gpu_count"))
    if n is None and gpus(facts):
        n = len(gpus(facts))
    entries = [e.strip() for e in str(cvd).split(",") if e.strip()]
    evidence = [ev(facts, "runtime.cuda_visible_devices")] + ([ev(facts, "driver.gpu_count")] if facts.has("driver.gpu_count") else [])
    if not entries or entries[0] in ("-1", "none", "NoDevFiles"):
        yield finding("RUN001", L, Severity.ERROR, Confidence.HIGH,
                      f"CUDA_VISIBLE_DEVICES={cvd!r} hides every GPU from CUDA",
                      "unset CUDA_VISIBLE_DEVICES or set it to the GPUs the job should use, e.g. CUDA_VISIBLE_DEVICES=0",
                      Category.CONTEXT_OR_DRIVER, evidence)
        return
    idx = [int(e) for e in entries if e.isascii() and e.isdigit()]
    if n is not None and any(i >= n for i in idx):
        bad = [i for i in idx if i >= n]
        yield finding("RUN001", L, Severity.ERROR, Confidence.HIGH,
                      f"CUDA_VISIBLE_DEVICES={cvd} names GPU {bad[0]} but only {n} GPU(s) are visible",
                      f"use indices 0..{n - 1} (inside a container the GPUs are renumbered from 0) or GPU UUIDs "
                      "from `nvidia-smi -L`", Category.CONTEXT_OR_DRIVER, evidence)
    td = as_int(facts.value("torch.device_count"))
    if td is not None and n is not None and td < min(n, len(entries)):
        yield finding("RUN001", L, Severity.WARNING, Confidence.MEDIUM,
                      f"PyTorch sees {td} GPU(s) although CUDA_VISIBLE_DEVICES={cvd} and the driver reports {n}",
                      "check the values (UUIDs must match `nvidia-smi -L` exactly) and that CUDA initialises "
                      "(`python -c 'import torch; print(torch.cuda.device_count())'`)", Category.CONTEXT_OR_DRIVER,
                      evidence + [ev(facts, "torch.device_count")])


@check("RUN002", L, "NVIDIA_DRIVER_CAPABILITIES lacks compute")
def driver_capabilities(facts: FactSet) -> Iterator[Finding]:
    """The NVIDIA Container Toolkit mounts libcuda only with the `compute` capability; `utility` alone
    (the default when the variable is empty) gives nvidia-smi but "no CUDA driver" to PyTorch.
    Source: environment-facts.md 5c [NCT].
    """
    caps = facts.value("runtime.nvidia_driver_capabilities")
    if caps is None or not _in_container(facts):
        return
    items = {c.strip().lower() for c in str(caps).split(",") if c.strip()}
    if "all" in items or "compute" in items:
        return
    yield finding("RUN002", L, Severity.ERROR, Confidence.HIGH,
                  f"NVIDIA_DRIVER_CAPABILITIES={caps!r} has no 'compute': libcuda is not mounted into the container",
                  "set NVIDIA_DRIVER_CAPABILITIES=compute,utility (docker: -e, k8s: env of the container)",
                  Category.CONTEXT_OR_DRIVER, [ev(facts, "runtime.nvidia_driver_capabilities")])


@check("RUN003", L, "NVIDIA_VISIBLE_DEVICES gives the container no GPU")
def visible_devices(facts: FactSet) -> Iterator[Finding]:
    """NVIDIA_VISIBLE_DEVICES=none mounts the driver but no GPU; void / empty behaves like plain runc
    (no GPU, no driver). A GPU job then fails at CUDA initialisation. Source: environment-facts.md 5c [NCT].
    """
    nvd = facts.value("runtime.nvidia_visible_devices")
    if nvd is None or not facts.has("runtime.nvidia_visible_devices") or not _in_container(facts):
        return
    if str(nvd).strip().lower() in ("none", "void", ""):
        yield finding("RUN003", L, Severity.WARNING, Confidence.HIGH,
                      f"NVIDIA_VISIBLE_DEVICES={nvd!r}: the container gets no GPU",
                      "request GPUs (docker --gpus all / k8s resources.limits nvidia.com/gpu: 1) instead of overriding "
                      "NVIDIA_VISIBLE_DEVICES", Category.CONTEXT_OR_DRIVER, [ev(facts, "runtime.nvidia_visible_devices")])


@check("RUN004", L, "GPU device nodes missing")
def dev_nodes(facts: FactSet) -> Iterator[Finding]:
    """CUDA needs /dev/nvidiactl, /dev/nvidia<N> and /dev/nvidia-uvm; without nvidia-uvm cuInit fails
    even though nvidia-smi works. Source: environment-facts.md 5c [HAMICORE][PROCPARSE].
    """
    if not facts.has("runtime.dev_nodes"):
        return
    nodes = {str(n).replace("/dev/", "") for n in as_list(facts.value("runtime.dev_nodes"))}
    expect_gpu = bool(gpus(facts)) or bool(facts.value("driver.version"))
    if not expect_gpu:
        return
    missing = [n for n in ("nvidiactl", "nvidia-uvm") if n not in nodes]
    if not any(n.startswith("nvidia") and n[6:].isascii() and n[6:].isdigit() for n in nodes):
        missing.append("nvidia<N>")
    if missing:
        yield finding("RUN004", L, Severity.ERROR, Confidence.MEDIUM,
                      f"GPU device node(s) missing: {', '.join('/dev/' + m for m in missing)}",
                      "on the host run `sudo modprobe nvidia-uvm && sudo nvidia-modprobe -u -c=0`; start the container "
                      "through the NVIDIA runtime (docker --gpus all, k8s device plugin)", Category.CONTEXT_OR_DRIVER,
                      [ev(facts, "runtime.dev_nodes")])


@check("RUN005", L, "The image's NVIDIA_REQUIRE_CUDA is above the driver")
def require_cuda(facts: FactSet) -> Iterator[Finding]:
    """CUDA images set NVIDIA_REQUIRE_CUDA (e.g. `cuda>=12.8 …`); the toolkit refuses to start the
    container on an older driver ("unsatisfied condition: cuda>=12.8"). With NVIDIA_DISABLE_REQUIRE the
    container starts and the failure moves to CUDA initialisation. Source: environment-facts.md 1e, 5c [NCT][REQERR].
    """
    req = facts.value("runtime.nvidia_require_cuda")
    if not req:
        return
    import re

    m = re.search(r"cuda>=\s*(\d+\.\d+)", str(req))
    if not m:
        return
    c = runtime_on_driver(m.group(1), facts.value("driver.version"), facts.value("cuda.driver_max"))
    if c.status == "too_old":
        disabled = str(facts.value("runtime.nvidia_disable_require") or "").lower() in ("true", "1")
        yield finding("RUN005", L, Severity.ERROR if disabled else Severity.WARNING, Confidence.HIGH,
                      f"The image requires CUDA >= {m.group(1)} but the driver supports {c.driver_max and '.'.join(map(str, c.driver_max))}"
                      + (" (NVIDIA_DISABLE_REQUIRE skips the start-up check)" if disabled else ""),
                      f"upgrade the driver to >= {c.needed or c.mvc_min}, or use an image built for the driver's CUDA",
                      Category.CONTEXT_OR_DRIVER, [ev(facts, "runtime.nvidia_require_cuda")])
