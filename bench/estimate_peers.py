"""Accuracy against the peers on the validation zoo: oomdoctor estimate vs Accelerate's estimate-memory
logic vs a params x k rule, all against peak reserved memory measured on the H100.

    PYTHONPATH=src python bench/estimate_peers.py validation/results/estimate_zoo_run1.json \
        validation/results/estimate_zoo_run3.json --ours validation/results/estimates_local_torch2141.json

Accelerate: `accelerate estimate-memory` builds the model on the meta device, sums parameter bytes
(calculate_maximum_sizes) and reports `estimate_training_usage` ("Training using Adam", batch 1, no
activations): the float32 row for fp32 jobs, the float16 row for autocast jobs, the load size for
inference. params x k: bytes per parameter for weights + gradients + optimizer state (Adam 16,
SGD-momentum 12, SGD 8, inference 4) plus 20% for activations (EleutherAI's rule of thumb).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
K = {"adam": 16, "adamw": 16, "sgd-momentum": 12, "sgd": 8}


def _param_bytes(stem: str):
    import torch

    from oomdoctor.workload.load import load_workload

    with torch.device("meta"):
        spec = load_workload(ROOT / "validation" / "workloads" / f"{stem}.py").spec(1)
    return spec


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("results", nargs="+")
    ap.add_argument("--ours", required=True)
    a = ap.parse_args()
    from accelerate.commands.estimate import estimate_training_usage
    from accelerate.utils import calculate_maximum_sizes

    ours = {(r["workload"], r["batch_size"]): r for r in json.load(open(a.ours))["rows"] if "estimated_reserved" in r}
    rows = []
    for path in a.results:
        for z in json.load(open(path))["zoo"]:
            if "peak_reserved" not in z:
                continue
            spec = _param_bytes(z["workload"])
            total, _ = calculate_maximum_sizes(spec.model)
            if not spec.train:
                acc = total
            elif spec.amp:
                acc = max(estimate_training_usage(total, "float16").values())  # the CLI passes fp32 bytes
            else:
                acc = max(estimate_training_usage(total, "float32").values())
            k = 4 if not spec.train else K[spec.optimizer]
            rule = total / 4 * k * 1.2
            m = z["peak_reserved"]
            o = ours.get((z["workload"], z["batch_size"]), {}).get("estimated_reserved")
            rows.append((z["workload"], z["batch_size"], m, o, acc, rule))
    print(f"{'config':34s} {'measured':>10s} {'oomdoctor':>10s} {'accelerate':>11s} {'params x k':>11s}")
    errs: dict[str, list[float]] = {"oomdoctor": [], "accelerate": [], "params x k": []}
    for w, b, m, o, acc, rule in rows:
        cells = []
        for name, x in (("oomdoctor", o), ("accelerate", acc), ("params x k", rule)):
            if x is None:
                cells.append("n/a")
                continue
            e = 100 * (x / m - 1)
            errs[name].append(e)
            cells.append(f"{e:+.1f}%")
        print(f"{w + '@' + str(b):34s} {m / 2**20:8.0f}Mi {cells[0]:>10s} {cells[1]:>11s} {cells[2]:>11s}")
    print()
    for name, e in errs.items():
        if e:
            print(f"{name:12s} n={len(e):2d} median |err| {statistics.median(abs(x) for x in e):6.1f}%  "
                  f"worst {max(abs(x) for x in e):6.1f}%  under-estimates {sum(x < 0 for x in e)}/{len(e)}  "
                  f"beyond -5%: {sum(x < -5 for x in e)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
