"""Record the allocator history of one QLoRA run with prepare_model_for_kbit_training (diagnosis, issue 18).

The held-out `--kbit-prep` check (validation/bnb_check.py --set kbit) put two of four configurations
10-21% under with their allocated peak under too: this records what bitsandbytes, peft and
transformers allocate over three steps of one of them, to compare with the estimator's trace.

    PYTHONPATH=src python validation/qlora_alloc_trace.py --name tinyllama-qlora-kbit --out $OUT
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))


def _frames(entry: dict, keep: int = 3) -> list[str]:
    out = []
    for f in entry.get("frames") or []:
        name = f.get("filename", "")
        if any(k in name for k in ("transformers", "peft", "bitsandbytes", "torch/utils/checkpoint", "oomdoctor",
                                   "torch/optim")):
            out.append(f"{name.split('site-packages/')[-1]}:{f.get('line')}:{f.get('name')}")
        if len(out) >= keep:
            break
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", default="tinyllama-qlora-kbit")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    import bnb_check as B
    import estimate_llm_zoo as zoo
    import peft
    import torch
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    from oomdoctor.workload.load import WorkloadSpec
    from oomdoctor.workload.step import StepRunner

    _, shape, batch, fields = next(c for c in B.ALL if c[0] == a.name)
    with tempfile.TemporaryDirectory() as tmp:
        with torch.device("cuda"):
            AutoModelForCausalLM.from_config(zoo._config(shape), dtype=torch.bfloat16).save_pretrained(tmp)
        torch.cuda.empty_cache()
        q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                               bnb_4bit_compute_dtype=torch.bfloat16)
        model = AutoModelForCausalLM.from_pretrained(tmp, quantization_config=q, dtype=torch.bfloat16,
                                                     device_map="cuda")
    model = peft.prepare_model_for_kbit_training(model)
    model = peft.get_peft_model(model, peft.LoraConfig(r=16, lora_alpha=32, task_type="CAUSAL_LM"))
    torch.cuda.empty_cache()
    ids = torch.randint(0, model.config.vocab_size, (batch, fields["seq_len"]), device="cuda")
    spec = WorkloadSpec.from_dict({"model": model, "inputs": {"input_ids": ids, "labels": ids}, "optimizer": "adamw"},
                                  a.name)
    runner = StepRunner(spec, "cuda")
    start = torch.cuda.memory_snapshot()
    torch.cuda.memory._record_memory_history(max_entries=2_000_000)
    peaks = []
    for _ in range(3):
        torch.cuda.reset_peak_memory_stats()
        runner.step()
        torch.cuda.synchronize()
        peaks.append({"peak_reserved": torch.cuda.max_memory_reserved(), "peak_allocated": torch.cuda.max_memory_allocated()})
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    events = [{"a": e["action"], "addr": e["addr"], "size": e["size"], "stream": e.get("stream", 0),
               "frames": _frames(e)} for e in snap["device_traces"][0]]
    start_segs = [{"size": s["total_size"], "allocated": s["allocated_size"],
                   "blocks": [(b["size"], b["state"]) for b in s["blocks"]]} for s in start]
    Path(a.out).mkdir(parents=True, exist_ok=True)
    with gzip.open(Path(a.out) / f"qlora_trace_{a.name}.json.gz", "wt") as f:
        json.dump({"name": a.name, "torch": torch.__version__, "peaks": peaks, "start_segments": start_segs,
                   "events": events, "use_reentrant_default": str(torch.utils.checkpoint.__dict__.get(
                       "_DEFAULT_USE_REENTRANT", "?"))}, f)
    print("peaks", peaks, "events", len(events), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
