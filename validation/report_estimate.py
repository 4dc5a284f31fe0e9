"""Markdown tables for docs/validation/estimate.md from the result files (no GPU needed).

    python validation/report_estimate.py > /tmp/tables.md
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

R = Path(__file__).resolve().parent / "results"


def main() -> None:
    est = json.loads((R / "estimates_run4_torch2141.json").read_text())
    rows = [r for r in est["rows"] if "err_reserved_pct" in r]
    print("| config | batch | measured peak reserved | estimate | error | peak allocated error | NVML process | estimate | error |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['workload']} | {r['batch_size']} | {r['measured_reserved'] / 2**20:.0f} MiB | "
              f"{r['estimated_reserved'] / 2**20:.0f} MiB | {r['err_reserved_pct']:+.2f}% | {r['err_allocated_pct']:+.2f}% | "
              f"{r['measured_process'] / 2**20:.0f} MiB | {r['estimated_process'] / 2**20:.0f} MiB | {r['err_process_pct']:+.2f}% |")
    errs = [r["err_reserved_pct"] for r in rows]
    alloc = [r["err_allocated_pct"] for r in rows]
    proc = [r["err_process_pct"] for r in rows]
    print()
    print(f"- configurations: {len(rows)} (torch {est['torch']} on this 2-core CPU)")
    for name, e in (("peak reserved", errs), ("peak allocated", alloc), ("NVML process total", proc)):
        print(f"- {name}: median |error| {statistics.median(abs(x) for x in e):.2f}%, worst {max(e, key=abs):+.2f}%, "
              f"under-estimates beyond -5%: {sum(x < -5 for x in e)}")
    mb = R / "max_batch_run4_torch2141.json"
    if mb.exists():
        print()
        print("| config | memory limit | true max batch (H100 bisection) | estimated | error | traces | seconds |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for r in json.loads(mb.read_text())["rows"]:
            print(f"| {r['workload']} | {r['memory_limit_bytes'] / 2**30:.0f} GiB | {r['true_max_batch']} | "
                  f"{r['estimated_max_batch']} | {r['err_pct']:+.1f}% | {r['traces']} | {r['seconds']} |")


if __name__ == "__main__":
    main()
