"""What OOM-like lines look like, across frameworks and layers, and the numbers they carry.

Each pattern is the exact wording of a documented message; the comment names the source (PyTorch
c10/cuda/CUDACachingAllocator.cpp OOM text [OOMTXT] and its history in
docs/reference/memory-tools-and-papers.md §4.5, environment-facts.md §1e, §4, §6, §7, §9).
Pure: text in, (kind, numbers, details) out.
"""

from __future__ import annotations

import itertools
import re
import threading
from typing import Any

from oomdoctor.explain.gates import GateIndex
from oomdoctor.explain.mentions import (
    CJK_CHAR,
    CJK_HEDGE,
    CJK_LETTERS,
    ERROR_WORDS,
    EXAMPLE_INTRO,
    GENERAL_STATEMENT,
    WARN_LEVEL,
    docs_clause,
    is_mention,
)
from oomdoctor.units import torch_size_to_bytes

_U = r"(bytes|[KMGT]iB|[KMGT]B|B)"
# CJK letters with CJK punctuation and fullwidth forms ("报错：Killed", "「Killed」"): a regex class body
_CJK_TEXT = CJK_LETTERS + "\u3000-\u303f\uff00-\uffef"
_N = r"([0-9][0-9,]*(?:\.[0-9]+)?)"
# TensorFlow's BFC warning when its caller can do without the block (classify_line reads it first: _BFC_CAUGHT)
BFC_CAUGHT = r"ran out of memory trying to allocate [^\n]{1,200}?The caller indicates that this is not a failure"

