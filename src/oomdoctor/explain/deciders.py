"""For each root cause: the one fact that confirms or rules it out, and one command that reads it.

A log alone often cannot separate causes (a bare `Killed`, an OOM without the `Process N has X in
use` breakdown). explain then says which fact decides and how to get it, and `explain --here` /
`--bundle` collect those facts themselves (collectors.machine.collect_deciding_facts). Pure data.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from oomdoctor.explain.framework import K8S_EXIT, LLAMA_CPP, TGI, VLLM_CACHE_BLOCKS


@dataclass(frozen=True)
class Decider:
    fact: str  # what to look at, in words
    command: str  # one command that shows it
    keys: tuple[str, ...] = ()  # the fact keys (facts/keys.py) that `--here` / `--bundle` use for it
    in_bundle: str = ""  # where a bundle keeps it (`oomdoctor doctor --bundle PATH` shows it), for keys


def bundle_command(d: Decider, bundle: str) -> str:
    """With --bundle the machine is another one: its facts are read from the bundle, not by a live command here
    (a walkthrough, session 26: `explain --bundle` said to run `oomdoctor doctor --probe`)."""
    return f"oomdoctor doctor --bundle {bundle}  # {d.in_bundle}" if d.in_bundle else d.command


DECIDERS: dict[str, Decider] = {
    "true_capacity": Decider("this job's own peak against the memory it may use",
                             "oomdoctor estimate WORKLOAD.py --max-batch (or print torch.cuda.max_memory_reserved() in the job)"),
    "fragmentation": Decider("reserved minus allocated at the failure (free memory inside PyTorch's cache)",
                             "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python train.py  # fixed: it was fragmentation"),
    "other_process": Decider("which processes hold memory on that GPU",
                             "nvidia-smi --query-compute-apps=pid,used_memory --format=csv", ("sharing.processes",),
                             "the processes in its commands/nvidia-smi-q.xml"),
    "leak_in_code": Decider("allocated memory per step (rising step after step)", "oomdoctor record -- python train.py"),
    "context_or_driver": Decider("whether a CUDA context can be created on the idle GPU",
                                 "oomdoctor doctor --probe", ("probe.context", "kernel.release"),
                                 "its commands/probe.json, if the bundle was made with `oomdoctor bundle --probe` on "
                                 "that node, and the kernel release"),
    "shm_exhausted": Decider("the size and use of /dev/shm", "df -h /dev/shm", ("shm.size_bytes",),
                             "/dev/shm's size in its proc/mounts"),
    "host_oom": Decider("the kernel's OOM kills (host or cgroup)", "dmesg -T | grep -iE 'killed process|oom-kill'",
                        ("kernel.oom_kills", "cgroup.oom_kill"),
                        "its commands/dmesg.txt and the cgroup's memory.events"),
    "gpu_sharing_limit": Decider("the sharing layer's limit against the physical GPU's memory",
                                 "oomdoctor doctor  # shows MIG, MPS, HAMi, gpu-manager and their limits",
                                 ("sharing.hami", "sharing.vcuda", "sharing.mps", "sharing.mig", "driver.gpus"),
                                 "MIG, MPS, HAMi, gpu-manager and their limits as the bundle recorded them"),
    "not_oom": Decider("the first CUDA error, reported where it happens",
                       "CUDA_LAUNCH_BLOCKING=1 python train.py"),
}


# The same question asked of another framework's allocator: a PyTorch command would not apply (a new user's
# walkthrough, session 25: a CuPy OOM was told to set PYTORCH_CUDA_ALLOC_CONF)
_PEAK = "this job's own peak against the memory it may use"
OLD_TORCH = "torch_oom<2.1"  # a PyTorch OOM in the message format of 2.0 and before (patterns._torch_format)
OLDEST_TORCH = "torch_oom<1.4"  # ... of 1.3 and before ("N cached"), which reads no PYTORCH_CUDA_ALLOC_CONF at all
_BY_FRAMEWORK: dict[tuple[str, str], Decider] = {
    ("fragmentation", "cupy_oom"): Decider("memory CuPy's pool holds but has not handed out (total_bytes - used_bytes)",
                                           "pool = cupy.get_default_memory_pool(); print(pool.used_bytes(), "
                                           "pool.total_bytes())  # in the job, before the failing step"),
    ("true_capacity", "cupy_oom"): Decider(_PEAK, "print(cupy.get_default_memory_pool().total_bytes())  # in the job, "
                                                  "at its largest step"),
    ("fragmentation", "jax_oom"): Decider("memory XLA's allocator holds but cannot hand out",
                                          "XLA_PYTHON_CLIENT_ALLOCATOR=platform python train.py  # fixed (and slower): "
                                          "it was fragmentation"),
    ("true_capacity", "jax_oom"): Decider(_PEAK, "print(jax.devices()[0].memory_stats()['peak_bytes_in_use'])"),
    ("fragmentation", "tf_oom"): Decider("TensorFlow's BFC allocator: its largest free chunk against the request (the "
                                         "memory summary it logs before the error)",
                                         "TF_GPU_ALLOCATOR=cuda_malloc_async python train.py  # fixed: it was "
                                         "fragmentation"),
    ("true_capacity", "tf_oom"): Decider(_PEAK, "print(tf.config.experimental.get_memory_info('GPU:0')['peak'])"),
    # PyTorch before 2.1 (its message's format) has no expandable_segments: the fix it was told was max_split_size_mb,
    # and the deciding run said expandable_segments (a walkthrough, session 27)
    ("fragmentation", OLD_TORCH): Decider("reserved minus allocated at the failure (free memory inside PyTorch's cache)",
                                          "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:512 python train.py  # fixed: it "
                                          "was fragmentation (this PyTorch predates expandable_segments)"),
    # PyTorch 1.3 and older have no allocator settings: the fix is an upgrade first (rules._frag_fix)
    ("fragmentation", OLDEST_TORCH): Decider("reserved minus allocated at the failure (free memory inside PyTorch's "
                                             "cache)", "pip install -U torch; PYTORCH_CUDA_ALLOC_CONF=expandable_segments"
                                             ":True python train.py  # fixed: it was fragmentation (PyTorch 1.3 and "
                                             "older read no allocator settings)"),
}
# Servers and runtimes: no WORKLOAD.py to estimate, and their own start-up lines say what the weights took
# (a walkthrough, session 27: vLLM's and llama.cpp's were sent to `oomdoctor estimate WORKLOAD.py`)
_VLLM_KV = Decider("the memory the weights and activations leave for the KV cache, and who else holds the GPU",
                   "grep -E 'Model loading took|Available KV cache memory|GPU blocks' vllm.log; "
                   "nvidia-smi --query-compute-apps=pid,used_memory --format=csv")
_BY_FRAMEWORK[("true_capacity", "vllm_capacity")] = _VLLM_KV
_BY_FRAMEWORK[("true_capacity", VLLM_CACHE_BLOCKS)] = _VLLM_KV
_BY_FRAMEWORK[("true_capacity", TGI)] = Decider(
    "the prefill and total tokens that fit beside the weights (TGI's warmup tries --max-batch-prefill-tokens)",
    "text-generation-launcher --model-id MODEL --max-batch-prefill-tokens 4096  # halve until the warmup passes")
_BY_FRAMEWORK[("true_capacity", LLAMA_CPP)] = Decider(
    "the buffers llama.cpp allocates (its log's MiB figures) against the GPU's free memory before it loads",
    "nvidia-smi --query-gpu=memory.used,memory.total --format=csv; then llama-cli -m MODEL -ngl 20 -c 4096  "
    "# fewer layers and a smaller context: the buffer sizes it logs fall")
# Whether llama.cpp's failure is memory at all: with nothing offloaded the GPU's memory is out of the question (a
# walkthrough, session 28: llama.cpp was told `CUDA_LAUNCH_BLOCKING=1 python train.py`)
_BY_FRAMEWORK[("not_oom", LLAMA_CPP)] = Decider(
    "whether the model runs with no layers on the GPU",
    "llama-cli -m MODEL -ngl 0 -c 2048 -p hi  # (ollama: PARAMETER num_gpu 0) it runs: the GPU's memory was short; "
    "the same error: not a shortage of memory")
# The servers' own launch in place of a training script in the generic commands (TGI and vLLM run PyTorch, so its
# settings apply); llama.cpp runs no PyTorch: a command naming it or a training script is no decider there
_LAUNCH = {TGI: "text-generation-launcher --model-id MODEL", VLLM_CACHE_BLOCKS: "vllm serve MODEL",
           "vllm_capacity": "vllm serve MODEL"}
# A container's SIGKILL as Kubernetes recorded it: who sent it is in the pod's events, not in a rerun of the job with
# CUDA_LAUNCH_BLOCKING (a new user's walkthrough, session 28)
_BY_FRAMEWORK[("not_oom", K8S_EXIT)] = Decider(
    "who killed the container: the pod's events (a failed liveness probe, a preemption, an eviction) beside the "
    "reason Kubernetes recorded (OOMKilled or Error)",
    "kubectl get events --field-selector involvedObject.name=POD  # Liveness probe failed / Killing / Preempting")
_NVSMI_PEAK = Decider(_PEAK, "nvidia-smi --query-gpu=memory.used,memory.total --format=csv -l 1  # while the job "
                             "runs: its highest reading")
for _kind in ("rmm_oom", "ort_oom"):  # no allocator statistics of their own to name here: the device's reading
    _BY_FRAMEWORK[("true_capacity", _kind)] = _NVSMI_PEAK


def decider(category: str, kind: str = "") -> Decider | None:
    """The fact that decides `category`, asked of the allocator of the event's framework (`kind`)."""
    own = _BY_FRAMEWORK.get((category, kind))
    if own is not None:
        return own
    d = DECIDERS.get(category)
    if d is None or "train.py" not in d.command:
        return d
    if kind == LLAMA_CPP:
        return None
    return replace(d, command=d.command.replace("python train.py", _LAUNCH[kind])) if kind in _LAUNCH else d
