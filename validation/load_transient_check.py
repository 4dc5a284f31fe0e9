"""Does loading a tied-embedding model the way users do leave build-time segments in the cache?

estimate --model models weights placed on the device once each (from_pretrained, or .to("cuda") of a
model built on the CPU). The LLM zoo builds with from_config directly on the GPU, which allocates an
untied lm_head before tie_weights() frees it. This measures, for a Llama-3.2-1B-shaped model (tied,
random weights saved locally), reserved minus allocated right after each of three loads:
from_config on the GPU, from_pretrained(device_map="cuda"), and CPU build + .to("cuda").

    PYTHONPATH=src python3 validation/load_transient_check.py --out $OUT
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def child(how: str, path: str) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    sys.path.insert(0, str(HERE))
    import estimate_llm_zoo as zoo

    torch.cuda.init()
    torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python", max_entries=200_000)
    if how == "from_config_on_gpu":
        with torch.device("cuda"):
            model = AutoModelForCausalLM.from_config(zoo._config("llama3.2-1b"), dtype=torch.bfloat16)
    elif how == "from_pretrained_device_map":
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16, device_map="cuda")
    else:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).to("cuda")
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    live: dict[int, int] = {}
    freed_big = 0
    for e in snap["device_traces"][0]:
        if e["action"] == "alloc":
            live[e["addr"]] = e["size"]
        elif e["action"] == "free_completed" and e["addr"] in live:
            freed_big = max(freed_big, live.pop(e["addr"]))
    return {"how": how, "allocated": torch.cuda.memory_allocated(), "reserved": torch.cuda.memory_reserved(),
            "largest_block_freed_during_load": freed_big,
            "params": sum(p.numel() for p in model.parameters())}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--child", nargs=2)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(*a.child)))
        return 0
    import torch
    from transformers import AutoModelForCausalLM

    sys.path.insert(0, str(HERE))
    import estimate_llm_zoo as zoo

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        AutoModelForCausalLM.from_config(zoo._config("llama3.2-1b"), dtype=torch.bfloat16).save_pretrained(tmp)
        for how in ("from_config_on_gpu", "from_pretrained_device_map", "cpu_then_to_cuda"):
            r = subprocess.run([sys.executable, __file__, "--out", a.out, "--child", how, tmp],
                               capture_output=True, text=True, timeout=240)
            row = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else {"how": how, "error": r.stderr[-500:]}
            if "reserved" in row:
                row["cached_not_allocated"] = row["reserved"] - row["allocated"]
            rows.append(row)
            print(json.dumps(row), flush=True)
    Path(a.out, "load_transient_check.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