# (kind, regex). Order matters: the first match names the line. Kinds are the `kind` of JSON events.
LINE_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple((k, re.compile(p)) for k, p in (
    # HAMi-core allocator.c: oom_check() refuses past the pod's limit and logs "Device %d OOM %lu / %lu"
    # [HAMIOOM]; "cuMemoryAllocate failed res=%d" is logged after oom_check passed, when the real
    # driver allocation failed (res=2 = CUDA_ERROR_OUT_OF_MEMORY: the physical GPU had no room).
    # A job that caught its OOM and went on (a marker, not a failure): Lightning's BatchSizeFinder
    # ("Batch size N failed, trying batch size M", lightning tuner/batch_size_scaling.py), fairseq's
    # trainer ("attempting to recover from OOM in forward/backward pass", "ran out of memory, skipping
    # batch"), and loops that skip a batch on OOM.
    # Composer's auto-microbatching: "Train microbatch size decreased from 2048 -> 1024, and the batch will be retrained"
    ("oom_recovered", r"Batch size \d+ failed, trying batch size \d+|attempting to recover from OOM|"
                      r"[Bb]atch size decreased from \d+ ?(?:->|to) ?\d+|"
                      # TensorRT's builder skips the tactics its workspace cannot hold and builds the engine ("Some tactics
                      # do not have ...", "Skipping tactic 13 due to insufficient memory ...");
                      # DeepSpeed counts the caching allocator's retries (cudaMalloc failed, the cache was
                      # freed, the retry worked): "2 pytorch allocator cache flushes since last step"
                      r"Some tactics do not have sufficient workspace memory|Skipping tactic (?:0x)?[0-9a-f]+ due to (?:insufficient memory|insuficient memory|oom error on requested size)|(?<!\d)\d+ pytorch allocator cache flushes since last step|"
                      r"(?:[Oo]ut of memory|\bOOM\b)[^\n]{0,60}\b[Ss]kipp(?:ing|ed) (?:this |the )?batch|"
                      r"\b[Ss]kipp(?:ing|ed) (?:this |the )?batch[^\n]{0,60}(?:[Oo]ut of memory|\bOOM\b)|"
                      r"(?:[Oo]ut of memory|\bOOM\b)[^\n]{0,80}\b(?:retrying with|falling back to|fall back to)\b|"
                      # a library that logs the allocator's whole message and says on that line how it goes on
                      # (bio_embeddings: "... CUDA out of memory. Tried to allocate ... Will try to embed each sequence
                      # in the set individually on the GPU."; session 11, round ab dev). Only after the allocator's own
                      # "Tried to allocate": a reporter's "Same OOM. Will try to run it on the CPU" is a plan, not a
                      # recovery (review, session 11).
                      r"[Oo]ut of memory\. Tried to allocate [^\n]{0,300}\bWill try to [^\n.]{0,80}?\b(?:individually|one by one|separately|on (?:the )?CPU\b|with (?:a )?smaller)|"
                      # llama.cpp: "failed to find free space in the KV cache, retrying with smaller batch size"
                      r"free space in the KV cache, retrying with smaller batch|"
                      # sglang's scheduler retracts requests when decoding runs out of KV cache and goes on
                      r"Decode out of memory happened\. #retracted_reqs|"
                      # a loop that catches the OOM of one input and goes on to the next (esm-fold:
                      # "Failed (CUDA out of memory) on sequence hipAB-900 of length 918.")
                      r"\b[Ff]ailed \((?:CUDA out of memory|[Oo]ut of memory|OOM)\) (?:on (?:sequence|sample|item|input|image|file|batch)\b|to predict batch of size \d)"),
    # A library that met the shortage itself and went on, printing no OOM of its own first (session 9, round z10
    # dev): TensorRT 7/8's builder rejecting a tactic ("Tactic Device request: 2304MB Available: 1536MB. Device
    # memory is insufficient to use tactic."), Detectron2's retry_if_cuda_oom re-running a function on the CPU,
    # vLLM preempting a request for lack of KV cache. Each is a recovered OOM by itself and recovers no other
    # event (kinds.SELF_CONTAINED: review, session 9).
    # TensorFlow's BFC allocator, when the caller can do without the block (a convolution algorithm's
    # workspace, an autotuning trial): "Allocator (GPU_0_bfc) ran out of memory trying to allocate 2.15GiB.
    # The caller indicates that this is not a failure, but may mean that there could be performance gains
    # if more memory were available" (tensorflow/core/common_runtime/bfc_allocator.cc): the shortage was met
    # and the op went on (session 17; it had been read as a mention, no event at all).
    ("oom_caught", r"Device memory is insufficient to use tactic|Attempting to copy inputs of [^\n]{1,200}? to CPU due to CUDA OOM|"
                   r"is preempted by PreemptionMode\.\w+ mode because there is not enough KV cache space|" + BFC_CAUGHT),
    # YOLOv5/Ultralytics AutoBatch (utils/autobatch.py): its profiler logs a batch size that ran out of
    # memory as a warning, then settles on a smaller one. A recovery only after an OOM (kinds.py).
    ("autobatch_settled", r"AutoBatch: Using batch-size \d+ for "),
    # (its predecessor, 4paradigm's k8s-vgpu-scheduler, logged the same line as "[4pdvGPU ERROR ...]")
    ("hami_oom", r"\[(?:HAM[Ii]-core|4pdvGPU) ERROR[^\]\n]{0,200}\]:\s*Device \d+ OOM"),  # "HAMi-core" as blogs retype it
    ("hami_device_full", r"cuMemoryAllocate failed res=2\b"),
    # PyTorch raises this assert while building the OOM message when NVML cannot report processes,
    # e.g. inside a MIG instance (pytorch/pytorch#112377): an OOM whose message was lost.
    ("torch_oom_nvml", r"NVML_SUCCESS == .{0,200}INTERNAL ASSERT FAILED at .{0,160}CUDACachingAllocator\.cpp"),
    # TensorRT's default allocator (IGpuAllocator): "Error Code 1: Cuda Runtime (out of memory)".
    ("tensorrt_oom", r"Cuda Runtime \(out of memory\)|Requested amount of GPU memory \(\d+ bytes\) could not be allocated"),
    # NCCL's CUDACHECK prints "Cuda failure '<cudaGetErrorString>'" (nccl src/include/checks.h), some releases
    # with the error's number ("Cuda failure 2 'out of memory'", NCCL 2.20), nccl-tests with its file and line.
    # Without NCCL_DEBUG the warning is not printed, but PyTorch's DistBackendError carries NCCL's last error on
    # its own lines: "ncclUnhandledCudaError: Call to CUDA function failed." / "Last error:" / "Cuda failure 'out
    # of memory'" (session 27 walkthrough: no event, the report anchored at "Traceback").
    ("nccl_oom", r"NCCL WARN .*Cuda failure (?:\d+ )?'?out of memory|ncclUnhandledCudaError.*out of memory|"
                 r"(?:^\s*|\]:? ?|: )Cuda failure (?:\d+ |\S+:\d+ )?'out of memory'"),  # as printed, not in prose
    # Caching allocator, 1.0 .. 2.x and ROCm ("HIP out of memory") [OOMTXT]; Apple MPS backend.
    # With the cudaMallocAsync backend (PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync; CUDAMallocAsyncAllocator.cpp) the
    # message is "Allocation on device 0 would exceed allowed memory. (out of memory)" and its figures on the lines
    # after it ("Currently allocated : ...", "Requested : ...", "Device limit : ...", "Free (according to CUDA): ...",
    # "PyTorch limit (set by user-supplied memory fraction) : ..."; _ASYNC_FIELDS).
    ("torch_oom", r"\b(?:CUDA|HIP|XPU) out of memory\b|Tried to allocate [0-9.]+ ?[KMGT]?i?B \(GPU \d+;|"
                  r"\bAllocation on device \d+ would exceed allowed memory\. \(out of memory\)"),
    ("mps_oom", r"MPS backend out of memory"),
    # THC era (<= 0.4): "cuda runtime error (2) : out of memory at .../THCStorage.cu" (§4.5).
    # the same error as THC's check prints it (PyTorch <= 0.4): "THCudaCheck FAIL file=.../THCStorage.cu line=58
    # error=2 : out of memory" (session 9, round z9)
    ("torch_oom_legacy", r"cuda runtime error \(2\) ?: ?out of memory|THCudaCheck FAIL file=\S+ line=\d+ error=2 ?: ?out of memory"),
    # TensorFlow: ResourceExhaustedError / "OOM when allocating tensor" (tf BFC allocator),
    # and the StreamExecutor line "failed to allocate X (N bytes) from device: CUDA_ERROR_OUT_OF_MEMORY"
    # (TensorFlow-ROCm: "... from device: hipError_t(1002)", HIP's out-of-memory code then).
    ("tf_oom", r"ResourceExhaustedError|OOM when allocating tensor|failed to allocate .* from device: (?:CUDA_ERROR_OUT_OF_MEMORY|hipError_t\(1002\))|"
               r"Allocator \(\w+\) ran out of memory trying to allocate"),
    # XLA/JAX: "RESOURCE_EXHAUSTED: Out of memory while trying to allocate ..." (xla BFC allocator).
    # XLA's status code also names allocation failures without "Out of memory" ("RESOURCE_EXHAUSTED:
    # Failed to allocate request for 1.5GiB", "Attempting to reserve ..."); gRPC's RESOURCE_EXHAUSTED
    # ("Received message larger than max") is not memory and is excluded.
    ("jax_oom", r"RESOURCE_EXHAUSTED: Out of memory|Out of memory while trying to allocate|"
                r"rror: RESOURCE_EXHAUSTED:(?![^\n]{0,120}(?:message larger than max|Received message|quota|[Rr]ate limit))"
                r"[^\n]{0,120}(?:[Aa]llocat|memory|[Rr]eserve|\d ?[KMGT]i?B)|Resource exhausted: Out of memory|"
                r"RESOURCE_EXHAUSTED: Failed to allocate request for"),
    # CuPy MemoryPool: "Out of memory allocating N bytes (allocated so far: M bytes)".
    ("cupy_oom", r"cupy\.cuda\.memory\.OutOfMemoryError|Out of memory allocating [0-9,]+ bytes"),
    # ONNX Runtime's arena (core/framework/bfc_arena.cc AllocateRawInternal).
    ("ort_oom", r"Failed to allocate memory for requested buffer of size \d+"),
    # RAPIDS RMM (cuDF, cuML, Spark RAPIDS): rmm::out_of_memory / "Device allocation of N bytes failed".
    # RMM's out_of_memory is a std::bad_alloc whose text names CUDA: "std::bad_alloc: out_of_memory: CUDA error at:
    # .../cuda_memory_resource.hpp" (device memory, not the host's; session 9, round z2)
    # (the exception's name as raised or printed, not a type in code: "<rmm::out_of_memory>", "RMM_FAIL(msg,
    # rmm::out_of_memory);", "catch (rmm::out_of_memory const& e)"; session 10, aa8 dev, and its third review)
    ("rmm_oom", r"rmm::(?:bad_alloc|out_of_memory)(?!\s*(?:>|\(|&(?![#\w])|const\b|\)\s*;))|RMM failure at:?[^\n]{0,200}out of memory|"
                r"std::bad_alloc: (?:out_of_memory: (?:CUDA error|RMM failure)|CUDA error at:?[^\n]{0,200}?(?:cudaErrorMemoryAllocation|out of memory)"
                # RMM before out_of_memory existed: RMM_FAIL("Maximum pool size exceeded", rmm::bad_alloc)
                r"|RMM failure at:?[^\n]{0,200}?(?:Maximum pool size exceeded|Exceeded memory limit))"),
    # vLLM's own capacity errors (vllm/v1/core/kv_cache_utils.py, worker profiling).
    # Also their openings, where a terminal or a paste wrapped the message after them ("ValueError: To serve at least one
    # request with the model's max seq len\n(1000000), 3.09 GiB KV cache is needed, ..."): it was no event at all
    # (session 27). vLLM spells it "models's" in kv_cache_utils.py.
    ("vllm_capacity", r"No available memory for the cache blocks|Not enough memory to handle \d+ (?:total |prefill )?tokens|larger than the maximum number of tokens that can be stored in KV cache|KV cache is needed, which is larger than the available KV cache memory|"
                      # (an opening only where the rest of the message is not on its line: the whole message is read at its key phrase;
                      # after the exception's name, whose "rror" is the pre-filter's literal: no slot is left for another)
                      r"rror: (?:To serve at least one request with the models?'s? max seq len(?![^\n]*KV cache is needed, which is larger)|"
                      r"The model's max seq len \(\d+\) is larger than the max(?![^\n]*that can be stored in KV cache))"),
    ("vllm_free_memory", r"Free memory on device .{0,80}is less than desired GPU memory utilization"),
    # Accelerate find_executable_batch_size / Lightning: every batch size down to 1 ran out of memory.
    ("batch_finder", r"No executable batch size found, reached zero"),
    # The CUDA driver/runtime's own error, not the caching allocator's (cudaErrorMemoryAllocation = 2,
    # CUDA_ERROR_OUT_OF_MEMORY) [CUDAERR]: context creation, cuBLAS/cuDNN handles, pinned host memory.
    ("cuda_driver_oom", r"CUDA error: out of memory|CUDA driver error: out of memory|CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemoryAllocation|CUDA error 2 \(out of memory\)|CUDA error 2 at \S+: out of memory|error == cudaSuccess \(2 vs\. 0\)"
                        # a driver API call named with its out-of-memory result (silver, session 19): "CUDA error at cuCtxCreate:
                        # Out of memory", "CuDevicePrimaryCtxRetain( &context, dev.get() ) returned (2): Out of memory",
                        # "Out of memory in cuStreamCreate(&cuda_stream_, ...)"
                        # (the call's result, not prose that names the call: "cuMemCreate ... to reduce out of memory errors"; review)
                        r"|\b[Cc]u(?:CtxCreate|DevicePrimaryCtxRetain|StreamCreate|MemAlloc|MemCreate)\w*"
                        r"(?:\s*\((?:[^()\n]|\([^()\n]{0,40}\)){0,80}\))?\s*(?:returned\s*\(?2\)?|failed)?\s*:\s*[Oo]ut of memory\b"
                        r"|\b[Oo]ut of memory in cu(?:CtxCreate|DevicePrimaryCtxRetain|StreamCreate|MemAlloc|MemCreate)\w*"),
    # cuBLAS/cuDNN status codes (cuBLAS and cuDNN API references: ALLOC_FAILED = "resource allocation
    # failed inside the library ... usually a cudaMalloc() failure"; NOT_SUPPORTED/EXECUTION_FAILED = misuse).
    # Theano's CNMeM pool (lib.cnmem) reports its start-up reservation the same way (CNMEM_STATUS_*).
    # (a *_STATUS_SUCCESS is no failure, unless glog's CHECK_EQ prints the code it got: "(13 vs. 0)")
    ("cublas_cudnn", r"\b(?:CUBLAS|CUDNN|CUSOLVER|CUFFT|CNMEM)_STATUS_(?:(?!SUCCESS\b)[A-Z_]+|SUCCESS \(\d+ vs\. 0\))|cublas runtime error : resource allocation failed"
                     # TensorFlow's wording of a cuDNN handle that could not be created
                     r"|Failed to get convolution algorithm\. This is probably because cuDNN failed to initialize"),
    # DataLoader shared memory (torch/utils/data/_utils/signal_handling.py, MapAllocator.cpp) [PTDL][PTMAP].
    ("shm_error", r"insufficient shared memory \(shm\)|out of shared memory|unable to allocate shared memory\(shm\)|unable to write to file </torch_|unable to mmap [0-9]+ bytes from file </torch_|killed by signal: Bus\b|No space left on device.{0,40}torch_|torch_[0-9_]+.{0,40}No space left on device|"
                  r"creating shared memory segment /dev/shm|object store size exceeds the capacity of /dev/shm|failed to extend /dev/shm/\S+ to \d+ bytes[^\n]{0,60}No space left on device"),
    ("dataloader_killed", r"DataLoader worker .{0,60}killed by signal: Killed"),
    # SIGBUS in a GPU job: a page of a shared-memory segment that /dev/shm could not back (Docker's 64 MB
    # default); also a truncated memory-mapped file, hence not as sure as shm_error.
    ("bus_error", r"^\s*(?:\S+: line \d+: +\d+ )?Bus error\b|\bBus error \(core dumped\)|\bsignal: bus error\b|"
                  r"died with <Signals\.SIGBUS|\b(?:exitcode|exit code|exit status)\s*[:=]?\s*-7\b|\bsignal 7 \(SIGBUS\)"),
    # NCCL's "unhandled system error" (ncclSystemError): a failed system call, in containers most often
    # the /dev/shm segment (NCCL docs, troubleshooting: "Docker ... --shm-size / --ipc=host").
    ("nccl_system_error", r"unhandled system error"),
    # Kernel OOM killer (mm/oom_kill.c) [OOMKILLC], Kubernetes OOMKilled, 137 = 128 + SIGKILL [OCPOOM].
    # srun's report of its tasks' kill ("srun: error: nid001277: tasks 1-3: Out Of Memory", session 9, round z9).
    # (slurmstepd's "Detected 1 oom_kill event" is its own kind, slurm_oom_kill, below: HPC docs quote it in full, dev
    # benign p5_sigma2_memsettings_oomkill, and as a strong kind it would pass the documentation gate)
    ("kernel_oom", r"(?:Out of memory|Memory cgroup out of memory): Kill(?:ed)? process|invoked oom-killer|oom-kill:constraint|"
                   r"srun: error: \S+: tasks? [\d,-]+: Out Of Memory"),
    # Slurm's job state after the cgroup OOM killer (session 10): seff's "State: OUT_OF_MEMORY (exit code 0)", a
    # sacct row's state before its exit code ("OUT_OF_ME+    0:125", "|OUT_OF_MEMORY|0:125" with -P), scontrol's
    # "JobState=OUT_OF_MEMORY", the mail's "Failed, Run time 01:10:40, OUT_OF_MEMORY"; not the state's name in docs
    # ("OUT_OF_MEMORY  OOM  Job experienced out of memory error"). Its own kind: Slurm tutorials show this output,
    # so the documentation gate judges it (rank.DOCS_WEAK_KINDS; review, session 10).
    # (sacct's column truncation "OUT_OF_ME+" is its output wherever the column stands; Snakemake's "SLURM status
    # is: 'OUT_OF_MEMORY'"; second review, session 10)
    ("slurm_oom_state", r"\bState: OUT_OF_MEMORY\b|\bJobState=OUT_OF_MEMORY\b|\bOUT_OF_ME\+|\bOUT_OF_MEMORY\s+\d+:\d+\b|"
                        r"\d+:\d+\s+OUT_OF_MEMORY\b|\|OUT_OF_MEMORY\|\d+:\d+\b|\bRun time [\d:-]+, OUT_OF_MEMORY\b|"
                        r"SLURM status is:? ?[\"']?OUT_OF_MEMORY\b"),
    # slurmstepd's count of the OOM kills in a step's cgroup (Slurm's task/cgroup plugin), as it ends the step: "slurmstepd:
    # error: Detected 1 oom-kill event(s) in StepId=191.batch cgroup. Some of your processes may have been killed by the
    # cgroup out-of-memory handler." (older: "in step 3495064.0 cgroup"; newer: "Detected 2 oom_kill events in
    # StepId=4242.13. Some of the step tasks have been OOM Killed."). A host OOM kill of a Slurm step (a walkthrough,
    # session 28: the first form was no event, the newer one a vague generic_oom). HPC docs quote it whole: judged by the
    # documentation gate, as slurm_oom_state (rank.DOCS_WEAK_KINDS).
    ("slurm_oom_kill", r"\bslurmstepd(?:-[\w.-]+)?: error: Detected (\d+) oom[-_]kill events?(?:\(s\))? in (?:StepId=|step )([\w.]+)"),
    ("k8s_oomkilled", r"\bOOMKilled\b"),
    # The kubelet evicts pods under node memory pressure: "The node was low on resource: memory".
    ("k8s_evicted", r"low on resource: memory"),
    # "exit"/"return" in the casings programs print (not "eXiT"): the pre-filter looks for these words,
    # which are rare in training logs, rather than for "137" (on ~1% of the lines of any numeric log).
    ("exit_137", r"(?:\b(?:exit|Exit|EXIT)\w*(?:\s+\w+){0,3}?\s+(?i:code|status)|(?:exit|Exit|EXIT)_?(?i:code)|(?:return|Return|RETURN) ?(?i:code))[\"':= ]{0,8}137\b|exit status -9\b|died with <Signals\.SIGKILL|^\s*Killed\s*$"
                 # SIGKILL as launchers print it: DeepSpeed "exits with return code = -9", torchrun
                 # "exitcode: -9" / "(exitcode: -9)", Go's exec "signal: killed", bash "Killed   python ...".
                 r"|\b(?:[Ee]xit ?[Cc]ode|EXIT ?CODE|[Rr]eturn ?[Cc]ode|RETURN ?CODE|[Ee]xit [Ss]tatus)\s*[:=]?\s*-9\b|\bsignal: killed\b"
                 r"|(?:^|\bline \d+:\s+)(?:\d+\s+)?Killed\s+\S|^\s*killed\s*$|^\s*zsh: killed\s+\S"
                 # a progress bar the kill cut off: "3/8 [00:08<00:14,  2.91s/it]Killed" (at the end of the line,
                 # closing quotes allowed; not a bracketed log prefix used as a verb: "[cleanup]Killed stale ...")
                 r"|\]Killed(?=[\s\"'`.)]*$)"
                 # a Chinese/Japanese/Korean report with the shell's word in it: "模型加载Killed了", "报错：Killed",
                 # "「Killed」と表示" (classify_line skips it in a clause that says what may happen or who killed it)
                 rf"|(?:(?<=[{_CJK_TEXT}])|(?<=[{_CJK_TEXT}] ))Killed(?![a-z])|(?<![A-Za-z])Killed(?= ?[{_CJK_TEXT}])"
                 # a report of the shell's word: "fails ... with message `killed`", "shows killed in line 163",
                 # "the process got killed" (not "killed by me/Ctrl-C": a person's SIGKILL is no OOM)
                 r"|\b(?:with (?:the )?(?:message|output|error)|shows?|showed|prints?|printed|says?|just says)\s*:?\s*[`'\"]?[Kk]illed\b"
                 # the shell's word quoted in prose: 'gives a hint of "killed"', 'the terminal shows “Killed”' (session 9, z4)
                 r"|(?<=[`'\"“])[Kk]illed(?=[`'\"”])"
                 # "it ends with Killed error again", "still get killed"
                 r"|\b(?:ends?|ended|ending|exits?|exited|dies|died|stops?|stopped|terminat(?:es|ed)|fails?|failed|crash(?:es|ed)?) with\s+"
                 r"(?:an?\s+|the\s+)?[`'\"]?Killed\b|\b(?:I|we|it) (?:still |always )?get(?:s)? killed\b"
                 # "killed by the OOM killer", "the OOM killer killed python"
                 r"|\bkilled by (?:the )?(?:kernel'?s? |linux )?OOM[- ]killer\b|\bOOM[- ]killer killed\b"
                 r"|\b(?:process|script|job|python|training|program|kernel|worker|container|pod|it)\s+(?:was|got|gets|is|getting|being|has been|keeps getting)\s+killed\b(?!\s+(?:by|with)\s+(?:me|the user|hand|ctrl|keyboard|SIGINT|SIGTERM|timeout|the scheduler|slurm))"),
    ("ray_oom", r"ray\.exceptions\.OutOfMemoryError|Task was killed due to the node running low on memory|killed due to memory pressure \(OOM\)"),
    ("host_alloc", r"DefaultCPUAllocator: (?:can't allocate memory|not enough memory)|std::bad_alloc(?!: (?:out_of_memory: )?(?:CUDA error|RMM failure))|\bMemoryError\b(?!: std::bad_alloc: (?:out_of_memory: )?(?:CUDA error|RMM failure))|_ArrayMemoryError\b|Cannot allocate memory|"
                   # Slurm's own kill messages, anchored (not "jobs that exceeded their memory limit are killed" in
                   # docs; review, session 9): "Job 4567 exceeded memory limit (17000000 > 16777216), being killed",
                   # "error: Exceeded job memory limit" (not the "... at some point" warning); found through their
                   # "error"/"killed" (the pre-filter's literals)
                   # (the lookahead: SLURM_MEMORY_WARNING below)
                   r"\bexceeded memory limit \(\d+ > \d+\), being killed|\berror: Exceeded (?:job|step) memory limit\b(?! at some point)|"
                   r"session crashed after using all available RAM|"
                   # PyTorch <= 0.4's CPU allocator (TH/THGeneral.cpp): "$ Torch: not enough memory: you tried to
                   # allocate 2GB. Buy new RAM!"
                   r"Torch: not enough memory: you tried to allocate \d"),
    # NVIDIA Xid (open-gpu-kernel-modules nverror.h) [NVERR].
    ("xid", r"NVRM: Xid \((?:PCI:)?[0-9a-fA-F:.]+\): \d+"),
    # Program errors that mention memory or devices but are not capacity (CUDA runtime error strings).
    ("cuda_program_error", r"illegal memory access|CUDA_ERROR_ILLEGAL_ADDRESS|cudaErrorIllegalAddress|device-side assert(?!ion)|invalid device ordinal|misaligned address|an illegal instruction|unspecified launch failure|invalid configuration argument|"
                            r"rror: no kernel image is available for execution|Memory access fault by GPU node|"
                            # a device-side assert as the kernel prints it (Indexing.cu: srcIndex < srcSelectDimSize)
                            r"block: \[\d+,\d+,\d+\], thread: \[\d+,\d+,\d+\]\W{0,4}Assertion `[^`\n]{1,200}` failed|"
                            r"error == cudaSuccess \((?:8|9|77|98|209|700|710|716|719) vs\. 0\)|"
                            # Triton's per-block shared-memory check (an on-chip limit of the kernel's tile
                            # sizes, not GPU memory) raised: "OutOfResources: out of resource: shared memory,
                            # Required: N". Not the bare message: Inductor's max-autotune logs it as a warning
                            # and skips that kernel variant (a healthy run).
                            r"OutOfResources: out of resource: shared memory"),
    # Driver/runtime initialisation failures [TORCHDRV][CUDAERR][NCT].
    ("driver_error", r"driver version is insufficient|NVIDIA driver on your system is too old|Found no NVIDIA driver|no CUDA-capable device is detected|CUDA driver initialization failed|Driver/library version mismatch|forward compatibility was attempted|unsupported display driver / cuda driver combination|CUDA error: initialization error|cudaErrorInitializationError|cudaErrorInsufficientDriver|unsatisfied condition: cuda>=|"
                     r"kernel version [0-9.]+ does not match DSO version|CUDA_ERROR_NO_DEVICE|cudaErrorNoDevice|system not yet initialized|cudaErrorSystemNotReady|CUDA initialization: CUDA unknown error|Unexpected error from cudaGetDeviceCount|(?i:loaded (?:runtime )?cudnn library):? ?\S+(?: \(compatibility version \S+\))? but source was compiled (?:with|against)|failed call to cuInit: CUDA_ERROR|Failed to initialize NVML: Unknown Error|"
                     r"error == cudaSuccess \((?:3|30|35|38|46|100|101|999) vs\. 0\)|"
                     # exclusive compute mode, the kernel module and the user-space driver apart, a container
                     # started without the NVIDIA runtime: the device, not its memory
                     r"CUDA-capable device\(s\) is/are busy or unavailable|all CUDA-capable devices are busy or unavailable|"
                     r"cudaErrorDevicesUnavailable|CUDA_ERROR_CONTEXT_ALREADY_IN_USE|NVRM: API mismatch|"
                     # HIP's runtime without a code object for the card (a ROCm build without its gfx target;
                     # HSA_OVERRIDE_GFX_VERSION): session 10, aa5 dev. Not TensorFlow's "possibly insufficient driver
                     # version": it prints that guess after every CUDNN_STATUS_NOT_INITIALIZED (review, session 10)
                     r"hipErrorNoBinaryForGpu|"
                     r"could not select device driver \"[^\"]*\" with capabilities: \[\[gpu\]\]"),
    # tkestack gpu-manager / vcuda-controller hook library lines [TKEHIJ].
    ("vcuda_line", r"\bvcuda\b|hijack_call\.c|cuda-control"),
    # A bare ENOSPC: in a GPU job's report most often /dev/shm (the DataLoader's or NCCL's), else a disk.
    ("no_space", r"No space left on device"),
    # What people write when memory grows: "GPU memory leak", "memory leak in ...".
    ("leak_report", r"[Mm]emory leak"),
    # Any other "out of memory" in the casings programs print, or a bare OOM.
    ("generic_oom", r"[Oo]ut [Oo]f [Mm]emory|OUT OF MEMORY|\bOOM\b|\b(?:OOMs|OOMed|OOM'd|OOMing)\b"),
))

