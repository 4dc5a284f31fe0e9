"""CPU check: the trace shortcuts (estimate/periodic.py: step 3 written out from step 2, generate()'s
decode steps past the sixth written out) give the same estimate as tracing everything, on every
configuration of validation/estimate_llm_zoo.py (no GPU; `--skip-measure` style: estimates only).

    PYTHONPATH=src python3 validation/estimate_shortcut_check.py [--only NAME,...] [--json PATH]

Prints, per configuration, peak reserved and allocated both ways, their relative difference and the
seconds each took; exit 1 when any differs by more than 0.1%.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def one(name: str, shortcuts: bool) -> dict:
    from estimate_llm_zoo import ZOO, _config, _recipe

    from oomdoctor.estimate import trace
    from oomdoctor.estimate.hf import estimate_model

    trace.SHORTCUTS = shortcuts
    _, shape, batch, fields = next(z for z in ZOO if z[0] == name)
    t = time.perf_counter()
    try:
        est = estimate_model(_config(shape), _recipe(fields), batch, gpu="h100")
    except Exception as exc:  # noqa: BLE001 - reported per row
        return {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
    return {"reserved": est.peak_reserved_bytes, "allocated": est.peak_allocated_bytes, "phase": est.peak_phase,
            "seconds": round(time.perf_counter() - t, 2)}


def main() -> int:
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    from estimate_llm_zoo import ZOO

    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="")
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    names = [z[0] for z in ZOO if not a.only or z[0] in a.only.split(",")]
    rows, bad = [], 0
    print(f"{'configuration':26s} {'reserved (full)':>16s} {'shortcut':>9s} {'allocated':>9s} {'full s':>7s} {'fast s':>7s}")
    for name in names:
        full, fast = one(name, False), one(name, True)
        row = {"name": name, "full": full, "shortcuts": fast}
        if "error" in full or "error" in fast:
            print(f"{name:26s} {full.get('error') or fast.get('error')}")
            bad += ("error" in full) != ("error" in fast)
        else:
            dr = (fast["reserved"] - full["reserved"]) / full["reserved"]
            da = (fast["allocated"] - full["allocated"]) / full["allocated"]
            row.update(reserved_rel=dr, allocated_rel=da)
            bad += abs(dr) > 1e-3 or abs(da) > 1e-3
            print(f"{name:26s} {full['reserved'] / 2**30:13.3f} GiB {dr:+9.4%} {da:+9.4%} {full['seconds']:7.1f} "
                  f"{fast['seconds']:7.1f}", flush=True)
        rows.append(row)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    print(f"{len(rows) - bad} of {len(rows)} within 0.1%")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
