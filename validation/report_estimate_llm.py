"""Markdown table for docs/validation/estimate.md from estimate_llm_zoo.py's JSON (no GPU needed).

    python3 validation/report_estimate_llm.py OUT/llm_zoo.json > /tmp/llm_table.md
"""

from __future__ import annotations

import json
import statistics
import sys


def _gib(n: float | None) -> str:
    return "—" if n is None else f"{n / 2**30:.2f} GiB"


def report(data: dict) -> str:
    v = data.get("versions", {})
    out = [f"Measured on {v.get('gpu', '?')} (total_memory {v.get('total_memory', '?')}), torch {v.get('torch')} "
           f"(CUDA {v.get('cuda')}), transformers {v.get('transformers')}, peft {v.get('peft')}, accelerate "
           f"{v.get('accelerate')}, bitsandbytes {v.get('bitsandbytes')}; {data.get('seconds')} s.", "",
           "| config | batch | recipe | measured peak reserved | oomdoctor | error | accelerate | error |",
           "|---|---:|---|---:|---:|---:|---:|---:|"]
    ours, acc = [], []
    for r in data["rows"]:
        rec = r.get("recipe", {})
        recipe = ", ".join(f"{k}={'+'.join(v) if isinstance(v, list) else v}" for k, v in rec.items())
        if "err_reserved_pct" not in r:
            why = r.get("measure_error") or r.get("estimate_error") or "not run (deadline)"
            out.append(f"| {r['name']} | {r['batch_size']} | {recipe} | — | — | {why} | — | — |")
            continue
        ours.append(r["err_reserved_pct"])
        if "err_accelerate_pct" in r:
            acc.append(r["err_accelerate_pct"])
        out.append(f"| {r['name']} | {r['batch_size']} | {recipe} | {_gib(r['measured_reserved'])} | "
                   f"{_gib(r['estimated_reserved'])} | {r['err_reserved_pct']:+.2f}% | "
                   f"{_gib((r.get('accelerate') or {}).get('bytes'))} | "
                   f"{r.get('err_accelerate_pct', float('nan')):+.1f}% |")
    out.append("")
    if ours:
        out.append(f"- oomdoctor: {len(ours)} configurations, median |error| "
                   f"{statistics.median(abs(x) for x in ours):.2f}%, worst {max(ours, key=abs):+.2f}%, "
                   f"lowest {min(ours):+.2f}%")
    if acc:
        out.append(f"- accelerate estimate-memory: median |error| {statistics.median(abs(x) for x in acc):.1f}%, "
                   f"worst {max(acc, key=abs):+.1f}%")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: report_estimate_llm.py LLM_ZOO.json", file=sys.stderr)
        return 2
    with open(argv[0]) as fh:
        sys.stdout.write(report(json.load(fh)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