# Gates: substrings of which every match of a pattern contains one (tests/test_prefilter_recall.py
# checks this on lines generated from each pattern). A candidate line meets ~30 patterns; plain `in`
# tests reject almost all of them in a few microseconds, where running the regexes cost ~100 us a
# line: a log that prints "GPU memory allocated: ..." every step is all candidate lines.
LINE_GATES: dict[str, tuple[str, ...]] = {
    "oom_recovered": ("failed, trying batch size", "recover from OOM", "kipp", "retrying with", "fall", "Will try to ",
                      "size decreased from", "tactics do not have sufficient workspace memory", "Skipping tactic",
                      "pytorch allocator cache flushes since last step",
                      "ailed (CUDA out of memory) ", "ailed (out of memory) ", "ailed (Out of memory) ", "ailed (OOM) ",
                      "Decode out of memory happened"),
    "oom_caught": ("insufficient to use tactic", "to CPU due to CUDA OOM", "preempted by PreemptionMode",
                   "indicates that this is not a failure"),
    "autobatch_settled": ("AutoBatch: Using batch-size",),
    "hami_oom": ("-core ERROR", "4pdvGPU ERROR"),
    "hami_device_full": ("cuMemoryAllocate failed",),
    "torch_oom_nvml": ("NVML_SUCCESS",),
    "tensorrt_oom": ("Cuda Runtime (out of memory)", "Requested amount of GPU memory"),
    "nccl_oom": ("out of memory",),
    "torch_oom": (" out of memory", "Tried to allocate ", "would exceed allowed memory"),
    "mps_oom": ("MPS backend out of memory",),
    "torch_oom_legacy": ("cuda runtime error (2)", "error=2"),
    "tf_oom": ("ResourceExhaustedError", "OOM when allocating tensor", "CUDA_ERROR_OUT_OF_MEMORY", "from device: hipError_t(1002)", "ran out of memory trying"),
    "jax_oom": ("Out of memory", "RESOURCE_EXHAUSTED"),
    "cupy_oom": ("OutOfMemoryError", "Out of memory allocating"),
    "ort_oom": ("requested buffer of size",),
    "rmm_oom": ("rmm::", "RMM failure", "bad_alloc: "),
    "vllm_capacity": ("No available memory", "KV cache", "Not enough memory to handle", "max seq len"),
    "vllm_free_memory": ("Free memory on device",),
    "batch_finder": ("No executable batch size found",),
    "cuda_driver_oom": ("out of memory", "Out of memory", "CUDA_ERROR_OUT_OF_MEMORY", "cudaErrorMemoryAllocation", "cudaSuccess (2 "),
    "cublas_cudnn": ("_STATUS_", "cuDNN failed to initialize", "cublas runtime error"),
    "shm_error": ("shared memory", "</torch_", "capacity of /dev/shm", "killed by signal: Bus", "No space left on device", "failed to extend /dev/shm"),
    "dataloader_killed": ("killed by signal: Killed",),
    "bus_error": ("Bus error", "bus error", "SIGBUS", "-7"),
    "nccl_system_error": ("unhandled system error",),
    "kernel_oom": ("of memory: Kill", "oom-kill", "Out Of Memory"),
    "slurm_oom_state": ("OUT_OF_ME",),
    "slurm_oom_kill": ("error: Detected ",),
    "k8s_oomkilled": ("OOMKilled",),
    "k8s_evicted": ("low on resource: memory",),
    "exit_137": ("exit", "Exit", "EXIT", "eturn", "ETURN", "Signals.SIGKILL", "Killed", "killed"),
    "ray_oom": ("OutOfMemoryError", "low on memory", "memory pressure"),
    "host_alloc": ("DefaultCPUAllocator", "bad_alloc", "MemoryError", "Cannot allocate memory", "all available RAM",
                   "xceeded memory limit", "xceeded job memory limit", "xceeded step memory limit",
                   "Torch: not enough memory"),
    "xid": ("NVRM: Xid",),
    "cuda_program_error": ("illegal memory access", "ILLEGAL_ADDRESS", "IllegalAddress", "device-side assert",
                           "invalid device ordinal", "misaligned address", "illegal instruction",
                           "unspecified launch failure", "invalid configuration argument", "no kernel image", "], thread: [",
                           "Memory access fault", "cudaSuccess (", "OutOfResources: out of resource: shared memory"),
    "driver_error": ("Unexpected error from cudaGetDeviceCount", "driver version is insufficient", "driver on your system is too old", "Found no NVIDIA driver",
                     "CUDA-capable device", "driver initialization failed", "Driver/library version mismatch",
                     "forward compatibility was attempted", "cuda driver combination", "initialization error",
                     "InitializationError", "InsufficientDriver", "unsatisfied condition: cuda>=", "DSO version",
                     "cuInit", "cudaSuccess (", "initialize NVML: Unknown", "but source was compiled", "NO_DEVICE", "NoDevice",
                     "not yet initialized", "SystemNotReady", "CUDA initialization: ", "DevicesUnavailable",
                     "CONTEXT_ALREADY_IN_USE", "NVRM: API mismatch", "could not select device driver", "NoBinaryForGpu"),
    "vcuda_line": ("vcuda", "hijack_call.c", "cuda-control"),
    "no_space": ("No space left on device",),
    "leak_report": ("emory leak",),
    "generic_oom": ("f memory", "f Memory", "OUT OF MEMORY", "OOM"),
}
_GATED_PATTERNS = tuple((k, LINE_GATES[k], p) for k, p in LINE_PATTERNS)
LINE_PATTERNS_BY_KIND = dict(LINE_PATTERNS)

