"""What each OOM-like event kind means before any numbers or environment are weighed.

The kinds are those of parsers/oom_patterns.LINE_PATTERNS (the one recogniser, shared by `explain`
and doctor's `workload.oom_events`). For each: whether it is a GPU-side failure (explain ranks a GPU
error above the process exit that follows it), whether it is only a marker of the environment, and
the root-cause category its wording points to on its own, the category explain's rules give the
event when no numbers, environment or bundle facts refine it (tests/test_oom_events_shared.py holds the two
to each other). Sources are cited where the patterns are (oom_patterns.py) and in explain_kinds.py.
Pure data.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Kind:
    category: str | None  # the root-cause category the wording alone points to (None: a marker)
    gpu: bool  # raised on the GPU side (allocator, driver, sharing layer, GPU libraries)
    what: str  # who raised it, in a few words
    definite: bool = True  # False: the wording does not say which memory ran out
    recovery: bool = False  # a marker that the job caught an OOM and went on
    alone: bool = True  # a recovery marker that is itself a recovered OOM when no OOM text precedes it
    # a recovery marker that recovers the OOM lines near it (False: the library printed no OOM of its own
    # before it, so an OOM line near one is someone else's: another rank's crash, a kill)
    covers: bool = True
    # an event that a recovery line near it can mark recovered (False: a kill from outside the process,
    # which nothing in the job caught)
    recoverable: bool = True


KINDS: dict[str, Kind] = {
    "oom_recovered": Kind(None, False, "a job that caught its OOM and went on (batch-size finder, skipped batch)",
                          recovery=True),
    "autobatch_settled": Kind(None, False, "YOLO's AutoBatch settling on a batch size (after an OOM: recovered)",
                              recovery=True, alone=False),
    "oom_caught": Kind(None, False, "a library that met the shortage itself and went on (TensorRT tactic, Detectron2 "
                       "CPU fallback, vLLM preemption, TensorFlow BFC's \"not a failure\")", recovery=True, covers=False),
    "hami_oom": Kind("gpu_sharing_limit", True, "HAMi-core's per-container limit"),
    "hami_device_full": Kind("other_process", True, "the driver behind HAMi-core (the shared card is full)"),
    "torch_oom_nvml": Kind("true_capacity", True, "PyTorch's caching allocator (message lost to an NVML assert)"),
    "tensorrt_oom": Kind("true_capacity", True, "TensorRT's allocator"),
    "nccl_oom": Kind("context_or_driver", True, "NCCL's buffer allocation"),
    "torch_oom": Kind("true_capacity", True, "PyTorch's caching allocator"),
    "mps_oom": Kind("true_capacity", True, "PyTorch's MPS allocator"),
    "torch_oom_legacy": Kind("true_capacity", True, "PyTorch <= 0.4 (THC)"),
    "tf_oom": Kind("true_capacity", True, "TensorFlow's allocator"),
    "jax_oom": Kind("true_capacity", True, "XLA/JAX's allocator"),
    "cupy_oom": Kind("true_capacity", True, "CuPy's memory pool"),
    "rmm_oom": Kind("true_capacity", True, "RAPIDS RMM's device allocator"),
    "ort_oom": Kind("true_capacity", True, "ONNX Runtime's BFC arena"),
    "vllm_capacity": Kind("true_capacity", True, "vLLM's KV-cache capacity check"),
    "vllm_free_memory": Kind("other_process", True, "vLLM's start-up free-memory check"),
    "batch_finder": Kind("true_capacity", True, "the batch-size finder (every size ran out)"),
    "cuda_driver_oom": Kind("context_or_driver", True, "a CUDA runtime/driver call outside the allocator"),
    "cublas_cudnn": Kind("context_or_driver", True, "cuBLAS/cuDNN (the status decides)"),
    "shm_error": Kind("shm_exhausted", False, "DataLoader shared memory (/dev/shm)"),
    "dataloader_killed": Kind("host_oom", False, "SIGKILL of a DataLoader worker", recoverable=False),
    "bus_error": Kind("shm_exhausted", False, "SIGBUS (in containers most often /dev/shm)", definite=False),
    "nccl_system_error": Kind("shm_exhausted", False, "NCCL's failed system call (in containers: /dev/shm)", definite=False),
    "kernel_oom": Kind("host_oom", False, "the kernel OOM killer", recoverable=False),
    "slurm_oom_state": Kind("host_oom", False, "Slurm's OUT_OF_MEMORY job state (the cgroup OOM killer)", recoverable=False),
    "slurm_oom_kill": Kind("host_oom", False, "slurmstepd's count of the OOM kills in a step's cgroup", recoverable=False),
    "k8s_oomkilled": Kind("host_oom", False, "Kubernetes (OOMKilled)", recoverable=False),
    "k8s_evicted": Kind("host_oom", False, "the kubelet's eviction under node memory pressure", recoverable=False),
    "exit_137": Kind("host_oom", False, "a SIGKILL exit (137, -9, 'Killed')"),
    "ray_oom": Kind("host_oom", False, "Ray's memory monitor", recoverable=False),
    "host_alloc": Kind("host_oom", False, "a host (CPU) allocation"),
    "xid": Kind("context_or_driver", False, "the NVIDIA driver (Xid; the code decides)"),
    "cuda_program_error": Kind("not_oom", False, "a program error reported by CUDA"),
    "driver_error": Kind("context_or_driver", False, "driver/runtime initialisation"),
    "vcuda_line": Kind(None, False, "gpu-manager/vcuda hook (a marker, not a failure)"),
    "no_space": Kind("shm_exhausted", False, "ENOSPC (a full /dev/shm, or a full disk)", definite=False),
    "leak_report": Kind("leak_in_code", False, "a report of a memory leak", definite=False),
    "generic_oom": Kind("true_capacity", False, "an 'out of memory' message without a known source", definite=False),
}

# A cuBLAS/cuDNN handle that failed where it is created at start-up (TensorFlow's and JAX's wording):
# what filled the GPU was there before the job's own tensors (rules_by_kind.event_rules).
HANDLE_AT_START = re.compile(r"Failed to get convolution algorithm|[Cc]ould not create cudnn handle|"
                             r"failed to create cublas handle|cuDNN failed to initialize")

GPU_KINDS = frozenset(k for k, v in KINDS.items() if v.gpu)
MARKERS = frozenset(k for k, v in KINDS.items() if v.category is None)
RECOVERY = frozenset(k for k, v in KINDS.items() if v.recovery)
RECOVERY_ALONE = frozenset(k for k, v in KINDS.items() if v.recovery and v.alone)
SELF_CONTAINED = frozenset(k for k, v in KINDS.items() if v.recovery and not v.covers)
# (A bare exit 137 / "Killed" line or a host allocation error stays recoverable: a wrapper script that retries
# with a smaller batch after its child was killed, code that catches a MemoryError and goes on: second
# review, session 9.)
NEVER_RECOVERED = frozenset(k for k, v in KINDS.items() if not v.recoverable)

# Xid codes by meaning (environment-facts §9, nverror.h [NVERR]): program faults; memory hardware
# health. Others: the GPU or its firmware stopped responding.
XID_PROGRAM = frozenset({13, 31, 43})
XID_HEALTH = frozenset({48, 63, 64, 92, 94, 95})


# NVENC answers a session beyond the card's concurrent-encoder cap (consumer GeForce: a few sessions) with
# NV_ENC_ERR_OUT_OF_MEMORY, which ffmpeg prints as "OpenEncodeSessionEx failed: out of memory (10)"
# (NVENC API guide: nvEncOpenEncodeSessionEx; ffmpeg nvenc.c). The GPU's memory is rarely the reason.
NVENC_SESSION = "OpenEncodeSession"

# Where the failing line names a framework that calls cudaMalloc for each buffer itself (Caffe's
# SyncedMemory, tiny-cuda-nn's GPUMemory): its out-of-memory is the net not fitting (rules.driver_oom).
DIRECT_MALLOC = ("syncedmem", "cudaSuccess (2 vs. 0)", "tiny-cuda-nn", "gpu_memory.h")


# vLLM's memory profile before its KV-cache check failed (patterns.vllm_profile, rules_by_kind._vllm_profile_rules): the
# weights, activation peak and non-torch memory taking half the GPU or more is the model not fitting; a smaller share
# under a gpu_memory_utilization below vLLM's default (0.9) is the cap leaving no room.
VLLM_MODEL_SHARE = 0.5
VLLM_UTILIZATION_HIGH = 0.9


def vllm_cap_squeezed(p: dict[str, Any]) -> bool:
    """A vLLM profile whose model needs a small share of the GPU, under a low gpu_memory_utilization."""
    fixed = sum(p.get(k, 0) for k in ("weights_bytes", "activation_bytes", "non_torch_bytes"))
    util = p.get("utilization")
    return fixed < VLLM_MODEL_SHARE * p["total_bytes"] and util is not None and util < VLLM_UTILIZATION_HIGH


def category_hint(kind: str, details: dict[str, Any] | None = None, text: str = "") -> str | None:
    """The category an event's wording points to on its own (the status or Xid code refine two kinds)."""
    spec = KINDS.get(kind)
    if spec is None:
        return None
    d = details or {}
    if d.get("absurd_size"):
        return "not_oom"  # no device holds it, or over 100x its card: a suspect size (patterns.ABSURD_BYTES, _SHARE)
    if kind == "cublas_cudnn":
        status = str(d.get("status", ""))
        if status.endswith("ALLOC_FAILED"):
            # a handle created at start-up found the GPU full before the job's own tensors
            return "other_process" if HANDLE_AT_START.search(text) else "true_capacity"
        if status == "CNMEM_STATUS_OUT_OF_MEMORY":
            return "gpu_sharing_limit"  # Theano's pool share (lib.cnmem) could not be reserved (rules_by_kind)
        if status.startswith("CNMEM_STATUS_"):
            return "context_or_driver"  # another failed CUDA call of the pool (rules_by_kind)
        if status == "CUBLAS_STATUS_NOT_INITIALIZED" and "cublasCreate(handle)" in text:
            return "true_capacity"  # PyTorch's lazy handle, created on a GPU the job may have filled
        return "context_or_driver" if status.endswith(("NOT_INITIALIZED", "INTERNAL_ERROR")) else "not_oom"
    if kind == "xid":
        x = d.get("xid")
        return "not_oom" if isinstance(x, int) and (x in XID_PROGRAM or x in XID_HEALTH) else "context_or_driver"
    if kind == "tf_oom" and ("device:CPU" in text or "by allocator cpu" in text):
        return "host_oom"  # TensorFlow names the failed tensor's device: CPU means host RAM
    if kind == "cuda_driver_oom" and ("ggml" in text or "llama" in text.lower()):
        return "true_capacity"  # ggml/llama.cpp's ordinary OOM (cudaMalloc directly, no caching allocator)
    if kind == "cuda_driver_oom" and any(m in text for m in DIRECT_MALLOC):
        return "true_capacity"  # Caffe, tiny-cuda-nn: the same (rules.driver_oom)
    if kind == "cuda_driver_oom" and "context" in str(d.get("call_site") or ""):
        return "other_process"  # the context itself could not be made: the memory was someone else's (rules.driver_oom)
    if kind == "cuda_driver_oom" and "from device: CUDA_ERROR_OUT_OF_MEMORY" in text:
        return "other_process"  # TensorFlow reserving its pool at start-up: the device was already taken
    if kind == "tf_oom" and "from device" in text and "OOM when allocating" not in text:
        return "other_process"  # the same start-up reservation read as TensorFlow's (CUDA or ROCm)
    if kind == "tf_oom" and "memory fragmentation" in text:
        return "fragmentation"  # BFC's own hint: its free bytes would cover the request
    if kind == "torch_oom_nvml" and "nvmlInit" in text:
        return "context_or_driver"  # NVML could not start: the driver's state, not the message lost
    if kind == "cuda_program_error" and "invalid device ordinal" in text:
        return "context_or_driver"  # a device the process cannot see: configuration, not the program's memory use
    if kind == "exit_137" and d.get("k8s_reason") == "Error":
        return "not_oom"  # Kubernetes' record says Error, not OOMKilled (explain/kubernetes.py)
    if kind == "vllm_capacity" and isinstance(d.get("vllm_profile"), dict) and vllm_cap_squeezed(d["vllm_profile"]):
        return "gpu_sharing_limit"  # the utilization cap, not the model, left no room (rules_by_kind)
    if kind == "generic_oom" and d.get("in_dataloader_worker"):
        return "shm_exhausted"
    if kind == "generic_oom" and NVENC_SESSION in text:
        return "not_oom"  # NVENC's session cap answered as NV_ENC_ERR_OUT_OF_MEMORY (rules_by_kind)
    return spec.category
