"""Wall time of one `estimate` (trace three steps + allocator replay) on this machine, against the peer
in the same run (Accelerate's estimate-memory logic: meta-device model + parameter sum).

    PYTHONPATH=src python bench/estimate_speed.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = [("resnet50_sgdm_fp32", 64), ("bert_adamw_fp32", 16), ("gpt2_adamw_bf16", 8), ("mlp_adam_fp32", 512)]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
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