# The pre-filter (bytes): any line that could hold one of the above. Every match of every pattern
# contains one of these literals, or "OOM" (tests/test_prefilter_recall.py generates lines from each
# pattern and checks it); short shared pieces ("rror", "illed", "river") cover many patterns at once.
# Exact case only. Each literal is a piece of the fixed text its patterns require, cut so that the
# pre-filter stays fast (explain/prefilter.py runs them through aho-corasick's SIMD "Teddy"):
# - every literal has at least 4 bytes: Teddy fingerprints the first min(4, shortest) bytes of each,
#   so one 3-byte literal makes all of them less selective; "OOM" (`\bOOM\b` has no 4-byte form) is
#   looked for in a separate pass instead.
# - where the fixed text is longer, the piece starts where its first 4 bytes are rare in training
#   logs: "te memory", not "allocate memory" ("allo" starts the "allocated" of every memory line),
#   "No executable batch size", not "batch size found" ("batc": every "processed batch" line).
#   Literals fill Teddy's 16 buckets in list order, and a bucket accepts any mix of its members'
#   nibbles, so the order matters too. Pieces and order come from simulating Teddy's candidate rate
#   on training logs, checked on others (docs/explain-prefilter.md, bench/prefilter_literals.py).
# - not "memory" alone (training logs print "GPU memory allocated: ..." every step), and no "137"
#   (on ~1% of the lines of any numeric log): exit 137 is found through "exit"/"return" instead.
# Environment hints (GPU names, kernel, sharing layers) are looked for in the first ENV_BYTES of
# each log and around events only.
EVENT_LITERALS: tuple[bytes, ...] = (
    # issue 17's shapes were placed one by one where the Teddy model leaves no position to verify on
    # the three log shapes (tests/test_prefilter_engine.py); 64 literals, Teddy's limit: no slot is left.
    b'</torch_', b'all available RAM', b'y leak', b'rmm::', b'access fault', b'ailed, trying batch size',
    b'DSO version', b'f memory', b'resource: memory', b'No available memory for ', b'UT OF MEMORY', b'ared memory',
    b'te memory', b'UAllocator: not enough m', b'mount of GPU memory (', b'f Memory', b'Free memory on device ',
    b'uMemoryAllocate failed r', b'rror', b'_STATUS_', b'exit status -9', b'ijack_call.c', b'VRM: ', b'river',
    b'EXIT', b'ecified launch failure', b'NVML_SUCCESS == ', b'ried to allocate ', b'KV cache',
    b'No executable batch size', b'aligned address', b'ft on device', b'td::bad_alloc', b'Exit', b'exit',
    b'sfied condition: cuda>=', b'nals.SIGKILL', b'illegal', b'invalid ', b'RROR', b'ibility was attempted',
    b'-capable device', b'vcuda', b'illed', b'da-control', b'-side assert', b'oom-kill', b'ETURN', b'eturn',
    b'size decreased from',
    # session 6: the two recovered shapes sit where the Teddy model leaves no position to verify
    b'source was compiled', b'tactic', b'IGBUS', b'flushes since last', b'nough memory to handle',
    b'AutoBatch: Using',
    b'system not yet initialized', b'CUDA initialization: ', b'capacity of /dev/shm', b'cuDNN failed to initialize', b'equested buffer of size', b'], thread: [',
    b'ESOURCE_EXHAUSTED: Failed to allocate request',
    # session 10: Slurm's OUT_OF_MEMORY job state (seff, sacct); the 64th, Teddy's last slot
    b'OUT_OF_ME',
)
SIDE_LITERALS: tuple[bytes, ...] = (b"OOM",)  # shorter than 4 bytes: its own pass (see above)
ENV_BYTES = 8 << 20
# Slurm's warning on a job that went on (jobacct_gather counts page cache against the step): no host failure
# (host_alloc's Slurm alternatives exclude it; reported.failure_statement skips its line)
SLURM_MEMORY_WARNING = re.compile(r"Exceeded (?:step|job) memory limit at some point")

