"""Check knowledge.workspaces.cudnn_conv_workspace against every call of the H100 conv grid.

    PYTHONPATH=src python validation/conv_workspace_rule.py [validation/results/conv_workspace_grid_h100.json]

Prints, per class of call, how many the rule covers (>= measured), the worst under-estimate and the
median over-estimate, and writes validation/results/conv_workspace_rule_h100.json.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from oomdoctor.estimate.workspaces import ConvCall, cudnn_conv_workspace

R = Path(__file__).resolve().parent / "results"


def call_of(r: dict) -> ConvCall:
    ho = (r["h"] + 2 * (r["k"] // 2) - r["k"]) // r["stride"] + 1
    return ConvCall(n=r["n"], c_in=r["cin"], c_out=r["cout"], in_spatial=(r["h"], r["h"]), out_spatial=(ho, ho),
                    kernel=(r["k"], r["k"]), stride=(r["stride"], r["stride"]), groups=r["groups"],
                    itemsize=r["itemsize"], channels_last=r["channels_last"], dtype=r["dtype"])


def klass(r: dict) -> str:
    if r["channels_last"]:
        return "channels_last"
    if r["groups"] > 1:
        return "depthwise" if r["groups"] == r["cin"] else "grouped"
    if r["k"] == 1:
        return "pointwise" if r["stride"] == 1 else "pointwise strided"
    return "stem (C_in=3)" if r["cin"] == 3 else f"dense {r['k']}x{r['k']}"


def main() -> int:
    src = Path(sys.argv[1]) if len(sys.argv) > 1 else R / "conv_workspace_grid_h100.json"
    grid = json.loads(src.read_text())
    rows = []
    for r in grid["rows"]:
        if "error" in r:
            continue
        assert r["y_numel"] == r["n"] * r["cout"] * _prod(call_of(r).out_spatial), r
        for d in ("fwd", "bwd_data", "bwd_weight"):
            measured = max(r[d]["cached"]["transient"], default=0)
            pred = cudnn_conv_workspace(call_of(r), d, sm_count=grid["meta"]["sm_count"])
            rows.append({"class": klass(r), "dtype": r["dtype"], "direction": d, "n": r["n"], "cin": r["cin"],
                         "cout": r["cout"], "h": r["h"], "k": r["k"], "stride": r["stride"], "groups": r["groups"],
                         "measured": measured, "predicted": pred, "diff": pred - measured})
    print(f"{'class':18s} {'dir':10s} {'calls':>5s} {'covered':>7s} {'worst under (MiB)':>18s} {'median over (MiB)':>18s}")
    groups: dict = {}
    for row in rows:
        groups.setdefault((row["class"], row["direction"]), []).append(row)
    for (k, d), g in sorted(groups.items()):
        under = [x["diff"] for x in g if x["diff"] < 0]
        over = [x["diff"] for x in g if x["diff"] >= 0]
        print(f"{k:18s} {d:10s} {len(g):5d} {len(over):7d} {min(under, default=0) / 2**20:18.2f} "
              f"{statistics.median(over) / 2**20 if over else 0:18.2f}")
    under = sorted((x for x in rows if x["diff"] < -(1 << 20)), key=lambda x: x["diff"])
    print(f"\n{len(rows)} calls; {sum(x['diff'] >= 0 for x in rows)} covered; under by more than 1 MiB: {len(under)}")
    for x in under:
        print(f"  {x['class']:16s} {x['dtype']} {x['direction']:10s} n{x['n']} {x['cin']}->{x['cout']} h{x['h']} "
              f"k{x['k']} s{x['stride']} g{x['groups']}: measured {x['measured']} predicted {x['predicted']}")
    (R / "conv_workspace_rule_h100.json").write_text(json.dumps({"grid": src.name, "meta": grid["meta"], "rows": rows}))
    return 0


def _prod(t):
    out = 1
    for v in t:
        out *= v
    return out


if __name__ == "__main__":
    raise SystemExit(main())
