"""Render validation/max_batch_suite.py's JSON as the table in docs/validation/max-batch.md.

    python validation/render_max_batch_suite.py $OUT/max_batch_suite.json [--page docs/validation/max-batch.md]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from render_suite_common import gib, replace_block

ROOT = Path(__file__).resolve().parent.parent


def table(doc: dict) -> str:
    s, dev = doc["summary"], doc.get("device") or {}
    lines = [f"Suite run on {dev.get('gpu') or 'GPU'} (torch {dev.get('torch')}, CUDA {dev.get('cuda')}), "
             f"`--margin 0`, {s['parallel']} cases at a time: {s['passed']} of {s['cases']} exact within the "
             f"tolerance (1 under 50, 2% above); trials median {s['median_trials']}, max {s['max_trials']}; "
             f"{s['wall_seconds']} s in all.", "",
             "| workload | cap | dim | truth | max-batch | trials | wall | recommended | pressure at the largest | pass |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for c in doc["cases"]:
        p = c.get("pressure") or {}
        pressure = (f"{p.get('alloc_retries')} retries, {p.get('survived_ooms')} survived OOMs"
                    if p.get("under_pressure") else ("none" if p else ""))
        dim = c["dim"] if c["dim"] == "batch" else f"seq @ batch {c.get('fixed_batch')}"
        lines.append(f"| `{c['case']}` | {gib(c['cap_bytes'])} | {dim} | {c.get('truth')} | {c.get('answer')} | "
                     f"{c.get('trials')} | {c.get('max_batch_wall_seconds')} s | {c.get('recommended') or ''} | "
                     f"{pressure} | {'yes' if c['passed'] else '**no**'} |")
    lines += ["", "Trials per case (batch: purpose -> outcome):", ""]
    for c in doc["cases"]:
        tl = ", ".join(f"{t['batch']}: {t['purpose']} -> {t['outcome']}" for t in c.get("trial_list") or [])
        lines.append(f"- `{c['case']}`: {tl}; truth checks in fresh processes: "
                     f"{(c.get('truth_detail') or {}).get('fresh_process_checks')}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("json")
    ap.add_argument("--page", default=str(ROOT / "docs" / "validation" / "max-batch.md"))
    args = ap.parse_args()
    doc = json.loads(Path(args.json).read_text())
    replace_block(Path(args.page), "max-batch-suite", table(doc))
    print(f"updated {args.page}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