ENV_PATTERNS: dict[str, re.Pattern[str]] = {
    # Consumer cards only with "RTX" before the number, as nvidia-smi and torch name them ("NVIDIA GeForce
    # RTX 4090"): a bare 4090 in a training log is a count, and would fake a GPU (and a "slice") for it.
    "gpu_name": re.compile(r"\b((?:NVIDIA |Tesla |GeForce |Quadro )?(?:(?:RTX ?)?(?:A100|H100|H200|H800|A800|V100|A10G?|A30|A40|L40S?|L4|T4|P100|RTX 6000 Ada|RTX A6000)|RTX ?[234]0[5-9]0(?: Ti)?)(?:[- ](?:SXM[0-9]?|PCIE|PCIe|NVL))?(?:[- ]\d+ ?GB)?)\b"),
    "mig": re.compile(r"\bMIG \d+g\.\d+gb\b|\bnvidia\.com/mig-\d+g"),
    "kernel_release": re.compile(r"\b([3-6]\.\d{1,2}\.\d{1,3}-[0-9][\w.\-]*?(?:el\d|generic|amzn|azure|aws|gcp|default|x86_64)[\w.\-]*)"),
    "driver_version": re.compile(r"Driver Version:?\s*([0-9]{3}\.[0-9]{1,3}(?:\.[0-9]{1,3})?)"),
    "hami": re.compile(r"HAM[Ii]-core|4pdvGPU|CUDA_DEVICE_MEMORY_LIMIT|nvidia\.com/gpumem|libvgpu\.so"),
    # WSL2: the kernel name, a Windows drive under /mnt, a default Windows host name in a prompt.
    "wsl": re.compile(r"microsoft-standard-WSL2|\bWSL ?2?\b|/mnt/[c-h]/|@DESKTOP-[A-Z0-9]{5,}"),
    "vcuda": re.compile(r"\bvcuda\b|tencent\.com/vcuda|gpu-manager"),
    # nvidia-smi pasted into the log: --query-compute-apps=pid,used_memory CSV rows, the process table,
    # and --query-gpu=memory.used,memory.free rows.
    "smi_process": re.compile(r"^\s*(\d+),\s*(\d+)\s*MiB\s*$|\|\s+\d+\s+(?:N/A|\d+)\s+(?:N/A|\d+)\s+(\d+)\s+[CGM+]+\s+\S.*?\s(\d+)\s?MiB\s*\|"),
    "smi_used_free": re.compile(r"^\s*(\d+)\s*MiB,\s*(\d+)\s*MiB\s*$"),
    # TensorFlow 1.x prints the device's memory when it creates it: "Total memory: 7.92GiB" "Free memory: 190.31MiB"
    # (1.0-1.4), "totalMemory: 5.93GiB freeMemory: 7.94MiB" (1.5 on).
    "tf_total_memory": re.compile(r"\b(?:Total memory|totalMemory): ([0-9.]+ ?[KMGT]i?B)"),
    "tf_free_memory": re.compile(r"\b(?:Free memory|freeMemory): ([0-9.]+ ?[KMGT]i?B)"),
    # A share of the GPU the job set for itself, with its value: TensorFlow's per_process_gpu_memory_fraction
    # and Merlin's TF_MEMORY_ALLOCATION, JAX's XLA_PYTHON_CLIENT_MEM_FRACTION, PyTorch's
    # set_per_process_memory_fraction, vLLM's gpu_memory_utilization, SGLang's mem_fraction_static.
    # (the command-line spellings too: vLLM's --gpu-memory-utilization 0.4, SGLang's --mem-fraction-static 0.5)
    "mem_fraction": re.compile(r"\b(?:per_process_gpu_memory_fraction|gpu_memory_fraction|gpu-memory-fraction|XLA_PYTHON_CLIENT_MEM_FRACTION|"
                               r"TF_MEMORY_ALLOCATION|set_per_process_memory_fraction|gpu_memory_utilization|gpu-memory-utilization|"
                               r"mem_fraction_static|mem-fraction-static)\b"
                               r"[\"'`\]]{0,2}(?:\s{0,3}(?:=|:|\()|\s(?:of|to|at|between)|(?=\s))\s{0,3}[\"'`]?(0?\.\d{1,4})(?![\d.])"),
    # A framework's own start-up pool named in the text (TensorFlow's allow_growth / set_memory_growth, JAX's
    # XLA_PYTHON_CLIENT_PREALLOCATE, Theano's gpuarray.preallocate / lib.cnmem), kept with its line (60 characters
    # before, 50 after). A cuDNN/cuBLAS handle that cannot be created next to such a pool is the pool's limit
    # (session 11, round ac1 dev), unless the text says the fix did not help: fix_denied on any line, and on the
    # setting's own line also rules_by_kind.POOL_DENIED ("still", "even with ... persists").
    "pool_setting": re.compile(r"[^\n]{0,60}(?:allow_growth|set_memory_growth|TF_FORCE_GPU_ALLOW_GROWTH|XLA_PYTHON_CLIENT_PREALLOCATE|"
                               r"gpuarray\.preallocate|lib\.cnmem)\b[^\n]{0,50}"),
    # A line anywhere in the text that says a fix did not help ("It did not help, same error.", "My code already has:"),
    # read with pool_setting: the setting was tried, so the pool is not the answer (review, session 11).
    # A rank that waited in a collective until the process group's timeout (NCCL's watchdog, gloo): what the
    # other ranks print when one of them stopped, an OOM or another reason. No cause by itself: read for a note only.
    "collective_timeout": re.compile(r"Watchdog caught collective operation timeout: WorkNCCL\([^)]{0,200}\)"
                                     r"|\bran for \d+ milliseconds before timing out"
                                     r"|\bTimed out waiting \d+ ?ms for (?:recv|send) operation to complete"),
    # A stop, not the OOM killer, behind a 137: Docker sends SIGKILL when a container does not stop within its grace
    # period ("Container takes 10s timeout to stop, exits with code 137"; silver, session 19). Not SIGTERM alone:
    # torchrun sends it to the other ranks when one is OOM-killed.
    # (only the stop timing out: "graceful shutdown" and a "docker stop" the reporter ran are no kill; review)
    "stop_kill": re.compile(r"(?i)\bfailed to exit within \d+\s?s\b|\busing the force\b|\bdid ?n[o']t stop in time\b|"
                            r"\btime ?out to stop\b|\bstop timeout\b|\btimes? out and stops?\b|"
                            r"\bgrace period\b[^.\n]{0,30}\b(?:expired|exceeded|elapsed|timed? ?out)\b"),
    "fix_denied": re.compile(r"\b(?:did ?n[o']t|does ?n[o']t|do not|not) (?:help|work|fix|solve|change)|\bsame (?:error|issue|problem)\b|"
                             r"\bno effect\b|\bto no avail\b|\b[Ss]till (?:get|have|fail|crash|the same)|"
                             r"\b(?:code|config|script) already (?:has|have|set|use)"),
    # What people write next to the traceback: memory that keeps growing (the PyTorch FAQ symptom
    # of history kept across iterations). TensorFlow's "memory growth" option is not growth.
    "growth": re.compile(r"(?i)(?:(?<!allow )(?<!set_)memory(?! growth)|\bvram\b|\bgpu (?:memory (?:usage|consumption)|consumption))[^.\n]{0,50}?"
                         # not denied: "GPU memory does not keep increasing, it stays at 20G" (review, session 10)
                         r"(?<!\bnot )(?<!n't )(?<!\bnot keep )(?<!n't keep )(?<!\bnever )(?<!\bno longer )\b(increases?|increasing|increased|grows?|growing|grew|growed|climbs?|climbing|keeps? (?:going )?up|rising|rises|accumulat\w+)\b"
                         r"|\b(?:slow|steady|steadily|continuous(?:ly)?|gradual(?:ly)?)[^.\n]{0,20}(?:increase|rise|rising|growth|grows?|growing)[^.\n]{0,30}memory"
                         r"|memory[^.\n]{0,30}from \S+ ?G\w* to \S+ ?G"
                         # the verb first, or a growth that has its own word: "increases the memory used
                         # linearly", "memory use balloons", "memory keeps piling up"
                         r"|\b(?:increas\w+|grow\w*)\s+(?:the\s+)?(?:\w+\s+)?memory\b[^.\n]{0,30}\b(?:linearly|steadily|continuously|every (?:step|iteration|epoch|batch))"
                         r"|memory[^.\n]{0,40}?\b(?:balloon\w*|piles? up|piling up|creeps? up|never goes down|keeps? going up|"
                         r"more and more|larger and larger|bigger and bigger|higher and higher)\b"
                         # the comparative: "the more time I train the model the larger memory is occupied"
                         r"|\bthe (?:more|longer)\b[^.\n]{0,60}\bthe (?:more|larger|bigger|higher)\b[^.\n]{0,15}\bmemory"
                         # session 19 (silver leak items, rules alone): what piles up run after run until the OOM ("it does not
                         # release the last cached output and keeps building up until it goes out of memory", "vram usage
                         # gradually increasing each run until OOM")
                         # (not gradient accumulation, which runs until the optimizer step by design; review)
                         r"|\b(?:build(?:s|ing)? up|pil(?:es|ing) up|accumulat\w+(?! (?:the )?gradients?\b))\b[^.\n]{0,40}\buntil\b[^.\n]{0,30}(?:out of memory|\boom\b)"
                         # Chinese: (video) memory keeps / steadily / more and more increasing ("显存会一直增加到爆了";
                         # session 10, the text-only expert reading of dev reports)
                         # (a growth verb, not a level: "显存一直大于20G" / "持续高位" is none; not negated: review, session 10)
                         r"|(?:显存|内存)(?:(?!不会|不是|不再|并不|并非|没|未)[^。！？\n]){0,12}?(?:(?:一直|不断|持续|逐渐|慢慢|不停)(?:在|地|不停地?)?(?:往上)?(?:增加|增长|增大|上涨|涨|上升|变大|升高)|越来越(?:多|大|高))"),
    # What people write when memory belongs to someone else: memory not released by an earlier run,
    # leftover/zombie processes, every worker or rank landing on GPU 0.
    "other_holder": re.compile(r"(?i)\b(?:memory (?:is |was |were |are )?(?:still )?not (?:being )?(?:released|freed)|"
                               r"(?:not (?:been )?(?:released|freed|cleared))|leftover|zombie|orphan(?:ed)? process|"
                               # (not "any other process": a framework's own advice, Paddle's "check whether there is any
                               # other process using GPU 0"; nor "no other programs running")
                               r"(?<!any )(?<!\bno )(?<!without )(?:another|other|previous|second|background|extra) (?:\w+ )?(?:process(?:es)?|jobs?|programs?|workers?|ranks?)\b|"
                               r"previous (?:run|training|session)\b|"
                               # "occupied by ...", "on a busy gpu", "two jobs might overlap in using GPUs",
                               # "nothing is on GPU=1, only GPU=0 is filled"
                               r"\boccupied by\b|\bbusy gpu\b|\boverlap\w*\b[^.\n]{0,40}\bgpus?\b|"
                               r"(?:gpu(?: ?= ?| )?0|cuda:0|device 0|first gpu)[^.\n]{0,20}\b(?:is|was|gets?|got) (?:filled|full|occupied)\b|"
                               r"someone else|by someone|additional process(?:es)? on (?:gpu ?0|the first gpu)|no process(?:es)? (?:seems? to be |are |is )?(?:using|listed|running|shown)|"
                               r"more memory (?:on|in) (?:the )?(?:first gpu|gpu ?0|cuda:0|device 0)|"
                               r"(?:all|every|each) (?:\w+ ){0,3}(?:on|onto|to|in|use|uses|using) (?:the )?(?:first gpu|gpu ?0|cuda:0|device 0|same gpu)|"
                               r"(?:first gpu|gpu ?0|cuda:0|device 0)[^.\n]{0,40}(?:much more|all|every|each) |"
                               # two programs at once: "run both evaluation scripts simultaneously", "2 kernels running"
                               r"\b(?:run|running|launch\w*|start\w*)\s+(?:\w+\s+){0,4}(?:simultaneously|at the same time|concurrently)\b|"
                               r"\b(?:two|2|both|multiple|several)\s+(?:\w+\s+)?(?:kernels|notebooks|scripts|processes|instances|jobs)\s+(?:are\s+)?(?:running|open|at once|at the same time)\b|"
                               # co-tenants named as such: "multiple instances of the same pipeline ... on the same GPU",
                               # "each container is using ~600MB", "every process's CUDA context" (session 8, round w1)
                               r"\b(?:multiple|several|many|two|three|\d+|more than (?:one|1))\s+(?:\w+\s+){0,2}(?:containers|pods|processes|instances|workers|tasks|jobs|replicas|"
                               # session 19 (silver, rules alone: 13 of 180 other_process items first): models, programs and
                               # contexts too ("two models on the same GPU", "more than 1 vllm instance on a single GPU",
                               # "multiple cuda contexts are created on GPU 0")
                               r"models|programs|scripts|contexts|servers|engines|copies)\b[^.\n]{0,80}\b(?:same|one|single) (?:physical )?(?:GPU|card|device)\b|"
                               # "more than 1 vllm instance on a single GPU"; contexts piled on the first GPU (not "2 models on cuda:0",
                               # a job's own; review)
                               r"\bmore than (?:one|1)\s+(?:\w+\s+){0,2}(?:instance|process|model|container|job|server)\b[^.\n]{0,80}\b(?:same|one|single) (?:physical )?(?:GPU|card|device)\b|"
                               r"\b(?:multiple|several|many|\d+)\s+(?:\w+\s+){0,2}contexts\b[^.\n]{0,40}\b(?:gpu ?0|cuda:0|first gpu)\b|"
                               # held by someone else: "used by other work", "held by another job", "used by a previous run" (not "the
                               # training", "existing tensors": the job itself; review)
                               r"\b(?:used|held|taken|consumed|hogged) by (?:(?:an? |the )?(?:other|different)|another)\b|"
                               r"\b(?:used|held|taken|consumed|hogged) by (?:an? |the )?(?:previous|earlier|old) (?:job|process|run|container|notebook|kernel|instance)\b|"
                               r"\b(?:each|every) (?:container|pod|process|worker|instance)(?:'s)?\s+(?:\w+\s+){0,3}?(?:takes?|uses?|using|consumes?|holds?|contributes?|occup\w+|creat\w+|CUDA context)\b"
                               r"(?![^.\n]{0,40}\b(?:its own|per) (?:GPU|card|device)\b))"
                               # the same in Chinese reports: occupied (by others), not released, another process, the same card
                               r"|被(?:他人|别人|其他\w{0,4})占用|(?:显存|GPU|gpu|内存)\S{0,6}(?:没有|没|未)(?:得到|被)?释放|(?:其他|其它|别的)(?:进程|程序|任务)|同一(?:个|张|块)?(?:GPU|gpu|卡|显卡)"),
    # "fragmentation" in the reporter's words, not in the allocator's own hints ("... to avoid
    # fragmentation", TensorFlow's "If the cause is memory fragmentation").
    # How people describe (and fix) history kept across iterations, in prose: not code lines of a traceback.
    "leak_words": re.compile(r"(?i)\b(?:(?:sav|keep|kept|stor|accumulat|retain)\w* (?:\w+ ){0,3}(?:computation(?:al)? )?graph|"
                             r"computation(?:al)? graph (?:\w+ ){0,3}(?:kept|saved|retained|accumulat\w*|grow\w*|gets? (?:bigger|larger))|"
                             r"without (?:torch\.)?no_grad|forgot (?:\w+ ){0,2}(?:no_grad|detach)|(?:not|never|didn't|don't) detach\w*|"
                             r"creeping memory|memory (?:is )?creeping|"
                             # TensorFlow 1.x: ops added to the graph every step (the fix: finalize the graph)
                             r"graph\.finalize|(?:add\w*|creat\w+) (?:new )?(?:ops|nodes) (?:to the graph )?(?:in|inside|every|each))"),
    # The reporter's own word for it: "memory leak(age)", "leaking GPU memory", Chinese 内存/显存泄漏, kept
    # with up to ENV_CONTEXT_BEFORE characters of its clause before it, where LEAK_DENIED finds a denial
    # ("I don't think this is a memory leak", "to avoid memory leaks"). Dev, session 7: all 26 reports
    # saying "memory leak" were leaks.
    "leak_said": re.compile(r"(?i)\b(?:memory[ -]leak\w*|leak(?:s|ed|ing)? (?:\w+ ){0,2}memory)|(?:内存|显存)泄[漏露]"),
    # A job that ran for a while before failing: memory that grows (or a rare larger batch).
    "late_failure": re.compile(r"(?i)\bafter (?:maybe |about |around |roughly |approximately |like |only )?(?:a (?:few|couple of)|several|many|so many|some|\d+|"
                               r"two|three|four|five|six|seven|eight|nine|ten|a dozen|dozens of|hundreds of|thousands of) (?:\w+ )?"
                               r"(?:iterations|epochs|steps|batches|hours|minutes|images|generations|requests|runs|calls)\b"
                               # "during the 23rd EPOCH", "crashes at iteration 68", "after approximately epoch ~50"
                               r"|\b(?:at|in|during|on|around|after) (?:the )?(?:approximately |about |around )?~?(?:[2-9]|\d{2,})(?:st|nd|rd|th) "
                               r"(?:epoch|iteration)\b"
                               r"|\b(?:at|in|during|around|after) (?:approximately |about |around )?(?:epoch|iteration) ~?\d{2,}\b"
                               # "I run out of memory after a while", "OOM after some time"
                               r"|\b(?:out of memory|oom(?:s|ed|ing)?|crash\w*|fail\w*)\b[^.\n]{0,30}\bafter (?:a while|some time)\b"),
    # (not a statistic's label: XLA's BufferAssignment stats print "total fragmentation: 680.30MiB (4.60%)", the slack
    # of its own buffer packing, in every JAX OOM; a walkthrough, session 28, was told "the text reports fragmentation")
    "fragmentation_words": re.compile(r"(?i)(?<!avoid )(?<!cause is memory )(?<!cause is )\bfragment(?:ation|ed)\b(?! maybe the environment)"
                                      r"(?!\s*:\s*[0-9])"),
    # Figures printed on the lines after an allocator's failure line, which the event itself does not hold (a
    # walkthrough, session 28): XLA's BufferAssignment stats "total allocation: 14.44GiB" (what the program needs in
    # all), TF/JAX's async allocator "Reported by CUDA: Free memory/Total memory: F/T", ggml's "failed to allocate
    # CUDA0 buffer of size N" under ollama's "cudaMalloc failed: out of memory".
    "xla_total_allocation": re.compile(r"^\s*total allocation:\s*([0-9][0-9.]* ?[KMGT]i?B)\b"),
    "cuda_free_total": re.compile(r"\bFree memory/Total memory: (\d+/\d+)\b"),
    "ggml_buffer": re.compile(r"\bfailed to allocate CUDA\d+ buffer of size (\d+)\b"),
}

# Hints kept with the start of their clause (up to this many characters before the match; the regex
# itself stays a plain search: a bounded prefix in the pattern was tried at every position of a line).
ENV_CONTEXT_BEFORE = {"leak_said": 60}
_CLAUSE_END = re.compile(r"[.!?;:,\n。，！？；：]")
# A denial of the leak in its clause: "not a memory leak", "no memory leak", "I don't think this is a memory
# leak", "to avoid memory leaks", "without any memory leak" (not "I can't train because of a memory leak").
LEAK_DENIED = re.compile(r"(?i)\b(?:no|not|never|without|isn't|wasn't|rule[sd]? out)\b|\bavoid|\bprevent|"
                         r"\b(?:don't|do not|didn't|doesn't|does not) (?:think|believe|see|have|find|seem)\b")


def clause_before(text: str, start: int, limit: int) -> str:
    """Up to `limit` characters before `start`, from the last clause end on."""
    lo = max(0, start - limit)
    ends = [m.end() for m in _CLAUSE_END.finditer(text, lo, start)]
    return text[ends[-1] if ends else lo:start]

