"""Wall time of one `estimate` (trace three steps + allocator replay) on this machine, against the peer
in the same run (Accelerate's estimate-memory logic: meta-device model + parameter sum).

    PYTHONPATH=src python bench/estimate_speed.py [--repeat 3]
    PYTHONPATH=src python bench/estimate_speed.py --llm      # estimate --model on 1B-70B configs

--llm: 1B-70B Llama shapes, Qwen2.5-7B, Mistral-7B and Gemma-2B, each with train, lora, infer and
generate; each `oomdoctor estimate --model` run in its own process (import included, as a user runs
it): wall time, CPU time and the process's own peak RSS (the estimator's memory), as a markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = [("resnet50_sgdm_fp32", 64), ("bert_adamw_fp32", 16), ("gpt2_adamw_bf16", 8), ("mlp_adam_fp32", 512)]


LLM_MODELS = ["llama3.2-1b", "llama3.2-3b", "llama3-8b", "llama2-13b", "llama3-70b", "qwen2.5-7b", "mistral-7b",
              "gemma-2b"]
LLM_TASKS = [("train", 1, 2048), ("lora", 2, 2048), ("infer", 4, 2048), ("generate", 4, 512)]  # (task, batch, seq)
# the heaviest zoo recipe: LoRA on every linear layer with checkpointing (backward recomputes the forward)
LLM_EXTRA = [("mistral-7b", "lora", 8, 2048, ["--gradient-checkpointing", "--lora-targets", "all-linear"])]
LLAMA70B = {"model_type": "llama", "vocab_size": 128256, "hidden_size": 8192, "intermediate_size": 28672,
            "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
            "max_position_embeddings": 8192, "rope_theta": 500000.0}
LLAMA13B = {"model_type": "llama", "vocab_size": 32000, "hidden_size": 5120, "intermediate_size": 13824,
            "num_hidden_layers": 40, "num_attention_heads": 40, "num_key_value_heads": 40,
            "max_position_embeddings": 4096}  # Llama-2-13B's shape: 40 blocks, FULL_DEPTH_MAX


def llm(only: str = "") -> int:
    """Every model x task of LLM_MODELS x LLM_TASKS (generate: --max-new-tokens 128), each
    `oomdoctor estimate --model` in its own process; a markdown table on stdout."""
    import json
    import os
    import platform
    import subprocess
    import sys
    import tempfile

    sys.path.insert(0, str(ROOT / "validation"))
    from estimate_llm_zoo import SHAPES

    shapes = dict(SHAPES, **{"llama3-70b": LLAMA70B, "llama2-13b": LLAMA13B})
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    import torch
    import transformers

    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; python {platform.python_version()}, "
          f"torch {torch.__version__}, transformers {transformers.__version__}")
    print("| model | blocks | task | batch | seq | wall s | CPU s | peak RSS MiB | peak reserved |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for shape in LLM_MODELS:
            if only and shape not in only.split(","):
                continue
            cfg = os.path.join(tmp, f"{shape}.json")
            with open(cfg, "w") as fh:
                json.dump(shapes[shape], fh)
            blocks = shapes[shape].get("num_hidden_layers")
            cases = [(t, b, n, ["--max-new-tokens", "128"] if t == "generate" else []) for t, b, n in LLM_TASKS]
            cases += [(t, b, n, x) for m, t, b, n, x in LLM_EXTRA if m == shape]
            for task, batch, seq, extra in cases:
                cmd = [sys.executable, "-m", "oomdoctor", "estimate", "--model", cfg, "--task", task, "--batch-size",
                       str(batch), "--seq-len", str(seq), "--format", "json", *extra]
                # wall, CPU and peak RSS of this child alone: /usr/bin/time-free, through a wait4 on it
                t = time.perf_counter()
                proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                out = proc.stdout.read()
                _, status, ru = os.wait4(proc.pid, 0)
                wall = time.perf_counter() - t
                proc.returncode = os.waitstatus_to_exitcode(status)
                cpu = ru.ru_utime + ru.ru_stime
                peak = json.loads(out)["peak_reserved_bytes"] if proc.returncode in (0, 1) else None
                label = task + ("" if task == "generate" or not extra else " " + " ".join(extra))
                print(f"| {shape} | {blocks} | {label} | {batch} | {seq} | {wall:.1f} | {cpu:.1f} | {ru.ru_maxrss / 1024:.0f} "
                      f"| {'-' if peak is None else f'{peak / 2**30:.1f} GiB'} |", flush=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--llm", action="store_true")
    ap.add_argument("--only", default="", help="--llm: these models only (comma-separated)")
    a = ap.parse_args()
    if a.llm:
        return llm(a.only)
    import torch

    from oomdoctor.estimate.estimator import estimate
    from oomdoctor.workload.load import load_workload

    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}")
    print(f"{'workload':28s} {'batch':>5s} {'estimate s':>11s} {'accelerate s':>13s} {'ratio':>7s}")
    for stem, batch in CASES:
        path = ROOT / "validation" / "workloads" / f"{stem}.py"
        ours, peer = [], []
        for _ in range(a.repeat):
            t = time.perf_counter()
            estimate(path, batch)
            ours.append(time.perf_counter() - t)
            t = time.perf_counter()
            from accelerate.commands.estimate import estimate_training_usage
            from accelerate.utils import calculate_maximum_sizes

            with torch.device("meta"):
                spec = load_workload(path).spec(1)
            total, _ = calculate_maximum_sizes(spec.model)
            estimate_training_usage(total, "float32")
            peer.append(time.perf_counter() - t)
        o, p = statistics.median(ours), statistics.median(peer)
        print(f"{stem:28s} {batch:5d} {o:11.2f} {p:13.2f} {o / p:6.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
