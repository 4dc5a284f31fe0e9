"""Driver and CUDA layers: driver version and flavour, per-GPU health, the CUDA versions that must agree.

Driver's max CUDA comes from NVML (`nvmlSystemGetCudaDriverVersion_v2`) or `<cuda_version>`; only
when neither answered is it derived from the driver branch table (source says "derived").
"""

from __future__ import annotations

import json
import re

from oomdoctor.collectors.container import env_fact, env_source, unproven
from oomdoctor.collectors.context import CollectContext
from oomdoctor.facts import Fact, Unavailable
from oomdoctor.facts.base import Entry
from oomdoctor.knowledge.cuda_driver import branch_max_cuda
from oomdoctor.parsers.nvidia_version import parse_driver_version_file, parse_sys_module_version

_TOOLKIT_TXT = re.compile(r"CUDA Version\s+(\d+\.\d+(?:\.\d+)?)")
_CUDA_DIR = re.compile(r"^cuda(?:-\d+(?:\.\d+)?)?$")
_COMPAT_LIB = re.compile(r"^libcuda\.so\.\d+\.\d+(?:\.\d+)?$")  # the versioned file, not the .so.1 link


def collect_driver(ctx: CollectContext) -> list[Entry]:
    snap = ctx.gpu_snapshot()
    text, why = ctx.read_text("proc/driver/nvidia/version", limit=65536)
    proc_src = ctx.label("proc/driver/nvidia/version")
    file_version, flavour = parse_driver_version_file(text) if text is not None else (None, None)
    if file_version is None and not ctx.bundle:
        sys_text, _ = ctx.read_text("sys/module/nvidia/version", limit=256)
        file_version = parse_sys_module_version(sys_text) if sys_text else None
    out: list[Entry] = []
    if snap.driver_version:
        out.append(Fact("driver.version", snap.driver_version, snap.source))
    elif file_version:
        out.append(Fact("driver.version", file_version, proc_src))
    else:
        out.append(Unavailable("driver.version", snap.error or why or "no NVRM version line", snap.source))
    out.append(Fact("driver.flavour", flavour, proc_src) if flavour
               else Unavailable("driver.flavour", why or "no 'Kernel Module' in the version line", proc_src))
    nvml_error = snap.nvml_error or (snap.error if snap.source == "NVML" else None)
    if ctx.bundle and nvml_error is None and "nvml_error" not in ctx.meta:
        # `oomdoctor bundle` records NVML's answer in meta.json; without the key it is not known
        out.append(Unavailable("driver.nvml_error", "no nvml_error in bundle:meta.json", ctx.label("meta.json")))
    else:
        # in a bundle the answer is the one NVML gave where the bundle was made, as meta.json keeps it: the
        # evidence names that file, not "NVML" (read as this machine's NVML; walkthrough, session 26)
        src = f"{ctx.label('meta.json')} (NVML where the bundle was made)" if ctx.bundle else "NVML"
        out.append(Fact("driver.nvml_error", nvml_error, src))
    if snap.ok:
        out.append(Fact("driver.gpus", snap.gpus, snap.source))
        out.append(Fact("driver.gpu_count", len(snap.gpus), snap.source))
        names = sorted({g["name"] for g in snap.gpus if g.get("name")})
        out.append(Fact("driver.gpu_names", names, snap.source))
    else:
        for key in ("driver.gpus", "driver.gpu_count", "driver.gpu_names"):
            out.append(Unavailable(key, snap.error or "no GPU information", snap.source))
    return out


def collect_cuda(ctx: CollectContext) -> list[Entry]:
    snap = ctx.gpu_snapshot()
    out: list[Entry] = []
    if snap.cuda_driver_version:
        out.append(Fact("cuda.driver_max", snap.cuda_driver_version, snap.source))
    else:
        driver = snap.driver_version
        if driver is None:
            text, _ = ctx.read_text("proc/driver/nvidia/version", limit=65536)
            driver = parse_driver_version_file(text)[0] if text else None
        mm = branch_max_cuda(driver)
        derived = f"{mm[0]}.{mm[1]}" if mm else None
        out.append(Fact("cuda.driver_max", derived, f"derived from driver {driver} (branch table)") if derived
                   else Unavailable("cuda.driver_max", snap.error or "driver version unknown", snap.source))
    out.append(_image_toolkit(ctx))
    out.append(_compat_libs(ctx))
    caps = [g.get("capability") for g in snap.gpus] if snap.ok else []
    if caps and all(caps):
        out.append(Fact("cuda.device_capabilities", caps, snap.source))
    else:
        out.append(Unavailable("cuda.device_capabilities", snap.error or "the driver did not report it", snap.source))
    out.append(env_fact(ctx, "cuda.module_loading", ctx.env.get("CUDA_MODULE_LOADING")))
    return out


def _image_toolkit(ctx: CollectContext) -> Entry:
    text, _ = ctx.read_text("usr/local/cuda/version.json", limit=1 << 20)
    if text is not None:
        try:
            version = json.loads(text).get("cuda", {}).get("version")
            if isinstance(version, str):
                return Fact("cuda.image_toolkit", version, ctx.label("usr/local/cuda/version.json"))
        except (ValueError, AttributeError, RecursionError):
            pass
    text, _ = ctx.read_text("usr/local/cuda/version.txt", limit=4096)
    m = _TOOLKIT_TXT.search(text or "")
    if m:
        return Fact("cuda.image_toolkit", m.group(1), ctx.label("usr/local/cuda/version.txt"))
    if ctx.env.get("CUDA_VERSION"):
        return Fact("cuda.image_toolkit", ctx.env["CUDA_VERSION"], f"CUDA_VERSION in {env_source(ctx)}")
    if ctx.env_missing:
        return unproven(ctx, "cuda.image_toolkit", "CUDA_VERSION unknown and no usr/local/cuda/version.json|txt")
    return Fact("cuda.image_toolkit", None, "no /usr/local/cuda/version.json|txt, no CUDA_VERSION")


def _compat_libs(ctx: CollectContext) -> Entry:
    found = []
    for d in ctx.listdir("usr/local") or []:
        if _CUDA_DIR.match(d):
            for name in ctx.listdir(f"usr/local/{d}/compat") or []:
                if _COMPAT_LIB.match(name):
                    found.append(f"/usr/local/{d}/compat/{name}")
    if not found and ctx.env_missing:
        return unproven(ctx, "cuda.compat_libs", "no compat markers, but a missing marker proves nothing here")
    return Fact("cuda.compat_libs", sorted(set(found)), ctx.label("usr/local/cuda*/compat"))