# As LINE_GATES, for ENV_PATTERNS; the caseless hints (ENV_CASELESS) have their gates tested on the lowered line.
ENV_GATES: dict[str, tuple[str, ...]] = {
    "gpu_name": ("A10", "A30", "A40", "A800", "H100", "H200", "H800", "V100", "L4", "T4", "P100", "RTX"),
    "mig": ("MIG ", "nvidia.com/mig-"),
    "kernel_release": tuple(f"el{d}" for d in range(10)) + ("generic", "amzn", "azure", "aws", "gcp", "default", "x86_64"),
    "driver_version": ("Driver Version",),
    "hami": ("HAMI-core", "HAMi-core", "4pdvGPU", "CUDA_DEVICE_MEMORY_LIMIT", "nvidia.com/gpumem", "libvgpu.so"),
    "wsl": ("WSL", "/mnt/", "@DESKTOP-"),
    "vcuda": ("vcuda", "gpu-manager"),
    "smi_process": ("MiB",),
    "smi_used_free": ("MiB",),
    "tf_total_memory": ("Total memory: ", "totalMemory: "),
    "mem_fraction": ("fraction", "FRACTION", "TF_MEMORY_ALLOCATION", "gpu_memory_utilization", "gpu-memory-utilization"),
    "pool_setting": ("allow_growth", "memory_growth", "ALLOW_GROWTH", "PREALLOCATE", "preallocate", "cnmem"),
    "fix_denied": ("not help", "not work", "not fix", "not solve", "not change", "n't help", "n't work", "n't fix",
                   "n't solve", "n't change", "same error", "same issue", "same problem", "no effect", "no avail",
                   "till get", "till have", "till fail", "till crash", "till the same", "already ha", "already set",
                   "already use"),
    "tf_free_memory": ("Free memory: ", "freeMemory: "),
    "growth": ("memory", "显存", "内存", "vram", "gpu consumption", "build", "piles up", "piling up", "accumulat"),
    "other_holder": ("released", "freed", "cleared", "ccupied", "busy gpu", "verlap", "gpu=", "gpu =", "extra ", "leftover", "zombie", "orphan", "other ", "revious ", "econd ", "ackground ",
                     "simultaneously", "same time", "concurrently", "kernels", "notebooks", "scripts", "processes",
                     "instances", "jobs", "same gpu", "same card", "same device", "same physical", "one gpu", "one card", "one device",
                     "one physical", "single gpu", "single card", "single device", "single physical", "each container", "each pod",
                     "each process", "each worker", "each instance", "every container", "every pod", "every process", "every worker",
                     "every instance", "more than", "contexts", "by other", "by another", "by a different", "by different",
                     "by the other", "by an other", "by a other", "by an different", "by the different", "by a old", "by an old", "by the old",
                     "previous ", "earlier ", "by old ",
                     "占用", "释放", "进程", "程序", "任务", "同一",
                     "someone", "dditional", "no process", "more memory", "first gpu", "same gpu"),
    "fragmentation_words": ("fragment",),
    "xla_total_allocation": ("total allocation:",),
    "cuda_free_total": ("Free memory/Total memory: ",),
    "ggml_buffer": ("buffer of size ",),
    "late_failure": ("after ", "th epoch", "st epoch", "nd epoch", "rd epoch", "th iteration", "st iteration",
                     "nd iteration", "rd iteration", "t epoch ", "n epoch ", "t iteration ", "n iteration ", "g epoch ",
                     "g iteration ", "d epoch ", "d iteration ", "r epoch ", "r iteration ", "y epoch ", "y iteration "),
    "leak_words": ("graph", "no_grad", "detach", "creeping", "ops ", "nodes "),
    "leak_said": ("leak", "泄"),
    "stop_kill": ("to exit within", "using the force", "stop in time", "out to stop", "stop timeout", "out and stop",
                  "grace period"),
    "collective_timeout": ("Watchdog caught collective", "before timing out", "Timed out waiting"),
}
# Weak gates: a pattern's needles that open it only together with one of a second set. A GPU's index ("cuda:0", "GPU 0")
# is on every line of many training logs, and the only branches of other_holder that hold none of its other gates
# also need one of these words: "cuda:0 is full", "all ranks use cuda:0", "GPU 0 takes much more ... than each other
# GPU". (A log whose every line says `device cuda:0` ran that regex on each line: ~3 s/MB, session 28.) "lled" stands
# for "filled": Python's caseless match takes a dotless or dotted I for "i", which lower() keeps as it is.
ENV_PAIRED_GATES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "other_holder": (("gpu=", "gpu =", "gpu0", "gpu 0", "cuda:0", "device 0"),
                     ("lled", "full", "all ", "every ", "each ", "much more")),
}
ENV_CASELESS = frozenset({"growth", "other_holder", "fragmentation_words", "late_failure", "leak_words", "leak_said",
                          "stop_kill"})
# The hints that name the machine (GPU, driver, kernel, sharing layer, nvidia-smi rows, TensorFlow's device
# memory), as opposed to the reporter's prose (the caseless ones above).
MACHINE_HINTS = frozenset(ENV_PATTERNS) - ENV_CASELESS - {"mem_fraction", "pool_setting", "fix_denied",
                                                             "collective_timeout"}  # a setting quoted in docs is no machine fact


def env_gate_passes(name: str, text: str) -> bool:
    """Whether ENV_PATTERNS[name] may match `text`: one of its gates is in it (caseless ones in lower case), or one of
    each set of its paired gates. What env_gates_open computes for all names at once."""
    hay = text.lower() if name in ENV_CASELESS else text
    if any(n in hay for n in ENV_GATES[name]):
        return True
    weak, also = ENV_PAIRED_GATES.get(name, ((), ()))
    return any(n in hay for n in weak) and any(n in hay for n in also)


_GATE_INDEXES: dict[str, GateIndex] = {}
_GATE_LOCK = threading.Lock()


def gate_index(which: str) -> GateIndex:
    """The gates of LINE_PATTERNS ("line"), or of ENV_PATTERNS in exact case ("env") or in lower case ("env_caseless"),
    paired gates under "NAME/weak" and "NAME/also". Built on first use (ahocorasick-rs imports then)."""
    idx = _GATE_INDEXES.get(which)
    if idx is None:
        with _GATE_LOCK:
            idx = _GATE_INDEXES.get(which)
            if idx is None:
                if which == "line":
                    gates = dict(LINE_GATES)
                else:
                    caseless = which == "env_caseless"
                    gates = {n: g for n, g in ENV_GATES.items() if (n in ENV_CASELESS) == caseless}
                    for n, (weak, also) in ENV_PAIRED_GATES.items():
                        if (n in ENV_CASELESS) == caseless:
                            gates[f"{n}/weak"], gates[f"{n}/also"] = weak, also
                idx = _GATE_INDEXES[which] = GateIndex(gates)
    return idx


def env_gates_open(text: str) -> list[str]:
    """The names of ENV_PATTERNS, in their order, whose gates `text` passes (env_gate_passes), in two passes."""
    found = gate_index("env").names_in(text) | gate_index("env_caseless").names_in(text.lower())
    if not found:
        return []
    opened = [n for n in found if n in _ENV_ORDER]
    opened += [n for n, weak, also in _ENV_PAIRED_KEYS if weak in found and also in found and n not in opened]
    return sorted(opened, key=_ENV_ORDER.__getitem__) if len(opened) > 1 else opened


_ENV_ORDER = {n: i for i, n in enumerate(ENV_PATTERNS)}  # the hints' order in LogScan.env, whichever gate opened them
_ENV_PAIRED_KEYS = tuple((n, f"{n}/weak", f"{n}/also") for n in ENV_PAIRED_GATES)


# The head pre-filter looks for every exact-case gate; the caseless hints' literals are listed by hand below (the
# verbs of "growth" as people write them, the anchors of the prose hints), lower case unless a case variant is
# listed: a phrase in capitals ("USED BY ANOTHER PROCESS") is not a candidate in the head (review, session 20).
ENV_LITERALS: tuple[bytes, ...] = tuple(sorted({
    g.encode() for name, gates in ENV_GATES.items() if name not in ENV_CASELESS for g in gates
} | {
    "一直".encode(), "不断".encode(), "持续".encode(), "逐渐".encode(), "慢慢".encode(), "越来越".encode(), "不停".encode(),
    b"ncreas", b"NCREAS", b"grow", b"Grow", b"climb", b"Climb", b"keep", b"Keep", b"rise", b"rising", b"Rising",
    b"ccumulat", b"from ", b"From ", b"alloon", b"iling up", b"iles up", b"ile up", b"reeps", b"reep up", b"goes down",
    b"released", b"freed", b"cleared", b"xtra ", b"leftover", b"zombie", b"rphan", b"other ", b"revious ", b"econd ", b"ackground ",
    b"omeone", b"dditional", b"o process", b"ore memory", b"irst GPU", b"irst gpu", b"GPU 0", b"gpu 0", b"GPU0",
    # "GPU=0 is filled" as people space it (CI's property test, session 10: "gpu =0:is full")
    b"gpu=0", b"gpu =0", b"gpu= 0", b"gpu = 0", b"GPU=0", b"GPU =0", b"GPU= 0", b"GPU = 0",
    b"gpu0", b"cuda:0", b"evice 0", b"ame GPU", b"ame gpu", b"ragment", b"RAGMENT", b"fter ", b"raph", b"no_grad",
    b"etach", b"reeping", b"grew", b"Grew", b"th epoch", b"st epoch", b"nd epoch", b"rd epoch", b"th EPOCH",
    b"st EPOCH", b"nd EPOCH", b"rd EPOCH", b"th iteration", b"st iteration", b"nd iteration", b"rd iteration",
    b"t epoch ", b"n epoch ", b"g epoch ", b"d epoch ", b"r epoch ", b"y epoch ", b"t iteration ", b"n iteration ",
    b"g iteration ", b"d iteration ", b"r iteration ", b"y iteration ", b"T EPOCH ", b"N EPOCH ", b"G EPOCH ", b"D EPOCH ",
    *(f"{a} {w}".encode() for a in "tngdry" for w in ("Epoch ", "Iteration ")),
    *(f"{a} {w}".encode() for a in ("th", "st", "nd", "rd") for w in ("Epoch", "Iteration", "ITERATION")), b"leak", b"Leak", b"LEAK", "泄".encode(), b"and more", b"and larger", b"and bigger", b"and higher", b"he more", b"he longer",
    b" ops ", b" nodes ", b"imultaneous", b"ame time", b"oncurrent", b"ernels", b"otebooks", b"cripts", b"rocesses",
    b"nstances", b"jobs", "占用".encode(), "释放".encode(), "进程".encode(), "程序".encode(), "任务".encode(),
    "同一".encode(), b"ccupied", b"usy GPU", b"usy gpu", b"verlap", b"GPU=", b"gpu=",
    # co-tenants (session 8): the GPU they share, or "each container ..."; not the bare words, which a log's
    # every line may hold (a review timed 'each'/'tasks' on every line: 23 MB in 4.4 s against 0.2 s)
    b"ame card", b"ame device", b"ame physical", b"ne GPU", b"ne gpu", b"ne card", b"ne device", b"ne physical",
    b"ingle GPU", b"ingle gpu", b"ingle card", b"ingle device", b"ingle physical",
    *(f"{a} {n}".encode() for a in ("ach", "very") for n in ("container", "pod", "process", "worker", "instance")),
    # session 19: a stop that timed out; what builds up until the OOM; memory held by another's work; "more than 1 ...
    # instance on a single GPU"; contexts piled on GPU 0. Each the regex's own anchor, not a bare word ("stop", "until",
    # "used by" made most lines of a healthy head candidates, 20-100x slower; review)
    b"to exit within", b"using the force", b"stop in time", b"out to stop", b"top timeout", b"out and stop", b"race period",
    b"uild up", b"uilds up", b"uilding up", b"by other", b"by another", b"by a different", b"by different", b"by the other",
    b"by an other", b"by a other", b"by an different", b"by the different", b"by a old", b"by an old", b"by the old", b"arlier ", b"by old ", b"than one", b"than 1 ", b"ontexts",
}))
PREFILTER_LITERALS = EVENT_LITERALS + ENV_LITERALS  # the head of a log: events and hints

