"""Rules for the other event kinds, the log-wide context (leaks) and bundle facts. Pure."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from oomdoctor.explain.events import EVAL_ACCUMULATION, OomEvent
from oomdoctor.explain.figures import is_gap, own_figure
from oomdoctor.explain.framework import LLAMA_CPP, TGI, VLLM_CACHE_BLOCKS, server_kind
from oomdoctor.explain.kinds import (
    HANDLE_AT_START,
    NVENC_SESSION,
    VLLM_MODEL_SHARE,
    XID_HEALTH,
    XID_PROGRAM,
    vllm_cap_squeezed,
)
from oomdoctor.explain.patterns import ABSURD_BYTES, LEAK_DENIED
from oomdoctor.explain.rules import (
    ALLOC_CONF_FIX,
    CONTEXT_MAX,
    HAMI_FIX,
    Board,
    _capacity_fix,
    _slice_evidence,
    driver_oom,
    torch_oom,
    unaccounted,
)
from oomdoctor.knowledge.gpus import GIB, physical_gib
from oomdoctor.units import format_bytes as fb

# accelerate's find_executable_batch_size halved the batch down to zero: a smaller batch is no fix (a walkthrough,
# session 27, had "every batch size down to 1 ran out" followed by "lower the batch size")
BATCH_ONE_FIX = ("even a batch of 1 does not fit: shorten the sequence (or image) length, enable activation checkpointing, "
                 "use bf16 autocast or an 8-bit optimizer, or shard the model over more GPUs (FSDP, DeepSpeed ZeRO); "
                 "check that a batch of 1 fits with `oomdoctor estimate WORKLOAD.py --batch-size 1`")

# A failure told in the reporter's own words (rank.REPORTED_KIND) that names the host's memory and not
# the GPU's: "quickly ran through the 32GB RAM on my Linux PC", "ran out of system memory".
_HOST_MEMORY = re.compile(r"(?i)\b(?:(?:system|host|cpu|physical) (?:memory|ram)|ram|swap)\b|内存"
                          # a container platform's limit (Hugging Face Spaces: "Memory limit exceeded (16Gi)")
                          r"|^\W{0,4}memory limit exceeded \(\d|\bmemory limit of \d+(?:\.\d+)? ?[KMGT](?:i?B)? exceeded with \d")
_GPU_MEMORY = re.compile(r"(?i)\b(?:vram|gpu|cuda|device memory|graphics)\b|显存")

# Host-side failures that name their cause: (weight, evidence) for host_oom.
_HOST_FAILURES: dict[str, tuple[float, str]] = {
    "kernel_oom": (3.5, "the kernel OOM killer killed a process (host or cgroup RAM exhausted)"),
    "slurm_oom_state": (3.5, "Slurm ended the job OUT_OF_MEMORY: the cgroup OOM killer killed a task (the job's host RAM "
                             "limit, --mem)"),
    "slurm_oom_kill": (3.5, "slurmstepd counted oom-kill events in the step's cgroup: the cgroup OOM killer killed a task "
                            "(the job's host RAM limit, --mem)"),
    "k8s_oomkilled": (3.5, "Kubernetes reports OOMKilled: the container hit its memory limit"),
    "k8s_evicted": (3.2, "the kubelet evicted the pod because the node ran low on memory"),
    "ray_oom": (3.0, "Ray's memory monitor killed the task: the node ran low on RAM"),
    "host_alloc": (2.6, "a host (CPU) allocation failed"),
}

if TYPE_CHECKING:  # facts only come with --bundle; importing them costs ~14 ms of start-up
    from oomdoctor.facts import FactSet

_MINUS_9 = re.compile(r"(?<![\w.-])-9\b")
_CODE_137 = re.compile(r"(?i)(?:code|status|exit(?:ed)?)\W{0,4}137\b")  # not a pid: "line 1: 13712 Killed"
_FRAMEWORK = {"jax_oom": "JAX/XLA", "tf_oom": "TensorFlow", "cupy_oom": "CuPy", "rmm_oom": "RAPIDS RMM",
              "ort_oom": "ONNX Runtime"}
SHM_FIX_BASE = ("give the container a bigger /dev/shm: docker run --shm-size=8g (or --ipc=host); Kubernetes: an "
                "emptyDir {medium: Memory, sizeLimit: 8Gi} mounted at /dev/shm")
SHM_FIX = SHM_FIX_BASE + "; or lower num_workers"


def _shm_whose(text: str) -> tuple[str, str]:
    """Whose /dev/shm segment the line names (NCCL's, Ray's object store, the DataLoader's): the why and the fix."""
    low = text.lower()
    if "nccl" in low:
        return ("NCCL could not create its shared-memory segment in /dev/shm (its buffers between processes of one "
                "node; Docker gives 64 MB)", SHM_FIX_BASE + "; or NCCL_SHM_DISABLE=1 (slower, through the network "
                "stack)")
    if "object store" in low:
        return ("Ray's object store does not fit in /dev/shm", SHM_FIX_BASE + "; or a smaller object_store_memory")
    return ("the DataLoader's shared-memory segments in /dev/shm ran out (bus error / 'No space left on device' for "
            "/torch_* segments)", SHM_FIX)


# Fixes in the terms of the framework that failed (a walkthrough, session 27: TGI was told vLLM's knobs, llama.cpp
# and JAX PyTorch's training advice, vLLM's "No available memory for the cache blocks" to lower max_model_len)
VLLM_FIX = "lower max_model_len / max_num_seqs, raise gpu_memory_utilization, or use more GPUs"
SERVER_FIXES = {
    TGI: ("lower --max-batch-prefill-tokens (and --max-total-tokens / --max-input-tokens), or give the shard more of "
          "the GPU with --cuda-memory-fraction; else shard the model over more GPUs (--num-shard) or quantize it "
          "(--quantize)"),
    VLLM_CACHE_BLOCKS: ("the weights and activations left nothing for the KV cache: raise gpu_memory_utilization, "
                        "free the GPU of other processes, or use a smaller or quantized model, or tensor parallelism "
                        "(--tensor-parallel-size) over more GPUs"),
}
# vLLM's memory profile before its KV-cache check failed (patterns.vllm_profile): what the weights, the activation peak
# and non-torch memory take of the GPU. Half the GPU or more is the model not fitting (a walkthrough, session 28: a 7B
# model on an 8 GB card); a small share under a low gpu_memory_utilization is the cap leaving it no room (dev
# w1_vllm_10439, where the reporter had set 0.03-0.4 for a 0.5B model; it prints no profile): kinds.vllm_cap_squeezed.
VLLM_UTILIZATION_MAX = 0.95  # about the most a card with a CUDA context can give vLLM


def _vllm_profile_rules(p: dict, b: Board) -> None:
    total, util, budget, kv = p["total_bytes"], p.get("utilization"), p.get("budget_bytes"), p["kv_cache_bytes"]
    names = (("weights_bytes", "the weights take"), ("activation_bytes", "the activation peak"),
             ("non_torch_bytes", "non-torch memory"))
    parts = [f"{what} {fb(p[key])}" for key, what in names if key in p]
    fixed = sum(p.get(key, 0) for key, _ in names)
    said = (f"vLLM's memory profile: {', '.join(parts)}: {fb(fixed)} of the {fb(total)} GPU before any KV cache; "
            + (f"gpu_memory_utilization {util:g} gives vLLM {fb(budget)}, " if util is not None and budget is not None
               else "") + f"so the KV cache gets {fb(kv)}")
    best = int(VLLM_UTILIZATION_MAX * total) - fixed
    more = (f"raising gpu_memory_utilization to {VLLM_UTILIZATION_MAX:g} would leave the KV cache {fb(best)}" if best > 0
            else f"even gpu_memory_utilization {VLLM_UTILIZATION_MAX:g} would leave the KV cache nothing")
    if not vllm_cap_squeezed(p):
        big = fixed >= VLLM_MODEL_SHARE * total
        b.add("true_capacity", 4.0 if big else 3.0, said + (": the weights and the activation peak take most of the GPU"
              if big else ""), "use a smaller or quantized model (AWQ, GPTQ, FP8), tensor parallelism over more GPUs "
              f"(--tensor-parallel-size), or a shorter max_model_len / fewer max_num_batched_tokens; {more}")
        if best > 0 and util is not None and util < VLLM_UTILIZATION_MAX:
            b.add("gpu_sharing_limit", 1.0, f"{more}: the cap leaves less than the GPU could",
                  f"raise gpu_memory_utilization (now {util:g})")
    else:
        b.add("gpu_sharing_limit", 3.5, said + f": the model needs a small share of the GPU, and the gpu_memory_utilization "
              f"cap ({util:g}) leaves it no room", f"raise gpu_memory_utilization: {more}")
        b.add("true_capacity", 1.0, "or the activation peak, which grows with max_num_batched_tokens, outgrows the cap",
              VLLM_FIX)


LLAMA_CPP_FIX = ("offload fewer layers to the GPU (-ngl / --n-gpu-layers), use a smaller quantisation of the model "
                 "(e.g. Q4_K_M), or a smaller context (-c / --ctx-size)")
JAX_CAPACITY_FIX = ("lower the batch size or sequence length, or rematerialise activations (jax.checkpoint); JAX "
                    "preallocates 75% of the GPU: XLA_PYTHON_CLIENT_MEM_FRACTION=.95 lets it use more, "
                    "XLA_PYTHON_CLIENT_PREALLOCATE=false allocates on demand (and shows the real peak)")
# TensorFlow's own terms (a walkthrough, session 28: a ResourceExhaustedError was told of bf16 autocast and `oomdoctor
# estimate WORKLOAD.py`, which traces PyTorch)
TF_CAPACITY_FIX = ("lower the batch size (usually the first dimension of the shape in the message) or the input size; use "
                   "mixed precision (tf.keras.mixed_precision.set_global_policy('mixed_float16')); RunOptions("
                   "report_tensor_allocations_upon_oom=True) lists the tensors that held the memory")
# CuPy, RAPIDS, ONNX Runtime: no PyTorch advice for them either
ARRAY_CAPACITY_FIX = ("make the arrays or the batch smaller, or process the data in chunks; watch the device's peak "
                      "(nvidia-smi) against its memory")


def _array_fix(x: int | None) -> str:
    return (f"one allocation of {fb(x)} could not be served: " if x else "") + ARRAY_CAPACITY_FIX
# JAX's own allocator settings for free memory XLA's pool holds but cannot hand out (the fix for fragmentation in a JAX
# job; the walkthrough of session 28 was given PyTorch's and TensorFlow's)
JAX_FRAG_FIX = ("XLA_PYTHON_CLIENT_ALLOCATOR=platform (allocates and frees on demand: no pool to fragment, slower); or "
                "XLA_PYTHON_CLIENT_PREALLOCATE=false, or a larger XLA_PYTHON_CLIENT_MEM_FRACTION (.95) for the pool")
TF_FRAG_FIX = "TF_GPU_ALLOCATOR=cuda_malloc_async (the allocator TensorFlow suggests for fragmentation)"
# The kubelet evicts first the pods whose use is above their request, then by priority, then by how far above it
# (Kubernetes, "Node-pressure eviction"): a memory request, not a limit, is what keeps a pod from being first (a
# walkthrough, session 28, was told to raise resources.limits.memory for "... exceeds its request of 0")
EVICTION_FIX = ("set resources.requests.memory to what the container really uses (a pod above its request, as every pod "
                "with none is, is the first the kubelet evicts), with resources.limits.memory at or above it; or give "
                "the node more memory, or fewer pods")
_EVICTION_USE = re.compile(r"was using (\d+)Ki, which exceeds its request of (\d+\w*)")
# Ray's memory monitor kills a worker when the node's RAM passes RAY_memory_usage_threshold (0.95): fewer tasks or
# actors at once, each asking for more of the node, is Ray's own advice (a walkthrough, session 27)
RAY_FIX = ("run fewer tasks/actors at once on the node: request more per task (num_cpus=..., memory=... in "
           "@ray.remote / .options()), so fewer are scheduled together; RAY_memory_usage_threshold (default 0.95) "
           "sets when Ray kills; or give the node (its container/pod's resources.limits.memory) more RAM")
HOST_FIX = ("raise the memory limit of the container/pod (resources.limits.memory) or use less host RAM: fewer "
            "DataLoader workers, smaller prefetch_factor, load the checkpoint with mmap=True / to the GPU directly")
# Slurm's own words for a step its cgroup killed (srun, slurmstepd): the limit is the job's request, not a pod's (a
# walkthrough, session 27, was told to raise resources.limits.memory)
# (a batch script's own line: bash names it "/var/spool/slurmd/job00191/slurm_script: line 28: 8156 Killed ...")
_SLURM = re.compile(r"\bslurmstepd\b|\bsrun: |\bStepId=\d|\bsbatch\b|/slurmd/\S*slurm_script\b")
SLURM_HOST_FIX = ("raise the job's memory request (sbatch/srun --mem, --mem-per-cpu or --mem-per-gpu; `seff JOBID` "
                  "shows what it used) or use less host RAM: fewer DataLoader workers, smaller prefetch_factor, load "
                  "the checkpoint with mmap=True / to the GPU directly")
NOT_OOM_FIX = ("rerun with CUDA_LAUNCH_BLOCKING=1 to see the failing kernel; check index/label ranges "
               "(labels < num_classes, embedding ids < vocab size) and device ids")

# Xid meanings (environment-facts §9, nverror.h): the code sets live with the kind table.
_XID_PROGRAM = XID_PROGRAM
_XID_HEALTH = XID_HEALTH


def event_rules(ev: OomEvent, b: Board, env: dict[str, list[str]]) -> None:
    k, d, n = ev.kind, ev.details, ev.numbers
    x, t = n.get("requested_bytes", 0), n.get("total_bytes")
    if d.get("absurd_size") and x >= ABSURD_BYTES:
        b.add("not_oom", 3.5, f"a request of {fb(x)}: no device has that much, so the size itself is "
              "corrupt (an integer overflow, an uninitialised or negative dimension read as unsigned, a wrong dtype)",
              "find the tensor whose shape produced that size (CUDA_LAUNCH_BLOCKING=1, print the shapes before the op); "
              "a library regression is likely when it began with an upgrade")
    elif d.get("absurd_size") and t:
        # over patterns.ABSURD_SHARE times the card: usually a shape gone wrong; an all-pairs matrix of a large set may
        # really ask that much (second)
        b.add("not_oom", 3.0, f"one allocation of {fb(x)} is {x / t:.0f} times the whole GPU ({fb(t)}): a size that "
              "large is usually a shape gone wrong (a broadcast, an outer product, a wrong dtype or dimension)",
              "print the shapes before the op that failed (CUDA_LAUNCH_BLOCKING=1 points at it)")
        b.add("true_capacity", 1.5, "or the step really asks that much (an all-pairs matrix of a large set): it must "
              "be computed in chunks", "compute it in chunks, or shard it across GPUs")
    elif k in ("torch_oom", "mps_oom"):
        torch_oom(ev, b, env)
        if server_kind(k, ev.text) == TGI:
            # TGI's warmup quotes PyTorch's message (its cudaMallocAsync form, with its figures): the fix is TGI's
            # launch flags, not a training script's batch size or checkpointing (a new user's walkthrough)
            b.fixes["true_capacity"] = [SERVER_FIXES[TGI]]
    elif k == "torch_oom_legacy":
        b.add("true_capacity", 1.6, "PyTorch <= 0.4 reports 'cuda runtime error (2) : out of memory' with no numbers",
              _capacity_fix(None, None, None, None))
        b.add("other_process", 0.8, "without numbers, memory held by other processes cannot be ruled out")
    elif k == "cuda_driver_oom":
        driver_oom(ev, b, env)
        if "from device: CUDA_ERROR_OUT_OF_MEMORY" in ev.text:  # TF's cuda_driver.cc line, read as a CUDA OOM
            _tf_reserve_failed(b)
    elif k == "hami_oom":
        # HAMi-core allocator.c oom_check: usage would pass the container's limit [HAMIOOM].
        lim, use = d.get("limit_bytes"), d.get("would_use_bytes")
        detail = f": the job would reach {fb(use)} against a limit of {fb(lim)}" if lim and use else ""
        b.add("gpu_sharing_limit", 3.5, f"HAMi-core refused the allocation{detail}; the limit comes from the "
              "pod's nvidia.com/gpumem, not the physical GPU", HAMI_FIX)
    elif k == "k8s_evicted":
        w, why = _HOST_FAILURES[k]
        b.add("host_oom", w, why, EVICTION_FIX)
        m = _EVICTION_USE.search(ev.text)
        if m:
            req = "no memory request (0)" if m.group(2) == "0" else f"a memory request of {m.group(2)}"
            b.add("host_oom", 0.0, f"the container used {fb(int(m.group(1)) * 1024)} with {req}: the kubelet evicts "
                  "first the pods that use more than they requested")
    elif k == "tf_oom" and ("device:CPU" in ev.text or "by allocator cpu" in ev.text):
        # TensorFlow names the device and allocator of the failed tensor: CPU means host RAM.
        b.add("host_oom", 3.0, "TensorFlow's CPU allocator ran out: the tensor was on the host, in RAM", HOST_FIX)
    elif k == "hami_device_full":
        # oom_check passed (the pod is within its gpumem limit) but the real allocation failed: the
        # physical GPU is full of other pods' memory or of memory HAMi does not count (HAMi-core#79).
        b.add("other_process", 2.2, "HAMi-core let the allocation through its limit check but the driver "
              "refused it (res=2, CUDA_ERROR_OUT_OF_MEMORY): other pods on the shared GPU hold the memory",
              "check which pods share this GPU (HAMi schedules several on one card); lower their gpumem or "
              "spread them, since the card is oversubscribed")
        b.add("gpu_sharing_limit", 1.6, "the sharing layer's accounting let the card be oversubscribed",
              "set nvidia.com/gpumem so the pods on one GPU add up to less than its memory")
    elif k == "torch_oom_nvml" and "nvmlInit" in ev.text:
        # NVML itself could not initialise (the assert names nvmlInit): the driver/NVML state is broken,
        # not only the message lost (pytorch/pytorch#112950: a reboot fixed it).
        b.add("context_or_driver", 2.8, "NVML failed to initialise inside PyTorch's allocator (nvmlInit assert): "
              "the driver or its NVML library is in a bad state or mismatched", "check `nvidia-smi` works on the node; "
              "a driver/library mismatch or a stuck driver needs the driver reloaded or the node rebooted")
        b.add("true_capacity", 1.0, "the assert is raised while PyTorch builds an OOM message",
              _capacity_fix(None, None, None, None))
    elif k in ("torch_oom_nvml", "tensorrt_oom"):
        x = n.get("requested_bytes")
        b.add("true_capacity", 2.0, ("PyTorch ran out of memory and then failed to query NVML for the message"
              if k == "torch_oom_nvml" else "TensorRT could not allocate GPU memory")
              + (f" ({fb(x)} requested)" if x else ""), _capacity_fix(x, None, None, None))
        _slice_evidence(n.get("total_bytes") or 0, env, b)
    elif k in ("jax_oom", "tf_oom", "cupy_oom", "rmm_oom", "ort_oom"):
        x = n.get("requested_bytes")
        if x and x >= 4 * 1024 * GIB:
            b.add("true_capacity", 3.5, f"one allocation of {fb(x)} is larger than any GPU",
                  "the array itself must shrink (check its shape) or be sharded")
        else:
            b.add("true_capacity", 2.2, f"{_FRAMEWORK[k]} ran out of device memory"
                  + (f" allocating {fb(x)}" if x else ""), JAX_CAPACITY_FIX if k == "jax_oom"
                  else TF_CAPACITY_FIX if k == "tf_oom" else _array_fix(x))
        if k == "tf_oom":
            _tf_tensor(ev.text, b)
        if k == "jax_oom":
            _xla_program(x, env, b)
        if k == "tf_oom" and "from device" in ev.text:
            _tf_reserve_failed(b, alone="OOM when allocating" not in ev.text)
        if k == "tf_oom" and "memory fragmentation" in ev.text:
            # BFC prints this hint only when its free bytes would cover the request (bfc_allocator.cc).
            b.add("fragmentation", 2.6, "TensorFlow's BFC allocator says its free memory would cover the request: "
                  "fragmentation", "TF_GPU_ALLOCATOR=cuda_malloc_async (the allocator TensorFlow suggests)")
        if k == "jax_oom":
            b.add("other_process", 0.6, "JAX preallocates 75% of the GPU by default (XLA_PYTHON_CLIENT_PREALLOCATE)",
                  "two JAX processes on one GPU need XLA_PYTHON_CLIENT_MEM_FRACTION / PREALLOCATE=false")
    elif k == "nccl_oom":
        b.add("context_or_driver", 1.8, "NCCL could not allocate its buffers (cudaMalloc failed during "
              "communicator set-up)", "set NCCL_BUFFSIZE lower or start NCCL before filling the GPU")
        b.add("true_capacity", 1.4, "NCCL buffers come on top of the model: the GPU is nearly full",
              _capacity_fix(None, None, None, None))
        # NCCL allocates with cudaMalloc, outside PyTorch's caching allocator, which does not give back the
        # blocks it keeps cached: a card "full" of PyTorch's free cache leaves NCCL nothing (cosmos-rl#731, dev)
        b.add("fragmentation", 1.5, "NCCL allocates outside PyTorch's caching allocator, and memory PyTorch keeps "
              "cached but unused is not given back to it",
              "torch.cuda.empty_cache() before creating the process group or the first collective, or " + ALLOC_CONF_FIX)
    elif k == "vllm_capacity" and d.get("vllm_profile"):
        _vllm_profile_rules(d["vllm_profile"], b)
    elif k in ("vllm_capacity", "batch_finder"):
        b.add("true_capacity", 3.0, "the framework's own capacity check failed: model + KV cache/batch do not "
              "fit" if k == "vllm_capacity" else "every batch size down to 1 ran out of memory",
              SERVER_FIXES.get(server_kind(k, ev.text), VLLM_FIX) if k == "vllm_capacity" else BATCH_ONE_FIX)
    elif k == "vllm_free_memory":
        b.add("other_process", 3.0, "vLLM found less free memory at start-up than gpu_memory_utilization asks "
              "for: other processes hold it", "stop the other processes on the GPU or lower gpu_memory_utilization")
    elif k == "cublas_cudnn":
        status = d.get("status", "")
        _pool_limit(ev, status, env, b)
        if status.endswith("ALLOC_FAILED"):
            b.add("true_capacity", 2.2, f"{status}: resource allocation inside the library failed, usually a "
                  "cudaMalloc failure (cuBLAS/cuDNN API reference)", _capacity_fix(None, None, None, None))
            b.add("other_process", 1.0, "the workspace could not be allocated: the GPU was full")
            b.add("not_oom", 0.8, "an index past an embedding table also surfaces as a failed cuBLAS allocation "
                  "(pytorch#24838); CUDA_LAUNCH_BLOCKING=1 shows the assert", NOT_OOM_FIX)
            if HANDLE_AT_START.search(ev.text):
                b.add("other_process", 1.3, "the handle is created at start-up, before the job's own tensors: what "
                      "filled the GPU was there already (another process, or TensorFlow/JAX's preallocated pool)",
                      "check nvidia-smi for other processes; TF_FORCE_GPU_ALLOW_GROWTH=true, "
                      "XLA_PYTHON_CLIENT_PREALLOCATE=false")
        elif status == "CNMEM_STATUS_OUT_OF_MEMORY":
            # Theano's CNMeM pool reserves the share lib.cnmem of the whole card at start-up (1 = all of it):
            # the share, not the job, does not fit once the display or a CUDA context holds part of the card
            b.add("gpu_sharing_limit", 2.2, "Theano's CNMeM pool could not reserve its configured share of the GPU "
                  "(lib.cnmem) at start-up", "lower lib.cnmem (THEANO_FLAGS=lib.cnmem=0.8), or 0 to turn the pool off")
            b.add("other_process", 1.2, "the share is of the whole card: memory another process holds is not free "
                  "for it", "nvidia-smi --query-compute-apps=pid,used_memory --format=csv")
        elif status.startswith("CNMEM_STATUS_"):
            b.add("context_or_driver", 2.0, f"{status}: a CUDA call of Theano's CNMeM pool failed at start-up",
                  "check that the CUDA build matches the driver and that the GPU is visible (nvidia-smi)")
        elif status == "CUBLAS_STATUS_NOT_INITIALIZED" and "cublasCreate(handle)" in ev.text:
            # PyTorch creates the handle lazily at the first matmul of a stream, when the GPU may already be
            # full; a device-side assert earlier in the run (an index past a vocabulary) surfaces here too
            b.add("true_capacity", 2.0, "cublasCreate failed inside PyTorch: the handle and its workspace are allocated "
                  "at the first matmul, often on a GPU the job has already filled", _capacity_fix(None, None, None, None))
            b.add("not_oom", 1.4, "an earlier asynchronous CUDA error (an index past a vocabulary or embedding table) "
                  "also surfaces as a failed cublasCreate", NOT_OOM_FIX)
            b.add("context_or_driver", 1.2, f"{status}: per the cuBLAS reference a failed CUDA runtime call or a setup error",
                  "check that the CUDA build of torch matches the driver")
            b.add("other_process", 0.8, "or the GPU was full of another process's memory before the first matmul")
        elif status.endswith(("NOT_INITIALIZED", "INTERNAL_ERROR")):
            b.add("context_or_driver", 2.0, f"{status}: the library handle could not be created; per the API "
                  "reference this follows a failed CUDA runtime call (often memory) or a setup error",
                  "check that the GPU has free memory when the job starts and that the CUDA/cuDNN build matches the driver")
            if HANDLE_AT_START.search(ev.text):
                # TensorFlow and JAX take most of the GPU for their own pool at start-up, so the handle
                # that comes later finds no room; so does one next to another such process.
                b.add("other_process", 1.6, "TensorFlow/JAX preallocate most of the GPU at start-up: a second such "
                      "process (a notebook, a data-loading TF next to JAX) or the same process's pool leaves the "
                      "handle no room", "check nvidia-smi for other processes; TF_FORCE_GPU_ALLOW_GROWTH=true, "
                      "XLA_PYTHON_CLIENT_PREALLOCATE=false")
            b.add("true_capacity", 1.2, "handles are created lazily, when the GPU may already be full",
                  _capacity_fix(None, None, None, None))
            b.add("not_oom", 1.0, "the same status also follows invalid arguments (bad shapes, dtypes)", NOT_OOM_FIX)
        else:
            b.add("not_oom", 3.0, f"{status}: a kernel or argument error of the library, not a lack of memory",
                  NOT_OOM_FIX)
    elif k == "shm_error":
        b.add("shm_exhausted", 3.5, *_shm_whose(ev.text))
    elif k == "bus_error":
        b.add("shm_exhausted", 2.4, "a bus error (SIGBUS) in a GPU job is most often a /dev/shm page that could not be "
              "backed: DataLoader workers and NCCL put tensors there, and Docker gives 64 MB", SHM_FIX)
        b.add("not_oom", 0.6, "SIGBUS also follows a memory-mapped file that was truncated or is on a failing disk",
              "check that the dataset/checkpoint files are whole; df -h /dev/shm")
    elif k == "dataloader_killed":
        b.add("host_oom", 3.0, "a DataLoader worker was killed by SIGKILL: the kernel OOM killer of the "
              "host or the container's cgroup", HOST_FIX)
        b.add("shm_exhausted", 0.8, "shared-memory pages count towards the cgroup limit", SHM_FIX)
    elif k in _HOST_FAILURES:
        w, why = _HOST_FAILURES[k]
        b.add("host_oom", w, why, SLURM_HOST_FIX if k == "slurm_oom_state" or _SLURM.search(ev.text)
              else RAY_FIX if k == "ray_oom" else HOST_FIX)
        if d.get("shmem_rss_bytes", 0) >= GIB:
            b.add("shm_exhausted", 1.5, f"shmem-rss {fb(d['shmem_rss_bytes'])} in the kill line: /dev/shm pages were charged")
    elif k == "exit_137":
        # what the line says: an exit code, or the shell's "Killed" (the same SIGKILL, no code printed)
        # (a bare `Killed` or `exitcode: -9` prints no 137: the evidence must not claim one; a walkthrough, session 27)
        said = ("exit code 137 = 128 + SIGKILL" if _CODE_137.search(ev.text)
                else "exit code -9: killed by SIGKILL" if _MINUS_9.search(ev.text)
                else "killed by SIGKILL (the shell's 'Killed'; no exit code printed)")
        k8s_error = d.get("k8s_reason") == "Error"  # Kubernetes' record says Error, not OOMKilled (explain/kubernetes.py)
        b.add("host_oom", 1.2 if k8s_error else 2.0, f"{said}, the usual mark of the OOM killer (but kill -9, docker kill, "
              "a scheduler's preemption and deadlines send SIGKILL too)", SLURM_HOST_FIX if _SLURM.search(ev.text)
              else HOST_FIX)
        if k8s_error:
            b.add("not_oom", 2.6, "Kubernetes recorded this exit as Reason: Error, not OOMKilled (its reason when the "
                  "container's cgroup OOM killer ended it): the SIGKILL came from elsewhere, such as the kubelet after "
                  "failed liveness probes, a preemption or a stop past its grace period",
                  "read the pod's events (kubectl describe pod POD: Liveness probe failed, Killing, Preempting); a probe "
                  "that times out under load needs a longer timeoutSeconds / failureThreshold, or a startupProbe")
        if env.get("stop_kill"):
            b.add("not_oom", 3.0, f"the text speaks of a stop ('{env['stop_kill'][0]}'): Docker sends SIGKILL (137) "
                  "to a container that does not stop within its grace period, with memory to spare",
                  "handle SIGTERM in the container's main process (exec form of CMD, an init such as tini) or raise "
                  "the stop timeout (docker stop -t, terminationGracePeriodSeconds)")
    elif k == "xid":
        x = d.get("xid")
        if x in _XID_PROGRAM:
            b.add("not_oom", 3.0, f"Xid {x}: the GPU faulted on the program's access (illegal address), not on "
                  "a lack of memory", NOT_OOM_FIX)
        elif x in _XID_HEALTH:
            b.add("not_oom", 3.0, f"Xid {x}: a GPU memory hardware error (ECC/retirement)", "drain the node and "
                  "reset the GPU; check `nvidia-smi -q -d ECC,ROW_REMAPPER`")
        else:
            b.add("context_or_driver", 2.0, f"Xid {x}: the GPU or its firmware stopped responding",
                  "reset the GPU / reboot the node; check power and PCIe")
    elif k == "cuda_program_error" and "invalid device ordinal" in ev.text:
        b.add("context_or_driver", 3.5, "'invalid device ordinal': the job asked for a GPU that this process "
              "cannot see (a device index past CUDA_VISIBLE_DEVICES, or a MIG/container with one device)",
              "use device indices below torch.cuda.device_count() (after CUDA_VISIBLE_DEVICES renumbering), "
              "e.g. cuda:0 inside a one-GPU container or MIG instance")
    elif k == "cuda_program_error" and "out of resource: shared memory" in ev.text:
        b.add("not_oom", 3.5, "Triton's kernel asks for more shared memory per block than the GPU has: an on-chip "
              "limit set by the kernel's tile sizes and pipeline stages, not a lack of GPU memory",
              "use a kernel configuration made for this GPU (smaller BLOCK sizes or num_stages; a newer release of "
              "the library that ships the kernel often has one); freeing GPU memory does not help")
    elif k == "cuda_program_error":
        b.add("not_oom", 3.5, "an illegal address, device-side assert or invalid device: a program or "
              "configuration error that only mentions memory/devices", NOT_OOM_FIX)
    elif k == "driver_error":
        b.add("context_or_driver", 3.5, "the driver or CUDA runtime failed to initialise (driver too old, "
              "missing, or mismatched)", "match the driver to the CUDA build: "
              "`oomdoctor doctor` on that machine (or `oomdoctor doctor --bundle` of its bundle) compares the "
              "driver's CUDA with torch.version.cuda")
    elif k == "nccl_system_error":
        b.add("shm_exhausted", 1.8, "NCCL's 'unhandled system error' is a failed system call; in containers it is "
              "most often the /dev/shm segment NCCL creates (NCCL troubleshooting: --shm-size / --ipc=host)", SHM_FIX)
        b.add("context_or_driver", 0.8, "it also follows network or driver set-up failures",
              "rerun with NCCL_DEBUG=INFO to see the failing call")
    elif k == "no_space":
        b.add("shm_exhausted", 1.6, "'No space left on device' in a GPU job is most often /dev/shm (DataLoader "
              "workers, NCCL segments; 64 MB by default in Docker)", SHM_FIX)
        b.add("not_oom", 0.7, "it is also a full disk (checkpoints, caches)", "df -h (the disk) and df -h /dev/shm")
    elif k == "leak_report":
        b.add("leak_in_code", 2.0, "the text reports a memory leak", LEAK_FIX)
    elif k == "generic_oom":
        if NVENC_SESSION in ev.text:
            b.add("not_oom", 3.0, "NVENC could not open an encode session: the driver answers a session beyond the "
                  "card's concurrent-encoder cap (a few on GeForce cards) with NV_ENC_ERR_OUT_OF_MEMORY",
                  "count the encoder sessions running (nvidia-smi --query-gpu=encoder.stats.sessionCount --format=csv) "
                  "and run fewer encodes at once, or use a card without the cap")
            b.add("context_or_driver", 1.2, "the same code comes when the driver cannot open NVENC at all (a driver "
                  "or kernel-module version without NVENC for this card)",
                  "try the previous driver; check `ffmpeg -hide_banner -encoders | grep nvenc` and the driver's release notes")
            b.add("true_capacity", 0.6, "or the encoder's buffers really did not fit in GPU memory",
                  "lower the encoder's surfaces (ffmpeg -surfaces) or the resolution")
        elif d.get("in_dataloader_worker"):
            b.add("shm_exhausted", 1.5, "a memory error inside a DataLoader worker", SHM_FIX)
            b.add("host_oom", 1.2, "DataLoader workers use host RAM", HOST_FIX)
        else:
            # 0.8 until session 20 (the label where it fired: 60 of 166 dev reports, 70 of 233 silver items): a guess
            # the words (rank.PRIOR_WEIGHT_VAGUE) should outweigh. At 0.4 (a rule written down first): dev out of fold
            # 930 -> 932 right first, silver (5 folds, prior refitted without the fifth) 999 -> 1005
            server = server_kind(k, ev.text)
            if server == LLAMA_CPP:  # the same weight: a llama.cpp load is no training step
                # (ollama prints ggml's buffer on the line after its own: "failed to allocate CUDA0 buffer of size N")
                x = n.get("requested_bytes") or next((int(v) for v in env.get("ggml_buffer", [])[:1]), None)
                b.add("true_capacity", 0.4, "llama.cpp could not allocate its buffer on the GPU"
                      + (f" ({fb(x)})" if x else ""), LLAMA_CPP_FIX)
            elif server == TGI:  # its warmup's own figures are TGI's prefill and total tokens
                b.add("true_capacity", 0.4, "text-generation-inference ran out of memory in its warmup (the largest "
                      "prefill batch it is configured for)", SERVER_FIXES[TGI])
            else:
                b.add("true_capacity", 0.4, "an 'out of memory' message without numbers",
                      _capacity_fix(None, None, None, None))
            b.add("unknown", 0.2, "the message does not say which memory ran out")
    if k in ("torch_oom", "cuda_driver_oom", "torch_oom_legacy") and d.get("call_site") == EVAL_ACCUMULATION:
        # Trainer.evaluate()/predict() gather every step's logits on the GPU and concatenate them (trainer_pt_utils.py
        # nested_concat) until eval_accumulation_steps moves them to the CPU: memory that grows step after step through
        # the evaluation (dev: lo_transformers_7232, labelled leak_in_code; transformers#7232 added the argument)
        b.add("leak_in_code", 3.0, "the OOM is raised in the Trainer's nested_concat: evaluate() keeps every step's "
              "predictions on the GPU and concatenates them, so memory grows step after step through the evaluation",
              "TrainingArguments(eval_accumulation_steps=N): the predictions move to the CPU every N steps; shrink them "
              "first with preprocess_logits_for_metrics (e.g. the argmax of the logits), or prediction_loss_only=True "
              "when no metric needs them")
    if k in ("torch_oom", "cuda_driver_oom", "torch_oom_legacy") and str(d.get("call_site", "")).startswith("loading a checkpoint"):
        # torch.load puts each tensor back on the device it was saved from (cuda:0) unless map_location
        # says otherwise (torch.load docs): every rank of a multi-GPU job loads onto GPU 0.
        b.add("other_process", 1.5, "the OOM is raised inside torch.load: a checkpoint saved on cuda:0 is loaded back "
              "onto cuda:0 by every process unless map_location says otherwise, so GPU 0 holds every rank's copy",
              "torch.load(path, map_location=f'cuda:{local_rank}') or map_location='cpu', then move the model")
    if d.get("in_dataloader_worker") and k in ("host_alloc", "cuda_driver_oom"):
        b.add("shm_exhausted", 0.8, "raised inside a DataLoader worker, where batches travel through /dev/shm", SHM_FIX)


def _tf_reserve_failed(b: Board, alone: bool = False) -> None:
    """TensorFlow's allocator reserves its pool 'from device' at start-up: failing there means the device
    was already taken (whichever kind the line was read as). `alone`: the event is that reservation
    only (no tensor allocation failed after it), which is as strong as the CUDA-driver reading of it."""
    b.add("other_process", 2.4 if alone else 1.4, "TensorFlow failed to reserve memory from the device at start-up: "
          "something else already holds it", "check nvidia-smi; set TF_FORCE_GPU_ALLOW_GROWTH=true")


def _tf_startup(env: dict[str, list[str]]) -> tuple[list[int], list[int]]:
    """The device's total and free memory as TensorFlow 1.x printed them before it allocated anything."""
    from oomdoctor.explain.patterns import sizes_in

    return (sizes_in(" ".join(env.get("tf_total_memory", [])[:1])), sizes_in(" ".join(env.get("tf_free_memory", [])[:1])))


def _tf_startup_free(env: dict[str, list[str]], b: Board) -> None:
    tot, free = _tf_startup(env)
    if tot and free and free[0] < 0.5 * tot[0]:
        b.add("other_process", 2.4, f"TensorFlow found only {fb(free[0])} free of {fb(tot[0])} before it allocated "
              "anything: other processes hold the rest", "stop them (nvidia-smi) or pick another GPU")


_FRAG_FIX_BY_KIND = {"jax_oom": JAX_FRAG_FIX, "tf_oom": TF_FRAG_FIX, "torch_oom": ALLOC_CONF_FIX}
_TF_SHAPE = re.compile(r"OOM when allocating tensor with shape\s?\[([0-9, ]+)\] and type (\w+)")
_TF_DTYPE_BYTES = {"float": 4, "double": 8, "half": 2, "bfloat16": 2, "int8": 1, "uint8": 1, "bool": 1, "int16": 2,
                   "uint16": 2, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8, "complex64": 8, "complex128": 16}


def _tf_tensor(text: str, b: Board) -> None:
    """The tensor TensorFlow could not allocate, from its shape and type in the message: how big it was."""
    m = _TF_SHAPE.search(text)
    size = _TF_DTYPE_BYTES.get(m.group(2)) if m else None
    if m is None or size is None:
        return
    for d in m.group(1).split(","):
        size *= int(d)
    b.add("true_capacity", 0.0, f"the tensor it could not allocate, shape [{m.group(1)}] of {m.group(2)}, takes "
          f"{fb(size)}")


def _card(env: dict[str, list[str]]) -> tuple[int, str] | None:
    """The GPU the log names, in bytes of its smallest model (knowledge.gpus), and its name; None if unknown."""
    for name in env.get("gpu_name", []):
        gib = physical_gib(name)
        if gib:
            return int(gib * GIB), name
    return None


def _xla_program(x: int | None, env: dict[str, list[str]], b: Board) -> None:
    """XLA's BufferAssignment stats (printed under a JAX OOM): 'total allocation' is what the compiled program needs in
    all, the failed allocation one part of it. Against the card the log names: a program larger than the card does not
    fit whatever the pool's settings (a walkthrough, session 28: 14.44 GiB on a 12 GB card, never read)."""
    from oomdoctor.explain.patterns import sizes_in

    sizes = sizes_in(" ".join(env.get("xla_total_allocation", [])[:1]))
    if not sizes:
        return
    need, card = sizes[0], _card(env)
    plan = (f"XLA's plan for the compiled program needs {fb(need)} in all (the 'total allocation' of its "
            "BufferAssignment stats)" + (f", the {fb(x)} that failed being part of it" if x else ""))
    if card is not None and need > card[0]:
        b.add("true_capacity", 1.0, f"{plan}: more than the whole {card[1]} ({fb(card[0])}), so it does not fit on "
              "this card whatever the allocator does", "shrink the program: a smaller batch or sequence length, "
              "jax.checkpoint to rematerialise activations, or shard it over more devices; XLA_PYTHON_CLIENT_* "
              "settings cannot make room that the card does not have")
    elif card is not None and need > 0.75 * card[0]:
        b.add("true_capacity", 0.0, f"{plan}: more than the 75% of the {card[1]} that JAX takes by default "
              f"({fb(int(0.75 * card[0]))})")
    else:
        b.add("true_capacity", 0.0, plan)


LEAK_FIX = ("look for tensors kept across steps: `total_loss += loss` (use loss.item()), outputs appended to "
            "lists (append .detach().cpu()), evaluation without torch.no_grad(), hidden states not detached")


# Words that deny a pool setting on its own line ("allow_growth = True but still ...", "even with set_memory_growth the
# error persists", "set_memory_growth is not working"), beyond what fix_denied finds on any line of the text.
POOL_DENIED = re.compile(r"(?i)\b(?:still|no luck|(?:is|are|was|were)?n[o']t (?:help|work|fix|solv)\w*|without (?:success|luck)|"
                         r"nothing changed|even (?:with|after|when|if)|persists?|persisted)")
_POOL_NAME = re.compile(r"allow_growth|set_memory_growth|TF_FORCE_GPU_ALLOW_GROWTH|XLA_PYTHON_CLIENT_PREALLOCATE|"
                        r"gpuarray\.preallocate|lib\.cnmem")


def _pool_limit(ev: OomEvent, status: str, env: dict[str, list[str]], b: Board) -> None:
    """A cuDNN/cuBLAS handle or workspace that could not be had while the text names the framework's own
    start-up pool (TensorFlow takes nearly all of the GPU unless allow_growth is set; JAX 75%; Theano's
    gpuarray.preallocate): the libraries allocate outside that pool, so the pool's share, not the job, is what
    left them no room. In dev such reports were fixed by allow_growth / a smaller preallocation (session 11)."""
    if not status.endswith(("ALLOC_FAILED", "NOT_INITIALIZED", "INTERNAL_ERROR")) or "when calling `" in ev.text:
        return  # (PyTorch's wording, "... when calling `cublasCreate(handle)`": it takes no start-up pool; review, session 11)
    tot, free = _tf_startup(env)
    if tot and free and free[0] >= 0.9 * tot[0]:
        # TensorFlow 1.x found the card all but empty before it took its pool: no other process filled it. Above
        # the handle's default reading (context_or_driver 2.0), which it had only tied, the word prior deciding
        # (session 13: the logistic prior leaned the other way on this round-ac1 dev text)
        b.add("gpu_sharing_limit", 2.2, f"{status} although TensorFlow found {fb(free[0])} of {fb(tot[0])} free at start-up: "
              "its own pool took the card and left the library's handle no room",
              "TF_FORCE_GPU_ALLOW_GROWTH=true (or gpu_options.allow_growth = True)")
    said = [m.group(0) for v in env.get("pool_setting", []) if not POOL_DENIED.search(v) and (m := _POOL_NAME.search(v))]
    if said and not env.get("fix_denied"):
        b.add("gpu_sharing_limit", 2.4, f"{status} while the text names the framework's start-up pool ({said[0]}): "
              "cuDNN/cuBLAS allocate outside the pool that TensorFlow/JAX/Theano take at start-up, so its share leaves "
              "them no room", "let the pool grow instead of taking the GPU at start-up (TF_FORCE_GPU_ALLOW_GROWTH=true, "
              "XLA_PYTHON_CLIENT_PREALLOCATE=false, a smaller gpuarray.preallocate)")


def leak_rules(readings: dict[str, list[tuple[float, int]]], b: Board, env: dict[str, list[str]] | None = None) -> None:
    """Memory that keeps rising step after step: PyTorch FAQ 'Don't accumulate history across your
    training loop' (docs/notes/faq: 'My model reports cuda runtime error(2): out of memory')."""
    if env and env.get("growth"):
        # the figures at the failure cannot tell a leak from a job that is too big (a leak fills the GPU
        # too): growth the text reports outweighs a full GPU's true_capacity (2.2 + the word prior's 0.5)
        b.add("leak_in_code", 3.0, f"the text reports memory that keeps growing ('{env['growth'][0]}'), the "
              "symptom of history kept across iterations (PyTorch FAQ)", LEAK_FIX)
    for label, series in readings.items():
        if len(series) < 6:
            continue
        vals = [v for _, v in sorted(series)][1:]  # the first step allocates optimizer state
        k = len(vals) // 3
        first, mid, last = vals[:k], vals[k:2 * k], vals[2 * k:]
        a, m, z = (sum(x) / len(x) for x in (first, mid, last))
        ups = sum(1 for p, q in zip(vals, vals[1:]) if q >= p) / (len(vals) - 1)
        if a > 0 and z >= 1.15 * a and m > a and z > m and ups >= 0.7 and z - a >= 256 * 1024**2:
            b.add("leak_in_code", 3.2, f"'{label}' rises from {fb(vals[0])} to {fb(vals[-1])} over "
                  f"{len(series)} readings and does not level off", LEAK_FIX)
            return


# A memory fraction at or below this is a cap the job set for itself (0.85-0.95 are the frameworks' usual
# headroom: on dev, reports naming 0.85-0.9 were fragmentation, leaks, a driver; those naming 0.1-0.5 were
# the cap).
MEM_FRACTION_CAP = 0.75


def prose_rules(ev: OomEvent, b: Board, env: dict[str, list[str]]) -> None:
    """What the reporter wrote around a GPU OOM: the words that point at another holder of the memory
    or at fragmentation. Weaker when the message's own numbers are there to weigh."""
    numeric = "requested_bytes" in ev.numbers and "total_bytes" in ev.numbers
    # TensorFlow's start-up line says how much was free before this process took any, whatever the
    # failure line that follows looks like (a TF OOM, CUDA's own 'out of memory', a bare 'OOM')
    _tf_startup_free(env, b)
    if ev.kind == "reported_failure" and _HOST_MEMORY.search(ev.text) and not _GPU_MEMORY.search(ev.text):
        b.add("host_oom", 1.6, f"the text reports the host's memory running out ('{ev.text[:80]}'), not the GPU's",
              "give the job more host RAM (container/cgroup limit, node size) or load weights lazily "
              "(low_cpu_mem_usage=True, mmap, smaller shards)")
    if env.get("other_holder"):
        b.add("other_process", 1.4 if numeric else 2.4, f"the text says the memory is held elsewhere "
              f"('{env['other_holder'][0]}'): an earlier run, a leftover process or every rank on one GPU",
              "list what holds the GPU (nvidia-smi --query-compute-apps=pid,used_memory --format=csv); kill "
              "leftovers, and give each worker its own GPU (torch.cuda.set_device(local_rank) before any CUDA call)")
    shares = [float(v) for v in env.get("mem_fraction", [])]
    T, P = ev.numbers.get("total_bytes"), ev.numbers.get("process_bytes")
    # (not where the event's own figures weighed the cap: vLLM's memory profile, _vllm_profile_rules)
    if shares and shares[-1] <= MEM_FRACTION_CAP and not (T and P and P >= 0.9 * T) and "vllm_profile" not in ev.details:
        # (the last value the text sets; not where the message shows this process holding the whole GPU)
        # the job capped its own share of the GPU: the cap, not the card, is what ran out (a fraction near 1
        # is the usual default headroom and says nothing)
        b.add("gpu_sharing_limit", 1.6 if numeric else 2.6, f"the text sets the job's share of the GPU to "
              f"{shares[-1]:g} ('{env['mem_fraction'][-1]}' in the memory-fraction setting): the cap, not the GPU, "
              "is what ran out", "raise the fraction (or drop the cap) when nothing else shares the GPU, or lower "
              "the job's need to fit its share")
    if env.get("leak_words"):
        b.add("leak_in_code", 1.4 if numeric else 2.4, f"the text describes history kept across iterations "
              f"('{env['leak_words'][0]}')", LEAK_FIX)
    said = [v.strip() for v in env.get("leak_said", []) if not LEAK_DENIED.search(v)]
    if said:
        # what the reporter calls it, weighed as their description of kept history is (leak_words)
        b.add("leak_in_code", 1.4 if numeric else 2.4, f"the reporter calls it a memory leak ('{said[0]}')", LEAK_FIX)
    if env.get("late_failure") and not env.get("growth"):
        b.add("leak_in_code", 0.8 if numeric else 1.4, f"the job ran for a while before it failed "
              f"('{env['late_failure'][0]}'): memory that grows step after step does that", LEAK_FIX)
    if env.get("fragmentation_words"):
        b.add("fragmentation", 1.2 if numeric else 2.2, "the text reports fragmentation: free memory exists but "
              "not in one block", _FRAG_FIX_BY_KIND.get(ev.kind, "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
                                                        "(PyTorch); TF_GPU_ALLOCATOR=cuda_malloc_async (TensorFlow); "
                                                        "XLA_PYTHON_CLIENT_ALLOCATOR=platform (JAX)"))


def bundle_events(facts: FactSet | None) -> list[OomEvent]:
    """OOM kills the bundle saw (k8s terminations, kernel log, cgroup counters): a SIGKILLed job often
    leaves no error in its own log, so these are events too."""
    if facts is None:
        return []
    out: list[OomEvent] = []
    for t in facts.value("k8s.terminations") or []:
        if isinstance(t, dict) and (t.get("reason") == "OOMKilled" or t.get("exit_code") == 137):
            out.append(OomEvent("k8s_oomkilled" if t.get("reason") == "OOMKilled" else "exit_137", 0,
                                f"{t.get('pod')}/{t.get('container')}: {t.get('reason')} exit code {t.get('exit_code')}",
                                source=str(t.get("file") or facts.source("k8s.terminations"))))
    for k in (facts.value("kernel.oom_kills") or [])[:5]:
        if isinstance(k, dict):
            ev = OomEvent("kernel_oom", int(k.get("line") or 0), str(k.get("text") or k.get("reason") or "oom kill"),
                          source=facts.source("kernel.oom_kills"))
            if k.get("shmem_rss_kb"):
                ev.details["shmem_rss_bytes"] = int(k["shmem_rss_kb"]) * 1024
            out.append(ev)
    kills = facts.value("cgroup.oom_kill")
    if not out and isinstance(kills, int) and kills > 0:
        out.append(OomEvent("kernel_oom", 0, f"cgroup memory.events oom_kill {kills}", source=facts.source("cgroup.oom_kill")))
    return out


_UNKNOWN = object()  # the failing GPU's NVML index cannot be told (several GPUs, the job's CUDA_VISIBLE_DEVICES unknown)


def _failing_gpu(facts: FactSet, primary: OomEvent | None) -> int | None | object:
    """The NVML index of the GPU the message names: None when the machine has one GPU (nothing to tell
    apart), _UNKNOWN when the CUDA index cannot be mapped (with --here the job's CUDA_VISIBLE_DEVICES is
    not known; a bundle records it)."""
    from oomdoctor.facts.gpu import gpus

    if len(gpus(facts)) <= 1:
        return None
    g = primary.details.get("gpu") if primary is not None else None
    if not isinstance(g, int):
        return _UNKNOWN
    entry = facts.get("runtime.cuda_visible_devices")
    if entry is None or not entry.available:
        return _UNKNOWN
    visible = entry.value
    if not visible:
        return g  # not set: CUDA's index is NVML's (CUDA_DEVICE_ORDER aside)
    parts = [x.strip() for x in str(visible).split(",")]
    return int(parts[g]) if g < len(parts) and parts[g].isdigit() else _UNKNOWN


def _co_tenants(facts: FactSet, primary: OomEvent | None, b: Board, physical: int | None | object) -> bool:
    """Other processes NVML saw on the failing GPU. They explain the failure when, without them, the failed
    request would have had room (a co-tenant smaller than what was missing did not cause it; H200: a job
    needing 120% of the GPU beside a 5% co-tenant). Processes the message itself listed were weighed by
    its rule already: NVML seeing them again is the same witness (H200: a job needing 150% beside a 20%
    co-tenant read 0.96 sure of the co-tenant). validation/explain_here_gpu.py; review, session 12."""
    nums = primary.numbers if primary is not None else {}
    own, total, free, x = (nums.get(k) for k in ("process_bytes", "total_bytes", "free_bytes", "requested_bytes"))
    card, named, unnamed = _nvml_others(facts, primary, physical)
    src = facts.source("sharing.processes")
    fix = "stop them or schedule this job on another GPU"
    used = False
    if named and sum(int(p.get("used_bytes") or 0) for p in named) >= GIB:
        b.add("other_process", 0.5, f"NVML still sees the process(es) the message names ({src})", fix)
        used = True
    held = sum(int(p.get("used_bytes") or 0) for p in unnamed)
    if held < GIB:
        return used
    gap = unaccounted(primary) if primary is not None and primary.count == 1 else None
    if gap is not None and gap < GIB:
        # The message's breakdown (free, this process, the processes it lists) covers the whole failing GPU:
        # at the failure no other process held memory there, whatever NVML sees now (on another card, or
        # started since). H200 x4, session 15: a co-tenant on another card halved a right answer's confidence.
        # (One message only: repeated ones may be other ranks' on other cards, merged under the first's figures.)
        b.add("other_process", 0.0, f"NVML now sees {len(unnamed)} other process(es) holding {fb(held)}, but the "
              f"message accounts for all of the failing GPU's memory: they were not on it when it failed ({src})")
        return True
    where = f"{len(unnamed)} other process(es) holding {fb(held)} on " + (
        "some GPU of this machine (which one the job used is not known)" if physical is _UNKNOWN else "the GPU") + f" ({src})"
    # what would have been free without them: the message's free figure plus theirs, or the GPU less the job's own
    room = held + free if free is not None else (total - own if total is not None and own is not None else None)
    if total is None and card:  # a message without numbers: the card's own size (NVML)
        total = card.get("memory_total_bytes")
    if x is None:
        small = total is not None and held < 0.1 * total
        w, note = (1.0, "; a small share of the GPU") if small else (3.0, "")
    elif room is None and held < x:
        w, note = 2.0, f"; whether the {fb(x)} requested would have fitted without them the text does not say"
    elif room is not None and room < x:
        w, note = 1.0, f"; without them the {fb(x)} requested would still not fit ({fb(room)})"
    else:
        w, note = 3.0, ""
    if physical is _UNKNOWN:
        w = min(w, 1.5)
    b.add("other_process", w, where + note, fix)
    return True


def _nvml_others(facts: FactSet, primary: OomEvent | None,
                 physical: int | None | object) -> tuple[dict | None, list, list]:
    """The failing card (None where it cannot be told) and NVML's processes on it (on every card where it
    cannot be told) other than this job: those the message names, and the rest."""
    from oomdoctor.facts.gpu import gpus, procs_on

    nums = primary.numbers if primary is not None else {}
    own = nums.get("process_bytes")
    cards = gpus(facts)
    card = next((c for c in cards if c["index"] == physical), cards[0] if len(cards) == 1 else None)
    on_card = procs_on(facts, card) if isinstance(physical, int) and card else facts.value("sharing.processes") or []
    procs = [p for p in on_card if isinstance(p, dict) and not p.get("self")]
    if own is not None:  # the job itself, seen by the bundle's NVML query (its use plus at most a context)
        procs = [p for p in procs if not (own - GIB <= int(p.get("used_bytes") or 0) <= own + CONTEXT_MAX)]
    listed = {p.get("pid") for p in (primary.details.get("other_processes") or [])} if primary is not None else set()
    return card, [p for p in procs if p.get("pid") in listed], [p for p in procs if p.get("pid") not in listed]


def _pinned_limit(value: object, gpu: object) -> int | None:
    """CUDA_MPS_PINNED_DEVICE_MEM_LIMIT for the CUDA device the message names (MPS names devices by the client's
    CUDA ordinal, as the message does: validation/explain_here_gpu2.py run 3); None where not set."""
    from oomdoctor.units import parse_device_limits

    limits = parse_device_limits(value)
    return limits.get(str(gpu if isinstance(gpu, int) else 0), limits.get("*"))


def _mps_weight(facts: FactSet, primary: OomEvent | None, physical: int | None | object) -> tuple[float, str]:
    """How much MPS being there says, from the message's figures (MPS leaves the total at the card's size and
    lists its clients in NVML; H200, session 15, validation/explain_here_gpu2.py: a pinned limit, a job too big
    for the whole card, a second client holding memory; review, session 15: a limit in hand decides, and
    without one a gap NVML cannot explain may also be a co-tenant that has left)."""
    n = primary.numbers if primary is not None else {}
    t, f, x = (n.get(k) for k in ("total_bytes", "free_bytes", "requested_bytes"))
    own = own_figure(n.get("process_bytes"), n.get("reserved_bytes"), n.get("allocated_bytes"),
                     n.get("reserved_unallocated_bytes"), t)
    if t is not None and own is not None and x is not None and own + x > t:
        return 0.3, (f"; but this job alone ({fb(own)} held, {fb(x)} asked) needs more than the whole card "
                     f"({fb(t)}): no MPS limit refused it")
    mps = facts.value("sharing.mps")
    limit = _pinned_limit(mps.get("pinned_device_mem_limit"), primary.details.get("gpu") if primary else None) \
        if isinstance(mps, dict) else None
    if limit is not None and own is not None and x is not None:
        return _limit_verdict(limit, own, x, 0, "MPS pinned limit")[:2]
    gap = unaccounted(primary) if primary is not None else None
    if is_gap(gap, t):
        _, _, unnamed = _nvml_others(facts, primary, physical)
        seen = sum(int(p.get("used_bytes") or 0) for p in unnamed)
        if seen < gap / 2:
            now = f"NVML sees other processes holding only {fb(seen)} of it" if seen else "NVML sees no process holding it"
            return 2.5, (f"; the message leaves {fb(gap)} of the card unexplained and {now}: the free figure is "
                         "what an MPS pinned-memory limit left (the daemon's default, not visible here), unless a "
                         "co-tenant has left since")
    others = sum(int(p.get("bytes") or 0) for p in (primary.details.get("other_processes") or [])) if primary else 0
    if t is not None and f is not None and others >= 0.1 * t and (x is None or f + others >= x):
        return 1.0, "; the processes the message lists hold the memory (MPS clients share the card)"
    return 2.0, ""


def _hami_weight(facts: FactSet, primary: OomEvent | None) -> tuple[float, str, bool]:
    """How much HAMi being there says, and whether its limit in hand would have allowed the job: this job's memory,
    its request and the other processes the message lists (the limit is the container's, shared by its
    processes) against it. Inside a HAMi container CUDA's and NVML's totals are the limit (the hook rewrites both),
    so the card's size cannot be the measure (H200, session 19, validation/explain_here_hami.py: a limit set above
    the card and a job too big for the card read as the limit at 0.95)."""
    from oomdoctor.facts.gpu import hami_limit, truthy

    h = facts.value("sharing.hami")
    if not isinstance(h, dict) or primary is None:
        return 2.0, "", False
    if truthy(h.get("disabled")):
        return 0.3, "; but CUDA_DISABLE_CONTROL turns its limit off", True
    n = primary.numbers
    limit = hami_limit(h, primary.details.get("gpu"))
    own = own_figure(n.get("process_bytes"), n.get("reserved_bytes"), n.get("allocated_bytes"),
                     n.get("reserved_unallocated_bytes"), n.get("total_bytes"))
    x = n.get("requested_bytes")
    if limit is None or own is None or x is None:
        return 2.0, "", False
    # the processes the message lists share the limit only where the message's total is the limit (the hook in CUDA's
    # path, so the message sees the container); a co-tenant outside the container holds none of it (H200 run)
    t = n.get("total_bytes")
    inside = t is not None and abs(t - limit) <= 0.05 * limit
    others = sum(int(p.get("bytes") or 0) for p in (primary.details.get("other_processes") or [])
                 if isinstance(p, dict)) if inside else 0
    w, why, allowed = _limit_verdict(limit, own, x, others, "HAMi limit")
    if not allowed and h.get("oversubscribe"):
        return 2.0, why + ", which CUDA_OVERSUBSCRIBE lets spill", False
    return w, why, allowed


def _limit_verdict(limit: int, own: int, x: int, others: int, label: str) -> tuple[float, str, bool]:
    """A sharing layer's limit in hand decides (review, session 15): what this job holds, what it asked and what
    other processes under the same limit hold, against it. (weight, evidence, the limit allowed it)."""
    held = f"this job's {fb(own)} held" + (f", {fb(others)} of other processes" if others else "")
    if own + x + others <= limit:
        return 0.3, f"; but its {label} ({fb(limit)}) would have allowed {held} and {fb(x)} asked", True
    return 3.5, f"; {held} and {fb(x)} asked exceed its {label} ({fb(limit)})", False


def _nvml_hooked(facts: FactSet, gpu: dict) -> bool:
    """NVML's total is HAMi's limit (its hook rewrites nvmlDeviceGetMemoryInfo), not the card's."""
    from oomdoctor.facts.gpu import hami_limit

    h = facts.value("sharing.hami")
    if not isinstance(h, dict):
        return False
    limit = hami_limit(h, gpu.get("index"))
    nvml = gpu.get("memory_total_bytes")
    return limit is not None and isinstance(nvml, int) and abs(nvml - limit) <= 0.05 * limit


def _mps_server_runs(facts: FactSet) -> bool:
    from oomdoctor.facts.gpu import is_mps_server  # facts only come with --here / --bundle (rank.py)

    procs = facts.value("sharing.processes")
    return isinstance(procs, list) and any(is_mps_server(p) for p in procs if isinstance(p, dict))


def fact_rules(facts: FactSet | None, b: Board, kinds: set[str], primary: OomEvent | None) -> list[str]:
    """Environment evidence from a bundle (facts/keys.py). Returns the fact keys that were used."""
    if facts is None:
        return []
    used: list[str] = []
    nums = primary.numbers if primary is not None else {}
    total = nums.get("total_bytes")
    gpu_oom = bool(kinds & {"torch_oom", "cuda_driver_oom", "cublas_cudnn", "nccl_oom", "generic_oom"})
    from oomdoctor.facts.gpu import mig_enabled

    physical = _failing_gpu(facts, primary)
    mig = mig_enabled(facts, None if physical is _UNKNOWN else physical)
    if gpu_oom and not mig and _co_tenants(facts, primary, b, physical):
        used.append("sharing.processes")
    for key, label in (("sharing.hami", "HAMi"), ("sharing.vcuda", "gpu-manager/vcuda"), ("sharing.cgpu", "cGPU"),
                       ("sharing.mps", "MPS")):
        v = facts.value(key)
        if gpu_oom and v:
            allowed = False
            if key == "sharing.mps":
                w, why = _mps_weight(facts, primary, physical)
            elif key == "sharing.hami":
                w, why, allowed = _hami_weight(facts, primary)
            else:
                w, why = 2.0, ""
            if allowed:  # the limit in hand allowed the job: the layer's own log lines only said it was there
                w -= min(b.layer_hints.pop(key, 0.0), b.scores.get("gpu_sharing_limit", 0.0))
            if isinstance(v, dict) and v.get("daemon_gone") and not _mps_server_runs(facts):
                # killed without quit and no MPS server left: new clients run without MPS (H100, session 16);
                # its limit held only for a job that ran before it died (review, session 16): a lead at most
                w, why = min(w, 0.5), why + "; but its daemon no longer answers and no MPS server runs now"
            b.add("gpu_sharing_limit", w, f"the bundle shows {label} ({facts.source(key)}), whose limit applies "
                  "before the physical GPU's" + why, "raise the sharing layer's memory limit for this job")
            used.append(key)
    if gpu_oom and mig:
        b.add("gpu_sharing_limit", 1.6, "the GPU is split with MIG: the instance size is the capacity",
              "use a larger MIG profile (e.g. nvidia.com/mig-2g.20gb) or a whole GPU")
        used.append("sharing.mig")
    probe = facts.value("probe.context") or {}
    if isinstance(probe, dict) and probe.get("failures"):
        b.add("context_or_driver", 3.0, f"the context probe failed {probe['failures']} of {probe.get('attempts')} "
              "times on this node", "fix context creation first: driver, kernel, sharing layer (`oomdoctor doctor` "
              "lists them)")
        used.append("probe.context")
    kr = str(facts.value("kernel.release") or "")
    if "cuda_driver_oom" in kinds and kr.startswith("3.10"):
        b.add("context_or_driver", 0.6, f"host kernel {kr}: an EL7 kernel with a recent driver")
        used.append("kernel.release")
    shm = facts.value("shm.size_bytes")
    if isinstance(shm, int) and shm <= 64 * 1024**2 and kinds & {"shm_error", "dataloader_killed", "generic_oom"}:
        b.add("shm_exhausted", 1.5, f"/dev/shm is only {fb(shm)} (the Docker/containerd default)", None)
        used.append("shm.size_bytes")
    for key in ("cgroup.oom_kill", "kernel.oom_kills"):
        v = facts.value(key)
        if v and (not isinstance(v, int) or v > 0):
            b.add("host_oom", 2.0 if kinds & {"exit_137", "dataloader_killed", "host_alloc"} else 1.2,
                  f"{key} = {v if isinstance(v, int) else len(v)}: the OOM killer acted on this machine", HOST_FIX)
            used.append(key)
    gpus = facts.value("driver.gpus") or []
    # (not where HAMi's NVML hook is in the path: it reports the container's limit as the card's total, above the
    # card too when the limit is; H200, session 19. HAMi's plugin installs libvgpu.so on every node, so its mere
    # presence does not mean NVML is hooked)
    if total and gpus and isinstance(gpus[0], dict) and gpus[0].get("memory_total_bytes") and not _nvml_hooked(facts, gpus[0]):
        phys = int(gpus[0]["memory_total_bytes"])
        if total < 0.8 * phys:
            b.add("gpu_sharing_limit", 1.8, f"CUDA total {fb(total)} is far below the GPU's {fb(phys)} (NVML)")
            used.append("driver.gpus")
    return used


__all__ = ["Board", "bundle_events", "event_rules", "fact_rules", "leak_rules", "prose_rules"]
