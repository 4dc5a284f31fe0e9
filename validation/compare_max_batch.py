"""Estimated max batch (oomdoctor estimate --max-batch) vs the true one found on the GPU by bisection under
torch.cuda.set_per_process_memory_fraction (validation/results/estimate_zoo_run*.json, "max_batch").

    PYTHONPATH=src python validation/compare_max_batch.py validation/results/estimate_zoo_run1.json \
        validation/results/estimate_zoo_run2_maxbatch.json --out validation/results/max_batch_local.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("results", nargs="+")
    ap.add_argument("--out")
    a = ap.parse_args()
    from oomdoctor.estimate.estimator import max_batch

    rows = []
    for path in a.results:
        for m in json.load(open(path))["max_batch"]:
            if "max_batch_size" not in m:
                continue
            t = time.time()
            est, tried = max_batch(HERE / "workloads" / f"{m['workload']}.py", memory_limit=m["memory_limit_bytes"])
            row = {"workload": m["workload"], "memory_limit_bytes": m["memory_limit_bytes"],
                   "true_max_batch": m["max_batch_size"], "estimated_max_batch": est,
                   "err_pct": 100 * (est / m["max_batch_size"] - 1), "traces": len(tried),
                   "seconds": round(time.time() - t, 1)}
            rows.append(row)
            print(f"{m['workload']:24s} limit {m['memory_limit_bytes'] / 2**30:4.0f} GiB  true {m['max_batch_size']:6d}  "
                  f"estimated {est:6d} ({row['err_pct']:+.1f}%)  {row['traces']} traces, {row['seconds']}s", flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps({"rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