# Every gate that opens a pattern by itself: those of LINE_GATES and the exact-case ENV_GATES (GATE_LITERALS), the
# caseless ones and the second words of ENV_PAIRED_GATES, to look for in a lowered line (GATE_LITERALS_CASELESS). A
# line of the decoded log (events._decode) that holds a gate holds its bytes, but for what _decode takes out (the
# caret form of an escape, "^[[") and for the two characters whose lower case holds an ASCII letter (str.lower()
# makes "k" of the Kelvin sign): those are listed as gates too. A line with none of these bytes opens no pattern
# (prefilter._dense_lines: the head of a log whose every line names its GPU, session 28).
GATE_LITERALS: tuple[bytes, ...] = tuple(sorted(
    {n.encode() for gates in LINE_GATES.values() for n in gates}
    | {n.encode() for name, gates in ENV_GATES.items() if name not in ENV_CASELESS for n in gates}
    | {b"^[[", "\u0130".encode(), "\u212a".encode()}
    | {n.encode() for name, (_, also) in ENV_PAIRED_GATES.items() if name not in ENV_CASELESS for n in also}))
GATE_LITERALS_CASELESS: tuple[bytes, ...] = tuple(sorted(
    {n.encode() for name, gates in ENV_GATES.items() if name in ENV_CASELESS for n in gates}
    | {n.encode() for name, (_, also) in ENV_PAIRED_GATES.items() if name in ENV_CASELESS for n in also}))

_SIZE = re.compile(r"(?<![0-9,])" + _N + r"\s?" + _U)  # from a number's first digit (see _N0)


def to_bytes(number: str, unit: str) -> int:
    """Binary units as PyTorch prints them (format_size is binary even when it says 'GB' on MPS)."""
    u = unit if unit != "B" else "bytes"
    return torch_size_to_bytes(number.replace(",", ""), u)


# advice on an OOM, not one: "on how to address the out of memory issue" (Ray's memory monitor ends its kill message
# with it; a walkthrough, session 27, counted it as a second failure)
_HOW_TO = re.compile(r"(?i)\bhow to (?:address|avoid|fix|handle|resolve|prevent|debug|deal with)\s+(?:the |an? |this |such )?$")


def _find(pattern: str, text: str) -> int | None:
    m = re.search(pattern, text)
    return to_bytes(m.group(1), m.group(2)) if m else None


# A number from its first digit: a pattern that starts with _N tried at every digit of a long digit run
# is quadratic (bench/explain_hostile_lines.py: 15 s for one 64 KiB line of digits before).
_N0 = r"(?<![0-9,])" + _N
_TORCH_FIELDS = (
    ("requested_bytes", r"Tried to allocate " + _N + r"\s?" + _U),
    ("total_bytes", r"total capac(?:i)?ty of " + _N + r"\s?" + _U),
    ("total_bytes", _N0 + r"\s?" + _U + r" total capacity"),
    ("free_bytes", r"of which " + _N + r"\s?" + _U + r" is free"),
    ("free_bytes", _N0 + r"\s?" + _U + r" free\b"),
    ("process_bytes", r"this process has " + _N + r"\s?" + _U + r" memory in use"),
    ("allowed_bytes", _N0 + r"\s?" + _U + r" allowed"),
    # (a message cut inside this phrase still gives the figure: TGI's "... Of the allocated memory 37.21 GiB is allo")
    ("allocated_bytes", r"Of the allocated memory " + _N + r"\s?" + _U + r" is allo(?:c|$)"),
    ("allocated_bytes", _N0 + r"\s?" + _U + r" already allocated"),
    ("private_pool_bytes", r"with " + _N + r"\s?" + _U + r" allocated in private pools"),
    ("reserved_unallocated_bytes", _N0 + r"\s?" + _U + r" is reserved by PyTorch but unallocated"),
    ("reserved_bytes", _N0 + r"\s?" + _U + r" reserved in total by PyTorch"),
    # 1.0-1.3 print cached-but-unallocated as "N cached" (PR #13751: format_size(cached - allocated)).
    ("reserved_unallocated_bytes", _N0 + r"\s?" + _U + r" cached\)"),
)
_PROCESS = re.compile(r"Process (\d+) has " + _N + r"\s?" + _U + r" memory in use")
# The cudaMallocAsync backend's message (its lines joined by the scanner, or escaped "\n" on one line, as a server
# quotes it: TGI's warmup panic). "Device limit" is the device's total (cudaMemGetInfo); the PyTorch limit is the
# memory fraction's cap, the whole device when none was set (then no cap: not kept).
ASYNC_OOM = "would exceed allowed memory"
ASYNC_FORMAT = "cudaMallocAsync"
_SEP = r"(?:\s|\\n)*:\s*"
_ASYNC_FIELDS = (
    ("allocated_bytes", r"Currently allocated" + _SEP + _N + r"\s?" + _U),
    ("requested_bytes", r"Requested" + _SEP + _N + r"\s?" + _U),
    ("total_bytes", r"Device limit" + _SEP + _N + r"\s?" + _U),
    ("free_bytes", r"Free \(according to CUDA\)" + _SEP + _N + r"\s?" + _U),
    ("allowed_bytes", r"PyTorch limit \(set by user-supplied memory fraction\)" + _SEP + _N + r"\s?" + _U),
)


# A request no machine of any era can hold, GPU or host (64 TiB): the size was corrupt (an integer overflow, an
# uninitialised or negative dimension read as unsigned), not a workload that is too big.
ABSURD_BYTES = 1 << 46  # 64 TiB
# A request over this many times the whole GPU the message names: a corrupt or wrong size more often than a real
# need (dev, session 19: the three reports asking for 122x, 173x, 7e8x the card were all bugs: a shape or dtype gone
# wrong). One reading with ABSURD_BYTES (details["absurd_size"]), so the rules and the event's category hint agree.
ABSURD_SHARE = 100


def extract(kind: str, text: str) -> tuple[dict[str, int], dict[str, Any]]:
    """Numbers the text gives (never guessed) and other details, for an event of `kind`."""
    nums: dict[str, int] = {}
    det: dict[str, Any] = {}
    if kind == "torch_oom" and ASYNC_OOM in text:
        for key, pat in _ASYNC_FIELDS:
            v = _find(pat, text)
            if v is not None:
                nums[key] = v
        if nums.get("allowed_bytes", 0) >= nums.get("total_bytes", 1 << 62):
            del nums["allowed_bytes"]  # the whole device: no fraction was set
        m = re.search(r"Allocation on device (\d+)", text)
        if m:
            det["gpu"] = int(m.group(1))
        det["format"], det["backend"] = ASYNC_FORMAT, "cuda"
    elif kind in ("torch_oom", "mps_oom"):
        for key, pat in _TORCH_FIELDS:
            if key not in nums:
                v = _find(pat, text)
                if v is not None:
                    nums[key] = v
        procs = [(int(p), to_bytes(n, u)) for p, n, u in _PROCESS.findall(text)[:32]]
        if procs:
            det["other_processes"] = [{"pid": p, "bytes": b} for p, b in procs]
        m = re.search(r"GPU (\d+)", text)
        if m:
            det["gpu"] = int(m.group(1))
        if kind == "mps_oom":
            for key, pat in (("allocated_bytes", r"MPS allocated: " + _N + r"\s?" + _U),
                             ("allowed_bytes", r"max allowed: " + _N + r"\s?" + _U)):
                v = _find(pat, text)
                if v is not None:
                    nums[key] = v
        det["format"] = _torch_format(text)
        det["backend"] = "hip" if "HIP out of memory" in text else "cuda"
    elif kind == "hami_oom":
        m = re.search(r"Device (\d+) OOM (\d+) / (\d+)", text)
        if m:
            det["gpu"] = int(m.group(1))
            nums["total_bytes"] = int(m.group(3))
            det["would_use_bytes"] = int(m.group(2))
            det["limit_bytes"] = int(m.group(3))
    elif kind == "tensorrt_oom":
        m = re.search(r"Requested amount of GPU memory \((\d+) bytes\)", text)
        if m:
            nums["requested_bytes"] = int(m.group(1))
    elif kind == "ort_oom":
        m = re.search(r"requested buffer of size (\d+)", text)
        if m:
            nums["requested_bytes"] = int(m.group(1))
    elif kind == "cuda_driver_oom":
        # TF/JAX's async allocator (gpu_cudamallocasync_allocator.cc): "cuMemAllocAsync failed to allocate N bytes";
        # its "Free memory/Total memory" line after it is a hint (ENV_PATTERNS cuda_free_total)
        m = re.search(r"\bcuMemAllocAsync failed to allocate (\d+) bytes\b", text)
        if m:
            nums["requested_bytes"] = int(m.group(1))
    elif kind == "jax_oom":
        v = _find(r"(?:trying to allocate|allocate request for) " + _N + r"\s?" + _U, text)
        if v is not None:
            nums["requested_bytes"] = v
    elif kind == "generic_oom":
        # llama.cpp / ggml: "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 37885.52 MiB on device 0:
        # cudaMalloc failed: out of memory" (a walkthrough, session 27, read it as "without numbers")
        m = re.search(r"\bggml_\w+: allocating " + _N + r"\s?" + _U + r" on device (\d+)", text)
        if m:
            nums["requested_bytes"] = to_bytes(m.group(1), m.group(2))
            det["gpu"] = int(m.group(3))
    elif kind == "cupy_oom":
        m = re.search(r"allocating ([0-9,]+) bytes \(allocated so far: ([0-9,]+) bytes", text)
        if m:
            nums["requested_bytes"] = int(m.group(1).replace(",", ""))
            nums["allocated_bytes"] = int(m.group(2).replace(",", ""))
    elif kind == "tf_oom":
        m = re.search(r"\(([0-9]+) bytes\) from device", text)
        if m:
            nums["requested_bytes"] = int(m.group(1))
    elif kind == "cublas_cudnn":
        m = re.search(r"\b(CUBLAS|CUDNN|CUSOLVER|CUFFT|CNMEM)_STATUS_([A-Z_]*[A-Z])", text)  # not Markdown's "_..._"
        if m is None and "cuDNN failed to initialize" in text:
            det["status"] = "CUDNN_STATUS_NOT_INITIALIZED"
        if m is None and "cublas runtime error : resource allocation failed" in text:
            det["status"] = "CUBLAS_STATUS_ALLOC_FAILED"  # THC's wording (PyTorch <= 1.1) of the same status
        if m:
            det["status"] = f"{m.group(1)}_STATUS_{m.group(2)}"
            code = re.search(r"_STATUS_SUCCESS \((\d+) vs\. 0\)", text)  # glog CHECK_EQ(err, SUCCESS)
            if code and m.group(1) in _STATUS_CODES:
                name = _STATUS_CODES[m.group(1)].get(int(code.group(1)))
                if name:
                    det["status"] = f"{m.group(1)}_STATUS_{name}"
    elif kind == "xid":
        m = re.search(r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F:.]+)\): (\d+)", text)
        if m:
            det["xid"] = int(m.group(2))
            det["pci"] = m.group(1)
    elif kind == "slurm_oom_kill":
        m = LINE_PATTERNS_BY_KIND["slurm_oom_kill"].search(text)
        if m:
            det["oom_kills"], det["step"] = int(m.group(1)), m.group(2).rstrip(".")
    elif kind == "kernel_oom":
        m = re.search(r"Killed process (\d+) \((.*?)\)", text)
        if m:
            det["pid"], det["comm"] = int(m.group(1)), m.group(2)
        m = re.search(r"shmem-rss:(\d+)kB", text)
        if m:
            det["shmem_rss_bytes"] = int(m.group(1)) * 1024
        det["cgroup"] = "Memory cgroup out of memory" in text or "CONSTRAINT_MEMCG" in text
    # The share is of the total the allocator's message names: only PyTorch's message names one beside the request
    # (MPS names a "max allowed", HAMi a limit). Under HAMi/vcuda that total is the slice's, so a request over 100x a
    # small slice reads as a suspect size too (docs/explain.md).
    x, t = nums.get("requested_bytes", 0), nums.get("total_bytes") if kind == "torch_oom" else None
    if x >= ABSURD_BYTES or (t and x > ABSURD_SHARE * t):  # (a total of 0 bytes: a lost device, no share to take)
        det["absurd_size"] = True  # no device has that much, or not a hundredth of it: the size itself is suspect
    return nums, det


