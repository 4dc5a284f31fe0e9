"""The registry of fact names: the contract between collectors, checks, `diff` and `fleet`.

Every key belongs to exactly one layer. `weight` ranks how much a difference in this fact matters
for OOM when two machines are compared (100: kernel, driver; 1: timestamps). `fingerprint` marks
the facts that define a node's configuration for `fleet` grouping (versions and limits, not usage).
Values are JSON-compatible; sizes are integer bytes; versions are strings.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FactKey:
    name: str
    layer: str
    doc: str
    weight: int = 10
    fingerprint: bool = False


_K = FactKey

_KEYS: tuple[FactKey, ...] = (
    # --- resources: host RAM, cgroup limits, OOM counters, Kubernetes resources -------------------
    _K("host.name", "resources", "host name (node name in `fleet`)", 1),
    _K("host.mem_total_bytes", "resources", "MemTotal from /proc/meminfo", 30, True),
    _K("host.mem_available_bytes", "resources", "MemAvailable from /proc/meminfo", 10),
    _K("host.swap_total_bytes", "resources", "SwapTotal from /proc/meminfo", 5),
    _K("host.cpu_count", "resources", "logical CPUs visible", 5, True),
    _K("cgroup.version", "resources", "1 or 2 (from /proc/mounts)", 30, True),
    _K("cgroup.path", "resources", "the job's cgroup path (from /proc/self/cgroup)", 2),
    _K("cgroup.memory_limit_bytes", "resources", "memory.max / memory.limit_in_bytes (v2: a parent's when the job's own is max); null = unlimited", 70, True),
    _K("cgroup.memory_high_bytes", "resources", "memory.high (v2); null = unlimited", 30),
    _K("cgroup.memory_usage_bytes", "resources", "memory.current / memory.usage_in_bytes", 10),
    _K("cgroup.memory_peak_bytes", "resources", "memory.peak / memory.max_usage_in_bytes", 20),
    _K("cgroup.oom_events", "resources", "memory.events `oom` (v2): times the limit was hit", 60),
    _K("cgroup.oom_kill", "resources", "memory.events `oom_kill` / memory.oom_control `oom_kill`: processes killed", 80),
    _K("cgroup.cpu_limit_cores", "resources", "cpu.max quota/period; null = unlimited", 10, True),
    _K("kernel.oom_kills", "resources", "oom-killer lines in the kernel log: [{pid, comm, anon_rss_kb, file_rss_kb, shmem_rss_kb, memcg, line}]", 80),
    _K("k8s.containers", "resources", "containers of added manifests: [{pod, name, requests, limits, gpu, shm}]", 40),
    _K("k8s.terminations", "resources", "container terminations in added manifests: [{pod, container, reason, exit_code}]", 80),
    # --- runtime: container engine, NVIDIA Container Toolkit, device nodes ------------------------
    _K("runtime.container", "runtime", "docker | podman | kubernetes | container | none", 40, True),
    _K("runtime.kubernetes", "runtime", "KUBERNETES_SERVICE_HOST or a service-account token is present", 20, True),
    _K("runtime.dev_nodes", "runtime", "names of /dev/nvidia* device nodes", 40),
    _K("runtime.nvidia_visible_devices", "runtime", "NVIDIA_VISIBLE_DEVICES", 40),
    _K("runtime.nvidia_driver_capabilities", "runtime", "NVIDIA_DRIVER_CAPABILITIES", 30),
    _K("runtime.nvidia_require_cuda", "runtime", "NVIDIA_REQUIRE_CUDA (image constraint)", 20),
    _K("runtime.nvidia_disable_require", "runtime", "NVIDIA_DISABLE_REQUIRE", 20),
    _K("runtime.cuda_visible_devices", "runtime", "CUDA_VISIBLE_DEVICES", 40),
    _K("runtime.hypervisor", "runtime", "DMI sys_vendor / product when a hypervisor is seen", 20, True),
    _K("runtime.env_redacted", "runtime", "names of environment variables whose values were redacted", 1),
    # --- gpu_sharing: MIG, MPS, HAMi, vcuda, cGPU, Run:ai, vGPU, other processes ------------------
    _K("sharing.mig", "gpu_sharing", "[{gpu, current, pending, instances: [{name, uuid, memory_total_bytes}]}]", 70, True),
    _K("sharing.mps", "gpu_sharing", "{pipe_directory, pinned_device_mem_limit, active_thread_percentage, control_present, daemon_gone}", 70, True),
    _K("sharing.hami", "gpu_sharing", "{memory_limit, memory_limits, sm_limit, libvgpu, preload, shared_cache}", 80, True),
    _K("sharing.vcuda", "gpu_sharing", "tkestack gpu-manager: {config, pids_config, socket, client}", 80, True),
    _K("sharing.cgpu", "gpu_sharing", "Aliyun cGPU / gpushare env: {dev_mem, container_mem, unit, idx}", 70, True),
    _K("sharing.runai", "gpu_sharing", "Run:ai / KAI fraction env: {gpu_portion, num_gpus}", 70, True),
    _K("sharing.vgpu", "gpu_sharing", "NVML virtualization mode per GPU: [{gpu, mode}]", 60, True),
    _K("sharing.ld_preload", "gpu_sharing", "libraries from /etc/ld.so.preload and LD_PRELOAD", 60, True),
    _K("sharing.processes", "gpu_sharing", "compute processes on the GPUs: [{gpu, pid, used_bytes, name, self}]", 40),
    _K("sharing.k8s_resources", "gpu_sharing", "sharing resources requested in manifests (gpu.shared, gpumem, vcuda-memory, mig-*)", 50),
    # --- cuda: driver's max CUDA vs torch's runtime vs the image's toolkit ------------------------
    _K("cuda.driver_max", "cuda", "highest CUDA the driver supports, e.g. '12.2'", 90, True),
    _K("cuda.torch_runtime", "cuda", "torch.version.cuda, e.g. '11.3'", 80, True),
    _K("cuda.image_toolkit", "cuda", "toolkit in the image (/usr/local/cuda/version.json|txt or CUDA_VERSION)", 40, True),
    _K("cuda.compat_libs", "cuda", "forward-compat libcuda present under /usr/local/cuda*/compat", 40, True),
    _K("cuda.arch_list", "cuda", "torch.cuda.get_arch_list(), e.g. ['sm_80', 'sm_90']", 50, True),
    _K("cuda.device_capabilities", "cuda", "compute capability of each GPU, e.g. ['8.0']", 50, True),
    _K("cuda.module_loading", "cuda", "CUDA_MODULE_LOADING", 20),
    # --- driver: driver and kernel, health ------------------------------------------------------
    _K("driver.version", "driver", "NVIDIA driver version, e.g. '535.129.03'", 100, True),
    _K("driver.flavour", "driver", "'open' or 'proprietary' kernel module", 40, True),
    _K("driver.nvml_error", "driver", "why NVML could not be used, e.g. 'Driver/library version mismatch'", 60),
    _K("driver.gpus", "driver", "[{index, name, uuid, pci_bus_id, memory_total_bytes, memory_used_bytes, memory_free_bytes, memory_reserved_bytes, persistence_mode, compute_mode, ecc_uncorrected, retired_pages, retired_pending, remapped_pending, remapped_failure, reset_required}]", 60),
    _K("driver.gpu_count", "driver", "number of GPUs the driver reports", 60, True),
    _K("driver.gpu_names", "driver", "distinct GPU product names", 60, True),
    _K("driver.xid_events", "driver", "Xid lines in the kernel log: [{code, pci, pid, text, line}]", 70),
    _K("driver.nvrm_errors", "driver", "other NVRM error lines (RmInitAdapter failed, uvm errors)", 60),
    _K("kernel.release", "driver", "uname -r / /proc/version, e.g. '3.10.0-1062.9.1.el7.x86_64'", 100, True),
    _K("os.name", "driver", "PRETTY_NAME from /etc/os-release", 30, True),
    _K("os.id", "driver", "ID and VERSION_ID from /etc/os-release, e.g. 'ubuntu 20.04'", 30, True),
    # --- storage: /dev/shm and tmpfs ------------------------------------------------------------
    _K("shm.size_bytes", "storage", "size of the /dev/shm mount", 70, True),
    _K("shm.used_bytes", "storage", "bytes used in /dev/shm", 20),
    _K("shm.mount", "storage", "{fstype, options, source} of /dev/shm, or none", 30, True),
    _K("shm.torch_segments", "storage", "number of /dev/shm/torch_* segments left behind", 20),
    # --- framework: torch build, allocator config, probes -----------------------------------------
    _K("python.version", "framework", "Python version of the job's interpreter", 10, True),
    _K("torch.version", "framework", "torch.__version__", 80, True),
    _K("torch.cuda_available", "framework", "torch.cuda.is_available() in a child process", 60),
    _K("torch.device_count", "framework", "torch.cuda.device_count()", 50),
    _K("torch.devices", "framework", "[{name, total_memory, capability}] from torch", 40),
    _K("torch.cudnn", "framework", "torch.backends.cudnn.version()", 30, True),
    _K("torch.error", "framework", "what importing torch or initialising CUDA raised", 70),
    _K("torch.alloc_conf", "framework", "PYTORCH_CUDA_ALLOC_CONF / PYTORCH_ALLOC_CONF, raw", 50, True),
    _K("torch.no_caching", "framework", "PYTORCH_NO_CUDA_MEMORY_CACHING", 30),
    _K("probe.context", "framework", "context creation trials: {attempts, failures, errors, seconds}", 90),
    _K("probe.context_bytes", "framework", "GPU memory a fresh CUDA context takes (NVML delta)", 30),
    _K("probe.mem_get_info", "framework", "torch.cuda.mem_get_info per GPU: [{gpu, free_bytes, total_bytes}]", 60),
    _K("probe.alloc", "framework", "a small allocation after the context: {ok, error}", 80),
    # --- workload: the job itself ---------------------------------------------------------------
    _K("workload.logs", "workload", "log files in the bundle: [{name, bytes}]", 5),
    _K("workload.oom_events", "workload", "OOM-like events in bundle logs, as `explain` reads them: [{file, line, kind, category, count, text, numbers, details}]", 50),
    _K("workload.gpu_processes_self", "workload", "GPU memory held by this job's own processes", 20),
    _K("bundle.created", "workload", "when the bundle was made (ISO time)", 0),
    _K("bundle.path", "workload", "the bundle's path as the user gave it (`doctor --bundle PATH`, `diff A B`), for the commands remedies print; set by the command, not read from the bundle, and not compared by `diff`", 0),
)

FACT_KEYS: dict[str, FactKey] = {k.name: k for k in _KEYS}


def layer_of(key: str) -> str:
    return FACT_KEYS[key].layer
