"""Whose allocator an XLA line is: JAX logs carry the BFC allocator's line as TensorFlow's do.

XLA's BFC allocator (xla/tsl/framework/bfc_allocator.cc) logs "Allocator (GPU_0_bfc) ran out of memory trying to
allocate ..." in a TensorFlow job and in a JAX job alike. The pattern table reads it as TensorFlow's (tf_oom), which
a JAX user was then told: "TensorFlow ran out", with TensorFlow's deciding command (a new user's walkthrough,
session 26). Read with the rest of its log: where the log is JAX's and not TensorFlow's, the line is JAX's (jax_oom).
Pure: events and the scanner's samples in, events relabelled in place.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from oomdoctor.explain import patterns as P
from oomdoctor.explain.kubernetes import K8S_EXIT_LINE

BFC_LINE = re.compile(r"Allocator \(\w+\) ran out of memory trying to allocate")
# TensorFlow's own paths for the allocator: TensorFlow >= 2.14 builds XLA as local_xla / local_tsl; before, the
# allocator was tensorflow/core/common_runtime (which JAX built as external/org_tensorflow/tensorflow/...)
_TF_PATH = re.compile(r"\blocal_(?:xla|tsl)/|(?<!org_tensorflow/)\btensorflow/core/common_runtime/bfc_allocator")
# JAX's: its bazel workspaces (external/xla, external/tsl), jaxlib, XlaRuntimeError, frames of jax and its libraries
_JAX = re.compile(r"\bexternal/(?:xla|tsl)/|\bjaxlib\b|XlaRuntimeError|[/\\](?:jax|flax|optax|equinox|haiku)[/\\]|"
                  r"^\s*(?:import jax\b|from jax\b)|\bjax\.(?:numpy|random|jit|lax|devices)\b", re.M)
# TensorFlow's failure: its errors and its Python frames (not its start-up lines: a JAX job that reads data with
# tensorflow_datasets prints those too)
_TF = re.compile(r"ResourceExhaustedError|OOM when allocating tensor|[/\\]tensorflow[/\\]python[/\\]|"
                 r"[/\\]keras[/\\]|\btensorflow\.python\.|^\s*(?:import tensorflow\b|from tensorflow\b)", re.M)


def jax_logs(events: Iterable[Any], samples: Iterable[tuple[str, int, str]]) -> set[str]:
    """The sources whose text (head and tail samples, events) is JAX's and not TensorFlow's."""
    texts: dict[str, list[str]] = {}
    for source, _, text in samples:
        texts.setdefault(source, []).append(text)
    for e in events:
        texts.setdefault(e.source, []).append(e.text)
    out = set()
    for source, parts in texts.items():
        whole = "\n".join(parts)
        if _JAX.search(whole) and not _TF.search(whole):
            out.add(source)
    return out


def relabel_xla(events: list[Any], samples: list[tuple[str, int, str]]) -> None:
    """BFC allocator lines (tf_oom) of a JAX log become jax_oom, with the numbers read as JAX's."""
    heads = [e for e in events if e.kind == "tf_oom" and BFC_LINE.search(e.text) and not _TF_PATH.search(e.text)]
    if not heads:
        return
    jax = jax_logs(events, samples)
    for e in heads:
        if e.source in jax:
            e.kind = "jax_oom"
            e.numbers, det = P.extract("jax_oom", e.text)
            e.details.update(det)


# Servers and runtimes that share an event kind with another framework, told apart by their own words, so that the
# fix and the deciding command are theirs (a walkthrough, session 27: TGI was told vLLM's knobs, llama.cpp training
# advice, vLLM's "No available memory for the cache blocks" to lower max_model_len).
TGI = "tgi"  # text-generation-inference's warmup: "Not enough memory to handle N prefill tokens"
VLLM_CACHE_BLOCKS = "vllm_cache_blocks"  # vLLM: the weights left nothing for the KV cache
LLAMA_CPP = "llama_cpp"  # llama.cpp / ggml's CUDA buffer allocation
_TGI = re.compile(r"prefill tokens|--max-batch-prefill-tokens|--max-total-tokens|text_generation_")
# TGI's router when the shard's warmup failed: "Unable to warmup model: Generation(\"... out of memory ...\")" (a
# walkthrough, session 28: read as a vague OOM and told PyTorch training advice)
_TGI_WARMUP = re.compile(r"Unable to warmup model\b")
_VLLM_BLOCKS = re.compile(r"No available memory for the cache blocks")
# (ollama's runner: "Error: llama runner process has terminated: cudaMalloc failed: out of memory", ggml's line after it)
LLAMA_CPP_LINE = re.compile(r"\bggml_\w+: (?:allocating|failed to allocate)\b|\bllama_\w+: (?:failed|error)|"
                            r"\bggml_(?:backend_)?cuda\w*\b[^\n]*\bout of memory|\bllama runner process has terminated\b")


K8S_EXIT = "k8s_exit"  # an exit code 137 as Kubernetes records it (kubectl describe, the pod's YAML)


def server_kind(kind: str, text: str) -> str:
    """The framework an event of `kind` belongs to where its kind is shared (TGI's and vLLM's capacity checks,
    llama.cpp's vague OOM), and the runtime that printed an exit code 137: one of TGI, VLLM_CACHE_BLOCKS, LLAMA_CPP,
    K8S_EXIT; else `kind` itself."""
    if kind == "vllm_capacity":
        if _TGI.search(text):
            return TGI
        if _VLLM_BLOCKS.search(text):
            return VLLM_CACHE_BLOCKS
    if kind == "generic_oom" and LLAMA_CPP_LINE.search(text):
        return LLAMA_CPP
    if kind in ("generic_oom", "torch_oom") and _TGI_WARMUP.search(text):
        return TGI
    if kind == "exit_137" and K8S_EXIT_LINE.match(text):
        return K8S_EXIT  # who killed the container is in the pod's events, not in a rerun with CUDA_LAUNCH_BLOCKING
    return kind
