"""Wall time of one `estimate` (trace three steps + allocator replay) on this machine, against the peer
in the same run (Accelerate's estimate-memory logic: meta-device model + parameter sum).

    PYTHONPATH=src python bench/estimate_speed.py [--repeat 3]
    PYTHONPATH=src python bench/estimate_speed.py --llm      # estimate --model on 1B-70B configs

--llm: each `oomdoctor estimate --model` run in its own process (import included, as a user runs it),
wall time and the process's peak RSS (the estimator's own memory).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = [("resnet50_sgdm_fp32", 64), ("bert_adamw_fp32", 16), ("gpt2_adamw_bf16", 8), ("mlp_adam_fp32", 512)]


LLM_CASES = [  # (shape in validation/estimate_llm_zoo.py or a 70B shape below, task, batch, seq)
    ("llama3.2-1b", "train", 4, 1024), ("llama3-8b", "train", 1, 2048), ("llama3-8b", "lora", 4, 2048),
    ("qwen2.5-7b", "lora", 4, 2048), ("llama3-70b", "train", 1, 4096), ("llama3-70b", "qlora", 1, 4096),
]
LLAMA70B = {"model_type": "llama", "vocab_size": 128256, "hidden_size": 8192, "intermediate_size": 28672,
            "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
            "max_position_embeddings": 8192, "rope_theta": 500000.0}


def llm() -> int:
    import json
    import os
    import resource
    import subprocess
    import sys
    import tempfile

    sys.path.insert(0, str(ROOT / "validation"))
    from estimate_llm_zoo import SHAPES

    shapes = dict(SHAPES, **{"llama3-70b": LLAMA70B})
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    print(f"{'model':14s} {'task':6s} {'batch':>5s} {'seq':>5s} {'wall s':>7s} {'CPU s':>6s} {'peak RSS MiB':>13s} {'peak reserved':>14s}")
    with tempfile.TemporaryDirectory() as tmp:
        for shape, task, batch, seq in LLM_CASES:
            cfg = os.path.join(tmp, f"{shape}.json")
            with open(cfg, "w") as fh:
                json.dump(shapes[shape], fh)
            ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            before = ru0.ru_maxrss
            t = time.perf_counter()
            r = subprocess.run([sys.executable, "-m", "oomdoctor", "estimate", "--model", cfg, "--task", task,
                                "--batch-size", str(batch), "--seq-len", str(seq), "--format", "json"],
                               env=env, capture_output=True, text=True)
            wall = time.perf_counter() - t
            ru = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = ru.ru_utime + ru.ru_stime - ru0.ru_utime - ru0.ru_stime  # wall time on an idle machine, about
            rss = ru.ru_maxrss  # max over children so far, KiB
            peak = json.loads(r.stdout)["peak_reserved_bytes"] if r.returncode in (0, 1) else None
            print(f"{shape:14s} {task:6s} {batch:5d} {seq:5d} {wall:7.1f} {cpu:6.1f} {rss / 1024:13.0f} "
                  f"{'-' if peak is None else f'{peak / 2**30:.1f} GiB':>14s}"
                  f"{'' if rss > before else '  (RSS not above an earlier run)'}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--llm", action="store_true")
    a = ap.parse_args()
    if a.llm:
        return llm()
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
