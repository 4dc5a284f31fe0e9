"""Render validation/record_suite.py's JSON as the table in docs/validation/record.md.

    python validation/render_record_suite.py $OUT/record_suite.json [--page docs/validation/record.md]
        [--block record-suite-run2]

The first GPU run's table (held-out, before tuning) is in the block `record-suite`; later runs go into
their own block (`--block`) so that the first run's numbers are never overwritten.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from render_suite_common import mib, replace_block

ROOT = Path(__file__).resolve().parent.parent


def rate(g: dict) -> str:
    parts = []
    if g.get("rate_per_step"):
        parts.append(f"{mib(g['rate_per_step'])}/step")
    if g.get("rate_per_s"):
        parts.append(f"{mib(g['rate_per_s'])}/s")
    return ", ".join(parts)


def table(doc: dict) -> str:
    s, dev = doc["summary"], doc.get("device") or {}
    lines = [f"Suite run on {dev.get('gpu') or 'GPU'} (torch {dev.get('torch')}, CUDA {dev.get('cuda')}): "
             f"{s['healthy']} healthy jobs, {s['healthy_called_leak']} called a leak; {s['leaks']} leaking jobs, "
             f"{s['leaks_caught']} caught (recall {s['leak_recall']}); {s['wall_seconds']} s in all. "
             f"Targets met: {'yes' if s['targets_met'] else 'NO'}.", "",
             "| job | expected | verdict | pattern | steps from | rate | confidence | projection | sites | pass |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for j in doc["jobs"]:
        g = j.get("growth") or {}
        proj = g.get("projection") or {}
        pj = []
        if proj.get("full_at_step") is not None:
            pj.append(f"step ~{proj['full_at_step']}")
        if proj.get("full_in_seconds") is not None:
            pj.append(f"~{proj['full_in_seconds'] / 60:.1f} min")
        site = (j.get("sites") or [""])[0]
        site = site.rsplit("/", 1)[-1] if site else ""
        lines.append(f"| `{j['job']}` | {j['expect']} | {j.get('verdict') or 'ok'} | {g.get('pattern') or ''} | "
                     f"{g.get('steps_from') or ''} | {rate(g)} | {g.get('confidence') or ''} | {', '.join(pj)} | "
                     f"{site} | {'yes' if j['passed'] else '**no**'} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("json")
    ap.add_argument("--page", default=str(ROOT / "docs" / "validation" / "record.md"))
    ap.add_argument("--block", default="record-suite", help="the marked block of the page to write")
    args = ap.parse_args()
    doc = json.loads(Path(args.json).read_text())
    replace_block(Path(args.page), args.block, table(doc))
    print(f"updated {args.page}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
