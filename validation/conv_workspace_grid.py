"""Measure the cuDNN convolution workspace on a GPU, over a grid of shapes that is NOT the estimate zoo.

For every (shape, dtype, direction) it runs one aten call the way autograd does (forward =
aten.convolution, backward-data / backward-weight = aten.convolution_backward with one output mask
each), once to let Conv_v8.cpp pick and cache its engine (benchmark mode off, as by default), then
again under torch.cuda.memory._record_memory_history, and records every block allocated AND freed
inside the call (the transient workspace; exact requested bytes) plus the peak-allocated delta.
fp16/bf16 tensors are what autocast hands to the conv; fp32 runs with torch's default TF32 settings.

    PYTHONPATH=src python3 validation/conv_workspace_grid.py --out $OUT/conv_grid.json [--deadline 200]
    PYTHONPATH=src python3 validation/conv_workspace_grid.py --set sweep --out $OUT/conv_sweep.json
"""

from __future__ import annotations

import argparse
import json
import time


def shapes() -> list[dict]:
    """(N, C_in, H, C_out, k, stride, groups, channels_last) chosen to span the kernel classes."""
    out = []

    def add(n, cin, h, cout, k, s=1, g=1, cl=False):
        out.append({"n": n, "cin": cin, "h": h, "cout": cout, "k": k, "stride": s, "groups": g, "channels_last": cl})

    for n in (8, 64):
        for c, h in ((16, 112), (64, 56), (128, 28), (256, 14), (512, 7), (96, 35)):
            add(n, c, h, c, 3)                                   # dense 3x3, stride 1
        for cin, cout, h in ((64, 128, 56), (128, 256, 28), (256, 512, 14)):
            add(n, cin, h, cout, 3, 2)                           # dense 3x3, stride 2 (downsample)
        for cin, cout, h in ((64, 256, 56), (256, 64, 56), (512, 128, 28), (1024, 256, 14), (2048, 512, 7)):
            add(n, cin, h, cout, 1)                              # pointwise
        add(n, 256, 56, 512, 1, 2)                               # strided pointwise (projection)
        add(n, 3, 224, 64, 7, 2)                                 # 7x7 stem, C_in = 3
        add(n, 3, 224, 32, 3, 2)                                 # 3x3 stem, C_in = 3
        add(n, 32, 56, 32, 7)                                    # dense 7x7
        add(n, 48, 73, 80, 5)                                    # dense 5x5, odd size
        for c, h, k, s in ((32, 112, 3, 1), (96, 112, 3, 2), (144, 56, 5, 2), (384, 14, 3, 1), (960, 7, 5, 1)):
            add(n, c, h, c, k, s, c)                             # depthwise
        add(n, 128, 56, 128, 3, 1, 32)                           # grouped (ResNeXt)
        add(n, 256, 28, 256, 3, 1, 8)
        add(n, 64, 56, 64, 3, cl=True)                           # channels_last
        add(n, 256, 14, 256, 3, cl=True)
    for c, h in ((64, 56), (256, 14)):
        add(256, c, h, c, 3)                                     # large batch: caps?
    add(256, 3, 224, 64, 7, 2)
    add(256, 64, 56, 256, 1)
    add(256, 256, 56, 64, 1)
    return out


def shapes_sweep() -> list[dict]:
    """Second grid: the batch/channel/size sweep behind the split-K count and the strided engines."""
    out = []
    for n in (8, 16, 32, 64, 128, 256):
        for c in (32, 64, 128, 256, 512):
            for h in (7, 14, 28, 56):
                out.append({"n": n, "cin": c, "h": h, "cout": c, "k": 3, "stride": 1, "groups": 1,
                            "channels_last": False})
        for cin, cout, h, k in ((64, 128, 56, 3), (128, 256, 28, 3), (256, 512, 14, 3),
                                (64, 128, 56, 1), (128, 256, 28, 1), (256, 512, 14, 1), (512, 1024, 14, 1)):
            out.append({"n": n, "cin": cin, "h": h, "cout": cout, "k": k, "stride": 2, "groups": 1,
                        "channels_last": False})
    return out