# vLLM's memory profile, logged just before its KV-cache check fails (vllm worker.py, 0.7): "the current vLLM instance can
# use total_gpu_memory (8.00GiB) x gpu_memory_utilization (0.70) = 5.60GiB" and "model weights take 5.20GiB;
# non_torch_memory takes 0.03GiB; PyTorch activation peak memory takes 1.42GiB; the rest of the memory reserved for KV
# Cache is -1.05GiB." The figures say what took the budget (a walkthrough, session 28, was asked to grep for them).
_GIB_N = r"(-?[0-9]+(?:\.[0-9]+)?) ?GiB"
_VLLM_PROFILE = (
    ("total_bytes", r"total_gpu_memory \(" + _GIB_N + r"\) x gpu_memory_utilization"),
    ("utilization", r"x gpu_memory_utilization \(([0-9.]+)\)"),
    ("budget_bytes", r"x gpu_memory_utilization \([0-9.]+\) = " + _GIB_N),
    ("weights_bytes", r"model weights take " + _GIB_N),
    ("non_torch_bytes", r"non_torch_memory takes " + _GIB_N),
    ("activation_bytes", r"activation peak memory takes " + _GIB_N),
    ("kv_cache_bytes", r"the rest of the memory reserved for KV Cache is " + _GIB_N),
)


def vllm_profile(text: str) -> dict[str, Any] | None:
    """vLLM's last memory profile in `text` (the lines before its KV-cache error): bytes, and the utilization as a
    fraction; None without the KV cache's and the GPU's figures."""
    at = text.rfind("the rest of the memory reserved for KV Cache is")
    if at < 0:
        return None
    text = text[max(0, text.rfind("total_gpu_memory (", 0, at)):]
    out: dict[str, Any] = {}
    for key, pat in _VLLM_PROFILE:
        m = re.search(pat, text)
        if m:
            out[key] = float(m.group(1)) if key == "utilization" else int(float(m.group(1)) * (1 << 30))
    return out if "kv_cache_bytes" in out and "total_bytes" in out else None


# cublasStatus_t / cudnnStatus_t values (cublas_api.h, cudnn.h).
_STATUS_CODES = {
    "CUBLAS": {1: "NOT_INITIALIZED", 3: "ALLOC_FAILED", 7: "INVALID_VALUE", 8: "ARCH_MISMATCH",
               11: "MAPPING_ERROR", 13: "EXECUTION_FAILED", 14: "INTERNAL_ERROR", 15: "NOT_SUPPORTED"},
    "CUDNN": {1: "NOT_INITIALIZED", 2: "ALLOC_FAILED", 3: "BAD_PARAM", 4: "INTERNAL_ERROR",
              5: "INVALID_VALUE", 6: "ARCH_MISMATCH", 7: "MAPPING_ERROR", 8: "EXECUTION_FAILED",
              9: "NOT_SUPPORTED"},
}


def _torch_format(text: str) -> str:
    """Which generation of the caching allocator message (memory-tools §4.5)."""
    if "reserved by PyTorch but unallocated" in text or "total capacty" in text or "total capacity of" in text:
        return "2.1+"
    if "reserved in total by PyTorch" in text:
        return "1.4-2.0"
    if " cached)" in text:
        return "1.0-1.3"
    return "unknown"


# TensorFlow's BFC allocator retrying smaller: "... The caller indicates that this is not a failure".
TF_NOT_A_FAILURE = "indicates that this is not a failure"
# The warning itself (not a line that quotes only its last sentence): a caught shortage, `oom_caught`. Read
# before the mention test, which would take "not a failure" for a negation and leave the line to tf_oom.
_BFC_CAUGHT = re.compile(BFC_CAUGHT)
_BFC_PIECES = 8  # warnings on one line whose neighbouring text is still read (classify_line)


def classify_line(line: str) -> str | None:
    """The kind of an OOM-like line, or None."""
    if line.lstrip().startswith("Search for `"):
        return None  # PyTorch's hint after a CUDA error ("Search for `cudaErrorMemoryAllocation' in ...")
    if TF_NOT_A_FAILURE in line:  # TF's BFC retry warning: a caught shortage, or a quotation of one
        spans = [m.span() for m in itertools.islice(_BFC_CAUGHT.finditer(line), _BFC_PIECES + 1)]
        if not spans:
            return None
        if len(spans) > _BFC_PIECES:
            return "oom_caught"  # a storm of warnings on one line (a cut line ends in a piece of one): the warning
        cuts = [0] + [i for sp in spans for i in sp] + [len(line)]
        # what shares its line (interleaved stderr, a report quoting the warning and then its crash) is read too,
        # piece by piece between the warnings (no piece holds a whole one: no recursion past one level); not the
        # head of another BFC warning wrapped onto the next line ("... (GPU_0_bfc) ran out of memory")
        parts = (line[a:b] for a, b in zip(cuts[::2], cuts[1::2]))
        around = next((k for k in map(classify_line, (p for p in parts if "bfc) ran out of memory" not in p)) if k), None)
        return around or "oom_caught"
    gated = gate_index("line").names_in(line)
    if not gated:
        return None
    for kind, _gate, pat in _GATED_PATTERNS:
        if kind in gated and _failure_match(kind, pat, line):
            return kind
    return None


_WARN_NOT_FAILURE = frozenset({"generic_oom", "tensorrt_oom"})
# Python's warnings module ("graph.py:744: UserWarning: Plan failed with a cudnnException: ...
# CUDNN_STATUS_NOT_SUPPORTED"): cuDNN tried a plan, fell back, and the step went on. Not for the driver's
# "UserWarning: CUDA initialization: ..." (CUDA is then unusable: a report's real failure).
_PY_WARNING = re.compile(r"^(?:\s{0,40}\[rank\d+\]:?)?[^\n:]{0,300}?\.py:\d+: \w*Warning: ")  # bounded: no backtracking over a long run of blanks
_PY_WARNING_NOT_FAILURE = frozenset({"cublas_cudnn", "generic_oom", "tensorrt_oom"})
# A Chinese/Japanese clause that says what may happen, what a word means, or that a person killed the job.
_CJK_NOT_REPORT = re.compile(CJK_HEDGE + r"|(?<!と)表示(?!され)|手动|按了|kill -9|[Cc]trl|場合|かもしれ")


# A recovery line quoted by a report ("even though `Ran out of memory when regular VAE decoding, retrying
# with tiled VAE decoding.` is printed") still says the job went on; quoted by docs it reports no failure
# either (a marker is never one), so the mention test, there to keep failures out, is not asked.
_QUOTED_MARKERS_COUNT = frozenset({"oom_recovered", "autobatch_settled"})


def _failure_match(kind: str, pat: re.Pattern[str], line: str) -> bool:
    if kind in _WARN_NOT_FAILURE and WARN_LEVEL.match(line):
        return False
    if kind in _PY_WARNING_NOT_FAILURE and _PY_WARNING.match(line):
        return False
    for n, m in enumerate(pat.finditer(line)):
        if n >= 4:
            return False
        if is_mention(line, m.start(), m.end()) and kind not in _QUOTED_MARKERS_COUNT:
            continue
        if (kind == "generic_oom" or (kind == "exit_137" and m.group(0)[:1].islower())) and docs_clause(line, m.start()):
            continue  # "if the process is killed by the OOM killer": what docs say may happen
        if kind == "exit_137" and CJK_CHAR.search(line) and _CJK_NOT_REPORT.search(line):
            continue  # "如果出现Killed，一般是内存不足" (what may happen), "Killed表示任务被用户手动终止", "按了 kill -9"
        if kind == "generic_oom" and _HOW_TO.search(line[max(0, m.start() - 80):m.start()]):
            continue  # a pointer to advice: Ray's "Refer to the documentation on how to address the out of memory issue"
        if kind == "generic_oom" and EXAMPLE_INTRO.match(line):
            continue  # the introduction of an example ("it fails with the OOM error like:") names its kind
        if kind == "generic_oom" and (not (ERROR_WORDS.search(line) or not line[:m.start()].strip(" \t[(*>-!:|"))
                                      or GENERAL_STATEMENT.search(line)):
            continue
        return True
    return False


# --- memory readings in training logs (for leak detection) --------------------------------------
# Labels people print: torch.cuda.memory_allocated()/max_memory_allocated()/memory_reserved(),
# "mem", "GPU mem", YOLO's "GPU_mem 3.52G", Lightning/transformers "memory". Value with a unit.
READING_ANCHOR = re.compile(r"[Mm]em|MEM|[Aa]lloc|[Rr]eserv|\d/\d+ +[0-9.]+G ")
_ANCHOR_WORDS = ("mem", "Mem", "MEM", "alloc", "Alloc", "reserv", "Reserv")
_ANCHOR_ROW = re.compile(r"\d/\d+ +[0-9.]+G ")


def has_reading_anchor(line: str) -> bool:
    """READING_ANCHOR.search(line) is not None, without its digit branch being tried at every digit
    of a line (~8 us a line on JSON logs, where most lines are digits)."""
    return any(w in line for w in _ANCHOR_WORDS) or ("G " in line and _ANCHOR_ROW.search(line) is not None)
# Every READING_ANCHOR match contains one of these (oom_prefilter.reading_line_starts finds them in one pass).
READING_LITERALS = ("em", "EM", "lloc", "eserv", "G ")
READING = re.compile(
    r"(?i)\b(max_memory_allocated|memory_allocated|max_memory_reserved|memory_reserved|gpu[_ ]?mem(?:ory)?|"
    r"cuda[_ ]mem(?:ory)?|mem(?:ory)?(?:[_ ](?:allocated|alloc|reserved|used))?|allocated|reserved)\b"
    r"[\"']?\s*(?:\(\w+\))?\s*[:=]?\s*" + _N + r"\s?(GiB|MiB|GB|MB|G|M)\b"
)
STEP = re.compile(r"(?i)\b(?:global_step|step|iter(?:ation)?|it|batch|epoch)\s*[:=#]?\s*\[?(\d+)")


_NUMBER_UNIT = re.compile(r"(?i)[0-9,]\s?(?:GiB|MiB|GB|MB|G|M)\b")  # READING's `_N \s?(unit)\b`, alone
# mmcv TextLoggerHook: "Epoch [1][3100/23454] ... memory: 6814, ..." (MiB of max_memory_allocated).
MMCV = re.compile(r"\]\[(\d+)/\d+\].*?\bmemory: (\d+),")
# YOLOv5 / Ultralytics progress rows: "  12/300  3.52G  0.0415 ..." (memory_reserved() / 1E9, "G").
YOLO = re.compile(r"^\s*(\d+)/\d+\s+([0-9.]+)G\s")


def parse_reading(line: str) -> tuple[str, int, int | None] | None:
    """(label, bytes, step or None) from a line that prints a memory figure."""
    m = MMCV.search(line) if "memory: " in line else None
    if m:
        return "mmcv_memory", int(m.group(2)) * 1024**2, int(m.group(1))
    m = YOLO.search(line) if "G" in line and "/" in line else None
    if m:
        return "yolo_gpu_mem", int(float(m.group(2)) * 1e9), int(m.group(1))
    if not _NUMBER_UNIT.search(line):  # what every READING match ends with: ~10x cheaper to rule out
        return None
    m = READING.search(line)
    if not m:
        return None
    label, number, unit = m.group(1).lower().replace(" ", "_"), m.group(2), m.group(3)
    unit = {"G": "GiB", "M": "MiB"}.get(unit, unit)
    try:
        value = to_bytes(number, unit)
    except (ValueError, KeyError):
        return None
    s = STEP.search(line)
    return label, value, int(s.group(1)) if s else None


def sizes_in(text: str) -> list[int]:
    return [to_bytes(n, u) for n, u in _SIZE.findall(text)[:16]]
