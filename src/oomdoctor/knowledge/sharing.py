"""GPU sharing layers and what a process inside them sees (environment-facts.md section 4).

`hooks_nvml`: the layer virtualises NVML too, so nvidia-smi inside the container shows the slice, not
the card. `limit_is_enforced`: allocations beyond the share fail with an OOM while the card has room.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SharingLayer:
    key: str
    name: str
    signals: str
    memory_view: str
    hooks_nvml: bool
    limit_is_enforced: bool
    source: str


LAYERS: dict[str, SharingLayer] = {s.key: s for s in (
    SharingLayer("mig", "NVIDIA MIG", "MIG mode Enabled, MIG-<uuid> device names, nvidia.com/mig-* resources",
                 "cudaMemGetInfo and torch show the instance size", False, True,
                 "https://docs.nvidia.com/datacenter/tesla/mig-user-guide/mig-device-names.html [MIGNAMES]"),
    SharingLayer("mps", "NVIDIA MPS", "CUDA_MPS_PIPE_DIRECTORY, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, <pipe>/control",
                 "NVML shows the full GPU; the pinned limit is enforced at allocation", False, True,
                 "https://docs.nvidia.com/deploy/mps/latest/appendix-environment-variables.html [MPSENV]"),
    SharingLayer("hami", "HAMi (HAMi-core / libvgpu)", "CUDA_DEVICE_MEMORY_LIMIT[_i], libvgpu.so in /etc/ld.so.preload",
                 "hooks CUDA and NVML: nvidia-smi and cudaMemGetInfo show the limit", True, True,
                 "Project-HAMi/HAMi-core README [HAMICORE]"),
    SharingLayer("vcuda", "tkestack gpu-manager / vcuda", "/etc/vcuda/vcuda.config, vcuda.sock, tencent.com/vcuda-memory",
                 "hooks CUDA (and NVML via nvml-helper): total = vcuda-memory x 256 MiB", True, True,
                 "tkestack/gpu-manager README [TKEGM]; vcuda-controller hijack.h [TKEHIJ]"),
    SharingLayer("cgpu", "Aliyun cGPU / gpushare", "ALIYUN_COM_GPU_MEM_CONTAINER / _DEV / _UNIT",
                 "with cGPU isolation nvidia-smi shows the share; plain gpushare only advises", True, True,
                 "AliyunContainerService/gpushare-scheduler-extender docs [ALIGS]; ACK cGPU docs [ALICGPU]"),
    SharingLayer("runai", "Run:ai / KAI GPU fractions", "GPU_PORTION, RUNAI_NUM_OF_GPUS",
                 "legacy engine virtualises memory (unverified); v3.0 uses MPS/dmem", False, True,
                 "kai-scheduler gpusharing [KAIGS]; Run:ai fractions migration doc [RUNAIMIG]"),
    SharingLayer("vgpu", "NVIDIA vGPU (VM guest)", "NVML virtualization mode VGPU",
                 "the guest sees only the vGPU profile's framebuffer", False, True,
                 "NVML GRID enums https://docs.nvidia.com/deploy/nvml-api/group__nvmlGridEnums.html [NVMLVIRT]"),
    SharingLayer("timeslicing", "Kubernetes time-slicing", "nvidia.com/gpu.shared resources, sharing.timeSlicing replicas",
                 "full physical memory, no isolation: co-tenants can take it all", False, False,
                 "NVIDIA/k8s-device-plugin README, Shared Access to GPUs [K8SDP]"),
)}

# Libraries known to be GPU sharing hooks when preloaded.
KNOWN_PRELOAD_HOOKS: tuple[tuple[str, str], ...] = (
    ("libvgpu", "hami"), ("vgpu", "hami"), ("libcuda-control", "vcuda"), ("vcuda", "vcuda"),
    ("cgpu", "cgpu"), ("runai", "runai"),
)

# tkestack vcuda hooks only up to this CUDA [TKEVC].
VCUDA_MAX_CUDA = (11, 5)
VCUDA_MEMORY_UNIT = 256 * 1024**2