def measure(torch, fn) -> dict:
    """Run fn twice under the allocator's trace: the first call picks and caches the engine
    (Conv_v8.cpp, heuristics), the second reuses the cached plan. Transient blocks of each."""
    out = {}
    for tag in ("first", "cached"):
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python", max_entries=10000)
        res = fn()
        torch.cuda.synchronize()
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        live: dict[int, int] = {}
        transient = []
        for e in (snap.get("device_traces") or [[]])[0]:
            if e["action"] == "alloc":
                live[e["addr"]] = e["size"]
            elif e["action"] == "free_requested" and e["addr"] in live:
                transient.append(live.pop(e["addr"]))
        out[tag] = {"transient": transient, "peak_delta": torch.cuda.max_memory_allocated() - before,
                    "kept": torch.cuda.memory_allocated() - before}
        del res
    return out


def one_row(torch, sh: dict, dt) -> dict:
    aten = torch.ops.aten
    n, cin, h, cout, k, s, g = (sh[x] for x in ("n", "cin", "h", "cout", "k", "stride", "groups"))
    fmt = torch.channels_last if sh["channels_last"] else torch.contiguous_format
    x = torch.randn(n, cin, h, h, device="cuda", dtype=dt).contiguous(memory_format=fmt)
    w = torch.randn(cout, cin // g, k, k, device="cuda", dtype=dt).contiguous(memory_format=fmt)
    pad, st, dil = [k // 2] * 2, [s] * 2, [1, 1]
    row = {"x_numel": x.numel(), "w_numel": w.numel(), "itemsize": x.element_size()}
    try:
        row["fwd"] = measure(torch, lambda: aten.convolution(x, w, None, st, pad, dil, False, [0, 0], g))
        y = aten.convolution(x, w, None, st, pad, dil, False, [0, 0], g)
        gy = torch.randn_like(y)
        row["y_numel"] = y.numel()
        del y
        for key, mask in (("bwd_data", [True, False, False]), ("bwd_weight", [False, True, False])):
            row[key] = measure(torch, lambda m=mask: aten.convolution_backward(
                gy, x, w, None, st, pad, dil, False, [0, 0], g, m))
    except Exception as exc:  # noqa: BLE001
        row["error"] = repr(exc)[:300]
    return row


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--deadline", type=float, default=200.0)
    ap.add_argument("--set", choices=("main", "sweep"), default="main")
    a = ap.parse_args()
    import torch

    t0 = time.time()
    props = torch.cuda.get_device_properties(0)
    meta = {"torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
            "gpu": torch.cuda.get_device_name(0), "capability": list(torch.cuda.get_device_capability(0)),
            "sm_count": props.multi_processor_count,
            "max_threads_per_sm": getattr(props, "max_threads_per_multi_processor", None),
            "cudnn_benchmark": torch.backends.cudnn.benchmark,
            "cudnn_allow_tf32": getattr(torch.backends.cudnn, "allow_tf32", None),
            "cudnn_deterministic": torch.backends.cudnn.deterministic}
    rows: list[dict] = []
    result = {"meta": meta, "rows": rows}
    dtypes = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    for sh in shapes() if a.set == "main" else shapes_sweep():
        if time.time() - t0 > a.deadline:
            result["stopped"] = "deadline"
            break
        for dname, dt in dtypes.items():
            rows.append({**sh, "dtype": dname, **one_row(torch, sh, dt)})
            torch.cuda.empty_cache()
        if len(rows) % 24 == 0:
            with open(a.out, "w") as f:
                json.dump(result, f)
    result["seconds"] = round(time.time() - t0, 1)
    with open(a.out, "w") as f:
        json.dump(result, f, indent=0)
    print(f"conv grid: {len(rows)} rows in {result['seconds']} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
