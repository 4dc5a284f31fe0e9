"""GPU backends: NVML through nvidia-ml-py, `nvidia-smi -q -x` as a fallback, and a bundle's XML.

NVML is initialised lazily, only when a snapshot is asked for, and shut down afterwards: it creates
no CUDA context and keeps no GPU memory. Every per-device call is guarded, because "Not Supported"
is normal (MIG, vGPU, consumer cards) and must cost one field, not the whole report.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from oomdoctor.collectors.context import CommandRunner
from oomdoctor.parsers.gpu_snapshot import GpuSnapshot, cuda_version_from_int, empty_gpu
from oomdoctor.parsers.smi_xml import parse_smi_xml

SMI_TIMEOUT_S = 15.0
_COMPUTE_MODES = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}
_VIRT_MODES = {0: "None", 1: "Pass-Through", 2: "VGPU", 3: "Host VGPU", 4: "Host VSGA"}


class GpuBackend(Protocol):
    def snapshot(self) -> GpuSnapshot: ...


def _s(value: Any) -> Any:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value


class PynvmlBackend:
    """Real NVML. `module` is injectable so tests can pass a fake pynvml."""

    source = "NVML"

    def __init__(self, module: Any = None):
        self._module = module

    def _load(self) -> Any:
        if self._module is None:
            import pynvml  # lazy: importing is cheap, but keep `oomdoctor --help` free of it

            self._module = pynvml
        return self._module

    def describe_error(self, exc: BaseException) -> str:
        nv = self._module
        code = getattr(exc, "value", None)
        if nv is not None and code is not None:
            if code == getattr(nv, "NVML_ERROR_LIBRARY_NOT_FOUND", -1):
                return "NVML library not found (libnvidia-ml.so.1): no NVIDIA driver libraries here"
            if code == getattr(nv, "NVML_ERROR_DRIVER_NOT_LOADED", -1):
                return "NVIDIA kernel driver not loaded"
            if code == getattr(nv, "NVML_ERROR_LIB_RM_VERSION_MISMATCH", -1):
                return "Driver/library version mismatch (NVML library and kernel module versions differ)"
            if code == getattr(nv, "NVML_ERROR_NO_PERMISSION", -1):
                return "NVML: insufficient permissions (/dev/nvidiactl not accessible)"
        text = str(exc).strip() or type(exc).__name__
        return f"NVML: {text}"

    def snapshot(self) -> GpuSnapshot:
        try:
            nv = self._load()
        except ImportError as exc:
            return GpuSnapshot(self.source, error=f"nvidia-ml-py not installed ({exc})")
        try:
            nv.nvmlInit()
        except Exception as exc:  # noqa: BLE001 - every NVML failure is a fact, not a crash
            return GpuSnapshot(self.source, error=self.describe_error(exc))
        try:
            return self._read(nv)
        except Exception as exc:  # noqa: BLE001
            return GpuSnapshot(self.source, error=self.describe_error(exc))
        finally:
            try:
                nv.nvmlShutdown()
            except Exception:  # noqa: BLE001, S110 - shutdown failures change nothing for the report
                pass

    def _read(self, nv: Any) -> GpuSnapshot:
        def guard(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except Exception:  # noqa: BLE001
                return None

        snap = GpuSnapshot(self.source, driver_version=_s(guard(nv.nvmlSystemGetDriverVersion)))
        cuda = guard(getattr(nv, "nvmlSystemGetCudaDriverVersion_v2", nv.nvmlSystemGetCudaDriverVersion))
        if cuda is None:
            cuda = guard(nv.nvmlSystemGetCudaDriverVersion)
        snap.cuda_driver_version = cuda_version_from_int(cuda)
        count = nv.nvmlDeviceGetCount()
        for index in range(count):
            handle = guard(nv.nvmlDeviceGetHandleByIndex, index)
            if handle is None:
                snap.gpus.append(empty_gpu(index))
                continue
            snap.gpus.append(self._gpu(nv, guard, index, handle))
            procs = guard(getattr(nv, "nvmlDeviceGetComputeRunningProcesses", lambda h: None), handle) or []
            for p in procs:
                pid = getattr(p, "pid", None)
                if isinstance(pid, int):
                    used = getattr(p, "usedGpuMemory", None)
                    snap.processes.append({"gpu": index, "pid": pid,
                                           "used_bytes": used if isinstance(used, int) else None,
                                           "name": None, "type": "C",
                                           "gpu_instance_id": _valid_id(getattr(p, "gpuInstanceId", None))})
        return snap

    def _gpu(self, nv: Any, guard: Callable[..., Any], index: int, h: Any) -> dict[str, Any]:
        gpu = empty_gpu(index)
        gpu["name"] = _s(guard(nv.nvmlDeviceGetName, h))
        gpu["uuid"] = _s(guard(nv.nvmlDeviceGetUUID, h))
        pci = guard(nv.nvmlDeviceGetPciInfo, h)
        gpu["pci_bus_id"] = _s(getattr(pci, "busId", None)) if pci is not None else None
        mem_v2 = guard(nv.nvmlDeviceGetMemoryInfo, h, version=getattr(nv, "nvmlMemory_v2", 0x02000028))
        mem = mem_v2 or guard(nv.nvmlDeviceGetMemoryInfo, h)
        if mem is not None:
            gpu["memory_total_bytes"] = getattr(mem, "total", None)
            gpu["memory_used_bytes"] = getattr(mem, "used", None)
            gpu["memory_free_bytes"] = getattr(mem, "free", None)
            gpu["memory_reserved_bytes"] = getattr(mem, "reserved", None) if mem_v2 is not None else None
        persistence = guard(nv.nvmlDeviceGetPersistenceMode, h)
        gpu["persistence_mode"] = None if persistence is None else ("Enabled" if persistence else "Disabled")
        gpu["compute_mode"] = _COMPUTE_MODES.get(guard(nv.nvmlDeviceGetComputeMode, h))
        ecc = guard(nv.nvmlDeviceGetEccMode, h)
        if ecc:
            gpu["ecc_mode"] = "Enabled" if ecc[0] else "Disabled"
            gpu["ecc_uncorrected"] = guard(nv.nvmlDeviceGetTotalEccErrors, h,
                                           getattr(nv, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1),
                                           getattr(nv, "NVML_VOLATILE_ECC", 0))
        sbe = guard(nv.nvmlDeviceGetRetiredPages, h, 0)
        dbe = guard(nv.nvmlDeviceGetRetiredPages, h, 1)
        if sbe is not None or dbe is not None:
            gpu["retired_pages"] = len(sbe or []) + len(dbe or [])
        pending = guard(nv.nvmlDeviceGetRetiredPagesPendingStatus, h)
        gpu["retired_pending"] = None if pending is None else bool(pending)
        rows = guard(nv.nvmlDeviceGetRemappedRows, h)
        if rows and len(rows) >= 4:
            gpu["remapped_pending"] = bool(rows[2])
            gpu["remapped_failure"] = bool(rows[3])
        cap = guard(nv.nvmlDeviceGetCudaComputeCapability, h)
        gpu["capability"] = f"{cap[0]}.{cap[1]}" if cap and len(cap) == 2 else None
        mig = guard(nv.nvmlDeviceGetMigMode, h)
        if mig and len(mig) == 2:
            gpu["mig_current"] = "Enabled" if mig[0] else "Disabled"
            gpu["mig_pending"] = "Enabled" if mig[1] else "Disabled"
            if mig[0]:
                gpu["mig_devices"] = self._mig_devices(nv, guard, h)
        gpu["virtualization_mode"] = _VIRT_MODES.get(guard(nv.nvmlDeviceGetVirtualizationMode, h))
        return gpu

    def _mig_devices(self, nv: Any, guard: Callable[..., Any], h: Any) -> list[dict[str, Any]]:
        out = []
        for i in range(guard(nv.nvmlDeviceGetMaxMigDeviceCount, h) or 0):
            mh = guard(nv.nvmlDeviceGetMigDeviceHandleByIndex, h, i)
            if mh is None:
                continue
            mem = guard(nv.nvmlDeviceGetMemoryInfo, mh)
            out.append({"index": i, "name": _s(guard(nv.nvmlDeviceGetName, mh)),
                        "uuid": _s(guard(nv.nvmlDeviceGetUUID, mh)),
                        "gpu_instance_id": guard(nv.nvmlDeviceGetGpuInstanceId, mh),
                        "compute_instance_id": guard(nv.nvmlDeviceGetComputeInstanceId, mh),
                        "memory_total_bytes": getattr(mem, "total", None),
                        "memory_used_bytes": getattr(mem, "used", None)})
        return out


def _valid_id(value: Any) -> int | None:
    return value if isinstance(value, int) and 0 <= value < 0xFFFF else None


class SmiCommandBackend:
    """`nvidia-smi -q -x`, run with a time limit."""

    def __init__(self, runner: CommandRunner, timeout: float = SMI_TIMEOUT_S):
        self.runner = runner
        self.timeout = timeout
        self.last_xml: str | None = None

    def snapshot(self) -> GpuSnapshot:
        res = self.runner.run(["nvidia-smi", "-q", "-x"], timeout=self.timeout)
        if res.error:
            return GpuSnapshot("nvidia-smi -q -x", error=res.error)
        if res.returncode != 0:
            first = (res.stdout.strip() or res.stderr.strip() or f"exit {res.returncode}").splitlines()[0]
            return GpuSnapshot("nvidia-smi -q -x", error=f"nvidia-smi: {first[:200]}")
        self.last_xml = res.stdout
        return parse_smi_xml(res.stdout)


class LiveBackend:
    """NVML first; when NVML cannot be loaded at all, nvidia-smi's XML (keeping NVML's reason)."""

    def __init__(self, nvml: GpuBackend, smi: GpuBackend):
        self.nvml = nvml
        self.smi = smi

    def snapshot(self) -> GpuSnapshot:
        snap = self.nvml.snapshot()
        if snap.ok:
            return snap
        fallback = self.smi.snapshot()
        fallback.nvml_error = snap.error
        if not fallback.ok:
            fallback.error = f"{snap.error}; fallback {fallback.error}"
        return fallback


class BundleSmiBackend:
    """A bundle's `commands/nvidia-smi-q.xml`; never touches the local NVML."""

    def __init__(self, xml_text: str | None, missing_reason: str, nvml_error: str | None = None):
        self.xml_text = xml_text
        self.missing_reason = missing_reason
        self.nvml_error = nvml_error

    def snapshot(self) -> GpuSnapshot:
        if self.xml_text is None:
            snap = GpuSnapshot("bundle:commands/nvidia-smi-q.xml", error=self.missing_reason)
        else:
            snap = parse_smi_xml(self.xml_text)
            snap.source = "bundle:commands/nvidia-smi-q.xml"
        snap.nvml_error = self.nvml_error
        return snap
