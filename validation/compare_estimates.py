"""Run the estimator on every measured zoo configuration and compare with the GPU ground truth.

    PYTHONPATH=src python validation/compare_estimates.py validation/results/estimate_zoo_run*.json \
        --out validation/results/estimates_<where>.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("results", nargs="+")
    ap.add_argument("--out")
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    from oomdoctor.estimate.estimator import estimate

    rows = []
    for path in a.results:
        for z in json.load(open(path))["zoo"]:
            if "peak_reserved" not in z or (a.only and a.only not in z["workload"]):
                continue
            t0 = time.time()
            try:
                e = estimate(HERE / "workloads" / f"{z['workload']}.py", z["batch_size"])
            except Exception as exc:  # noqa: BLE001
                print(z["workload"], z["batch_size"], "FAILED", exc, file=sys.stderr)
                rows.append({"workload": z["workload"], "batch_size": z["batch_size"], "error": str(exc)})
                continue
            row = {"workload": z["workload"], "batch_size": z["batch_size"],
                   "measured_reserved": z["peak_reserved"], "estimated_reserved": e.peak_reserved_bytes,
                   "measured_allocated": z["peak_allocated"], "estimated_allocated": e.peak_allocated_bytes,
                   "measured_process": z.get("nvml_process_used"), "estimated_process": e.process_total_bytes,
                   "seconds": round(time.time() - t0, 1), "peak_phase": e.peak_phase}
            row["err_reserved_pct"] = 100 * (e.peak_reserved_bytes / z["peak_reserved"] - 1)
            row["err_allocated_pct"] = 100 * (e.peak_allocated_bytes / z["peak_allocated"] - 1)
            if z.get("nvml_process_used"):
                row["err_process_pct"] = 100 * (e.process_total_bytes / z["nvml_process_used"] - 1)
            rows.append(row)
            print(f"{z['workload']:28s} {z['batch_size']:5d}  R {z['peak_reserved'] / 2**20:9.1f} est {e.peak_reserved_bytes / 2**20:9.1f} "
                  f"({row['err_reserved_pct']:+6.2f}%)  A {row['err_allocated_pct']:+6.2f}%  "
                  f"P {row.get('err_process_pct', float('nan')):+6.2f}%  {row['seconds']}s {e.peak_phase}", flush=True)
    errs = [abs(r["err_reserved_pct"]) for r in rows if "err_reserved_pct" in r]
    if errs:
        print(f"n={len(errs)} median |err| {statistics.median(errs):.2f}%  worst {max(errs):.2f}%  "
              f"most negative {min(r['err_reserved_pct'] for r in rows if 'err_reserved_pct' in r):+.2f}%")
    if a.out:
        import torch

        Path(a.out).write_text(json.dumps({"torch": torch.__version__, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
