"""GPU sharing layers (environment-facts §4): MIG, MPS, HAMi, tkestack vcuda, Aliyun cGPU, Run:ai,
vGPU, preloaded libraries, and the processes holding GPU memory.

Each layer's fact is None when none of its signals is present (a fact: "not there"), or a dict of
what was seen. The checks decide what it means. In a bundle without proc/self/environ no signal
proves nothing: such layers are Unavailable (container.unproven), never "not there".
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from oomdoctor.collectors.container import env_source, unproven
from oomdoctor.collectors.context import CollectContext
from oomdoctor.facts import Fact, Unavailable
from oomdoctor.facts.base import Entry
from oomdoctor.parsers.gpu_snapshot import GpuSnapshot

_HAMI_SIZE = re.compile(r"^\s*(\d+)\s*([kKmMgG]?)[iI]?[bB]?\s*$")
VCUDA_FILES = ("etc/vcuda/vcuda.config", "etc/vcuda/pids.config", "etc/vcuda/vcuda.sock",
               "usr/local/nvidia/bin/gpu-client", "usr/local/nvidia/lib64/libcuda-control.so")
HAMI_FILES = ("usr/local/vgpu/libvgpu.so", "tmp/vgpulock")
# In a bundle's MPS pipe directory: the daemon's pid file and socket were there but nothing answered (bundle_write).
MPS_GONE_MARKER = "oomdoctor-mps-daemon-gone"


def hami_size(text: str) -> int | None:
    """HAMi-core limit syntax: '4096m', '4g', '1024k' or plain bytes."""
    m = _HAMI_SIZE.match(text or "")
    if not m:
        return None
    return int(m.group(1)) * {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}[m.group(2).lower()]


def collect_sharing(ctx: CollectContext) -> list[Entry]:
    snap = ctx.gpu_snapshot()
    return [
        _mig(ctx, snap), _mps(ctx), _hami(ctx), _vcuda(ctx), _cgpu(ctx), _runai(ctx),
        _vgpu(snap), _ld_preload(ctx), _processes(ctx, snap),
    ]


def _mig(ctx: CollectContext, snap: GpuSnapshot) -> Entry:
    visible = " ".join(filter(None, (ctx.env.get("CUDA_VISIBLE_DEVICES"), ctx.env.get("NVIDIA_VISIBLE_DEVICES"))))
    env_mig = "MIG-" in visible
    if not snap.ok:
        if env_mig:
            return Fact("sharing.mig", [{"gpu": None, "current": "Enabled", "pending": None, "instances": [],
                                         "visible_devices": visible}], env_source(ctx))
        return Unavailable("sharing.mig", snap.error or "no GPU information", snap.source)
    out: list[dict[str, Any]] = []
    for gpu in snap.gpus:
        name_mig = " MIG " in f" {gpu.get('name') or ''} "
        if gpu.get("mig_current") in ("Enabled", "Disabled") or name_mig:
            out.append({"gpu": gpu["index"], "current": "Enabled" if name_mig else gpu.get("mig_current"),
                        "pending": gpu.get("mig_pending"), "instances": gpu.get("mig_devices") or []})
    if env_mig and not any(e["current"] == "Enabled" for e in out):
        out.append({"gpu": None, "current": "Enabled", "pending": None, "instances": [], "visible_devices": visible})
    return Fact("sharing.mig", out, snap.source)


def mps_pipe_dir(env: Mapping[str, str]) -> str:
    """The MPS pipe directory, relative to the root: CUDA_MPS_PIPE_DIRECTORY or where every CUDA process looks."""
    return (env.get("CUDA_MPS_PIPE_DIRECTORY") or "/tmp/nvidia-mps").lstrip("/")


def mps_daemon(ctx: CollectContext) -> str | None:
    """"running", "gone" or None (no daemon's files). One reading for `_mps` and the bundle writer.

    A running control daemon has its pid file in the pipe directory and removes it on `quit`; its control
    socket stays behind (H200, session 15: validation/doctor_mps_gpu.py), so the socket alone is no daemon.
    A daemon killed without `quit` (SIGKILL, a node's OOM killer, a crashed device-plugin pod) leaves its pid
    file too, and its socket refuses connections (H100, session 16: validation/mps_killed_daemon_gpu.py). Asked
    through the socket, not /proc/<pid>: under the Kubernetes MPS device plugin the daemon's pid belongs to
    another container's namespace. Bundles: the socket's marker beside the pid file's (older bundles: the
    socket's alone, as before), or MPS_GONE_MARKER."""
    pipe_dir = mps_pipe_dir(ctx.env)
    if ctx.bundle:
        if ctx.exists(f"{pipe_dir}/{MPS_GONE_MARKER}"):
            return "gone"
        found = ctx.exists(f"{pipe_dir}/nvidia-cuda-mps-control.pid") or ctx.exists(f"{pipe_dir}/control")
        return "running" if found else None
    if not ctx.exists(f"{pipe_dir}/nvidia-cuda-mps-control.pid"):
        return None
    return "gone" if ctx.socket_answers(f"{pipe_dir}/control") is False else "running"


def _mps(ctx: CollectContext) -> Entry:
    env = ctx.env
    pipe = env.get("CUDA_MPS_PIPE_DIRECTORY")
    pipe_dir = mps_pipe_dir(env)
    daemon = mps_daemon(ctx)
    control, dead = daemon == "running", daemon == "gone"
    mps_env = {k: v for k, v in env.items() if k.startswith("CUDA_MPS_")}
    if not mps_env and not control and not dead:
        if ctx.env_missing:
            return unproven(ctx, "sharing.mps", "CUDA_MPS_* variables unknown")
        stale = "; a control socket left by a daemon that has exited" if ctx.exists(f"{pipe_dir}/control") else ""
        return Fact("sharing.mps", None, f"{env_source(ctx)}; {ctx.label(pipe_dir)}{stale}")
    return Fact("sharing.mps", {
        "pipe_directory": pipe, "pinned_device_mem_limit": env.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"),
        "active_thread_percentage": env.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"),
        "control_present": control, "daemon_gone": dead, "env": sorted(mps_env)},
        env_source(ctx) + ("; its daemon's pid file and socket are left but the daemon no longer answers" if dead else ""))


def _preloaded(ctx: CollectContext) -> tuple[list[str], list[str]]:
    text, _ = ctx.read_text("etc/ld.so.preload", limit=65536)
    file_libs = [t for t in (text or "").split() if not t.startswith("#")] if text else []
    env_libs = [t for t in re.split(r"[\s:]+", ctx.env.get("LD_PRELOAD", "")) if t]
    return file_libs, env_libs


def _hami(ctx: CollectContext) -> Entry:
    env = ctx.env
    # (an empty value sets nothing: a shell that blanks the variable has no HAMi limit)
    limits = {k: v for k, v in env.items() if re.fullmatch(r"CUDA_DEVICE_MEMORY_LIMIT(_\d+)?", k) and v.strip()}
    file_libs, env_libs = _preloaded(ctx)
    preload = [lib for lib in file_libs + env_libs if "vgpu" in lib.lower()]
    libvgpu = ctx.exists("usr/local/vgpu/libvgpu.so")
    other = {k: env[k] for k in ("CUDA_DEVICE_SM_LIMIT", "CUDA_DEVICE_MEMORY_SHARED_CACHE", "CUDA_OVERSUBSCRIBE",
                                 "GPU_CORE_UTILIZATION_POLICY", "CUDA_DISABLE_CONTROL") if env.get(k, "").strip()}
    if not limits and not preload and not libvgpu and not other:
        if ctx.env_missing:
            return unproven(ctx, "sharing.hami", "CUDA_DEVICE_MEMORY_LIMIT and LD_PRELOAD unknown")
        return Fact("sharing.hami", None, f"{env_source(ctx)}; {ctx.label('etc/ld.so.preload')}")
    per_device = {k.rsplit("_", 1)[1]: hami_size(v) for k, v in limits.items() if k[-1].isdigit()}
    return Fact("sharing.hami", {
        "memory_limit": hami_size(limits.get("CUDA_DEVICE_MEMORY_LIMIT", "")),
        "memory_limit_raw": limits.get("CUDA_DEVICE_MEMORY_LIMIT"),
        "memory_limits": per_device,
        "sm_limit": other.get("CUDA_DEVICE_SM_LIMIT"),
        "libvgpu": libvgpu, "preload": preload,
        "shared_cache": other.get("CUDA_DEVICE_MEMORY_SHARED_CACHE"),
        "oversubscribe": other.get("CUDA_OVERSUBSCRIBE"),
        "disabled": other.get("CUDA_DISABLE_CONTROL"),
    }, f"{env_source(ctx)}; {ctx.label('usr/local/vgpu')}")


def _vcuda(ctx: CollectContext) -> Entry:
    present = [f"/{rel}" for rel in VCUDA_FILES if ctx.exists(rel)]
    if not present:
        if ctx.env_missing:
            return unproven(ctx, "sharing.vcuda", "no /etc/vcuda files, but a missing marker proves nothing here")
        return Fact("sharing.vcuda", None, ctx.label("etc/vcuda"))
    config, _ = ctx.read_bytes("etc/vcuda/vcuda.config", limit=1 << 20)
    return Fact("sharing.vcuda", {
        "config": "/etc/vcuda/vcuda.config" if "/etc/vcuda/vcuda.config" in present else None,
        "config_bytes": len(config) if config is not None else None,
        "pids_config": "/etc/vcuda/pids.config" in present,
        "socket": "/etc/vcuda/vcuda.sock" in present,
        "client": "/usr/local/nvidia/bin/gpu-client" in present,
        "files": present, "logger_level": ctx.env.get("LOGGER_LEVEL"),
    }, ctx.label("etc/vcuda"))


def _cgpu(ctx: CollectContext) -> Entry:
    env = {k: v for k, v in ctx.env.items() if k.startswith("ALIYUN_COM_GPU_")}
    if not env:
        if ctx.env_missing:
            return unproven(ctx, "sharing.cgpu", "ALIYUN_COM_GPU_* variables unknown")
        return Fact("sharing.cgpu", None, env_source(ctx))
    return Fact("sharing.cgpu", {
        "dev_mem": env.get("ALIYUN_COM_GPU_MEM_DEV"), "container_mem": env.get("ALIYUN_COM_GPU_MEM_CONTAINER"),
        "unit": env.get("ALIYUN_COM_GPU_MEM_UNIT"), "idx": env.get("ALIYUN_COM_GPU_MEM_IDX"),
        "visible_devices": env.get("ALIYUN_COM_GPU_VISIBLE_DEVICES"), "env": sorted(env)}, env_source(ctx))


def _runai(ctx: CollectContext) -> Entry:
    env = ctx.env
    if "GPU_PORTION" not in env and "RUNAI_NUM_OF_GPUS" not in env:
        if ctx.env_missing:
            return unproven(ctx, "sharing.runai", "GPU_PORTION and RUNAI_NUM_OF_GPUS unknown")
        return Fact("sharing.runai", None, env_source(ctx))
    return Fact("sharing.runai", {"gpu_portion": env.get("GPU_PORTION"), "num_gpus": env.get("RUNAI_NUM_OF_GPUS")},
                env_source(ctx))


def _vgpu(snap: GpuSnapshot) -> Entry:
    if not snap.ok:
        return Unavailable("sharing.vgpu", snap.error or "no GPU information", snap.source)
    return Fact("sharing.vgpu", [{"gpu": g["index"], "mode": g.get("virtualization_mode")} for g in snap.gpus],
                snap.source)


def _ld_preload(ctx: CollectContext) -> Entry:
    file_libs, env_libs = _preloaded(ctx)
    seen: list[str] = []
    for lib in file_libs + env_libs:
        if lib not in seen:
            seen.append(lib)
    if ctx.env_missing:
        if not seen:
            return unproven(ctx, "sharing.ld_preload", "LD_PRELOAD unknown")
        return Fact("sharing.ld_preload", seen, f"{ctx.label('etc/ld.so.preload')} (LD_PRELOAD unknown: {ctx.env_missing})")
    return Fact("sharing.ld_preload", seen, f"{ctx.label('etc/ld.so.preload')}; LD_PRELOAD")


def _processes(ctx: CollectContext, snap: GpuSnapshot) -> Entry:
    if not snap.ok:
        return Unavailable("sharing.processes", snap.error or "no GPU information", snap.source)
    out = []
    for p in snap.processes:
        name = p.get("name") or (_process_name(p["pid"]) if not ctx.bundle else None)
        out.append({"gpu": p["gpu"], "pid": p["pid"], "used_bytes": p.get("used_bytes"), "name": name,
                    "self": p["pid"] in ctx.self_pids})
    return Fact("sharing.processes", out, snap.source)


def _process_name(pid: int) -> str | None:
    """Live only; NVML PIDs are host PIDs, so inside a container most will not resolve."""
    try:
        import psutil

        proc = psutil.Process(pid)
        cmd = " ".join(" ".join(proc.cmdline()[:3]).split())  # `python -c "<script>"` spans lines
        return cmd[:120] or proc.name()
    except Exception:  # noqa: BLE001 - no such pid in our namespace, or no permission
        return None
