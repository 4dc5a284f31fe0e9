"""Is the cuDNN workspace soft? Run a conv whose preferred engine's workspace cannot be allocated under
set_per_process_memory_fraction and record what happens (Conv_v8.cpp catches the OOM and tries the
next engine config): success or OOM, the transient blocks taken, and whether the result matches.

    PYTHONPATH=src python3 validation/conv_workspace_fallback.py --out $OUT/conv_fallback.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CASES = [  # (n, c, h, dtype, direction)
    (64, 64, 56, "fp32", "fwd"), (64, 64, 56, "fp16", "fwd"), (64, 64, 56, "fp32", "bwd_weight"),
    (64, 128, 28, "bf16", "bwd_data"), (256, 64, 56, "fp32", "fwd"),
]


def transients(torch, fn):
    torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python", max_entries=10000)
    try:
        res, err = fn(), None
        torch.cuda.synchronize()
    except torch.OutOfMemoryError as exc:
        res, err = None, str(exc).splitlines()[0][:200]
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    live, out = {}, []
    for e in (snap.get("device_traces") or [[]])[0]:
        if e["action"] == "alloc":
            live[e["addr"]] = e["size"]
        elif e["action"] == "free_requested" and e["addr"] in live:
            out.append(live.pop(e["addr"]))
    return res, err, out


def child(n, c, h, dt, direction) -> dict:
    import torch

    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[dt]
    aten = torch.ops.aten
    x = torch.randn(n, c, h, h, device="cuda", dtype=dtype)
    w = torch.randn(c, c, 3, 3, device="cuda", dtype=dtype)
    gy = torch.randn(n, c, h, h, device="cuda", dtype=dtype)
    mask = [direction == "bwd_data", direction == "bwd_weight", False]

    def fn():
        if direction == "fwd":
            return aten.convolution(x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
        return aten.convolution_backward(gy, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, mask)

    ref, _, free_blocks = transients(torch, fn)
    ref = ref if direction == "fwd" else ref[0 if mask[0] else 1]
    out_bytes = ref.untyped_storage().nbytes()
    ref = ref.float().cpu()
    torch.cuda.empty_cache()
    total = torch.cuda.get_device_properties(0).total_memory
    # room for the output and half of the preferred workspace: the preferred engine cannot run
    cap = torch.cuda.memory_reserved() + out_bytes + max(free_blocks, default=0) // 2
    cap = (cap + (2 << 20) - 1) // (2 << 20) * (2 << 20)
    torch.cuda.set_per_process_memory_fraction(cap / total)
    res, err, capped_blocks = transients(torch, fn)
    row = {"case": [n, c, h, dt, direction], "free_workspace": free_blocks, "cap_bytes": cap,
           "capped_workspace": capped_blocks, "error": err}
    if res is not None:
        got = (res if direction == "fwd" else res[0 if mask[0] else 1]).float().cpu()
        row["max_abs_diff"] = float((got - ref).abs().max())
        row["ref_max_abs"] = float(ref.abs().max())
    return row


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--child", nargs="*")
    a = ap.parse_args()
    if a.child:
        n, c, h, dt, d = a.child
        print(json.dumps(child(int(n), int(c), int(h), dt, d)))
        return 0
    rows = []
    for case in CASES:  # one process per case: fresh plan cache, fresh allocator
        p = subprocess.run([sys.executable, __file__, "--child", *map(str, case)], capture_output=True, text=True,
                           timeout=120)
        line = [x for x in p.stdout.splitlines() if x.startswith("{")]
        rows.append(json.loads(line[-1]) if line else {"case": case, "crash": p.stderr[-1500:]})
        print(rows[-1], flush=True)
    with open(a.out, "w") as f:
        json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
