"""QLoRA (4-bit NF4 base) and 8-bit AdamW on the GPU against estimate --model's analytic figures (issue 18).

The estimator cannot run bitsandbytes kernels under fake tensors: for `--task qlora` it resizes the
traced bf16 Linear weights to NF4 storage and adds the largest dequantised weight as a workspace; for
`--optimizer adamw-8bit` it resizes the traced AdamW state to 8-bit blockwise. This measures the real
thing on the GPU, built the way those figures assume: a random model saved locally, loaded with
`BitsAndBytesConfig(load_in_4bit, nf4, double quantisation, bf16 compute)` on the device, peft LoRA
with the estimator's settings (r 16, alpha 32, peft's default targets; no prepare_model_for_kbit_training),
AdamW; and a bf16 full fine-tune with `bnb.optim.AdamW8bit`. Three StepRunner steps, peak reserved per
step after reset_peak_memory_stats() (docs/contracts.md section 6). Estimates on this machine's CPUs.

    PYTHONPATH=src python3 validation/bnb_check.py --out $OUT
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

CONFIGS = [
    ("llama1b-qlora", "llama3.2-1b", 8, {"task": "qlora", "seq_len": 1024}),
    ("qwen3b-qlora", "qwen2.5-3b", 4, {"task": "qlora", "seq_len": 1024}),
    ("tinyllama-qlora-ckpt", "tinyllama-1.1b", 16, {"task": "qlora", "seq_len": 1024, "gradient_checkpointing": True}),
    ("llama1b-train-adamw8bit", "llama3.2-1b", 4, {"task": "train", "seq_len": 1024, "optimizer": "adamw-8bit"}),
    ("tinyllama-train-adamw8bit", "tinyllama-1.1b", 4, {"task": "train", "seq_len": 1024, "optimizer": "adamw-8bit"}),
]


# Written 2026-11-26 with the estimator's prepare_model_for_kbit_training emulation (--kbit-prep), before
# any run of it: the model goes through peft.prepare_model_for_kbit_training with its defaults (as most
# QLoRA recipes do), then LoRA. `--set kbit` measures these.
KBIT = [
    ("llama1b-qlora-kbit", "llama3.2-1b", 8, {"task": "qlora", "seq_len": 1024, "kbit_prep": True}),
    ("qwen3b-qlora-kbit", "qwen2.5-3b", 4, {"task": "qlora", "seq_len": 1024, "kbit_prep": True}),
    ("tinyllama-qlora-kbit", "tinyllama-1.1b", 16, {"task": "qlora", "seq_len": 1024, "kbit_prep": True}),
    ("smollm2-qlora-kbit", "smollm2-1.7b", 8, {"task": "qlora", "seq_len": 2048, "kbit_prep": True}),
]
ALL = CONFIGS + KBIT


def estimate_one(cfg: tuple) -> dict:
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    import torch

    torch.set_num_threads(2)
    import estimate_llm_zoo as zoo

    from oomdoctor.estimate.hf import estimate_model

    name, shape, batch, fields = cfg
    try:
        est = estimate_model(zoo._config(shape), zoo._recipe(fields), batch, gpu="h100")
    except Exception as exc:  # noqa: BLE001 - reported per row
        return {"name": name, "estimate_error": f"{type(exc).__name__}: {exc}"[:300]}
    return {"name": name, "estimated_reserved": est.peak_reserved_bytes, "estimated_allocated": est.peak_allocated_bytes}


def measure_one(name: str, saved: str) -> dict:
    import bitsandbytes as bnb
    import estimate_llm_zoo as zoo
    import peft
    import torch
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    from oomdoctor.workload.load import WorkloadSpec
    from oomdoctor.workload.step import StepRunner

    _, shape, batch, fields = next(c for c in ALL if c[0] == name)
    torch.manual_seed(0)
    if fields["task"] == "qlora":
        q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                               bnb_4bit_compute_dtype=torch.bfloat16)
        model = AutoModelForCausalLM.from_pretrained(saved, quantization_config=q, dtype=torch.bfloat16,
                                                     device_map="cuda")
        if fields.get("kbit_prep"):
            model = peft.prepare_model_for_kbit_training(model)
        elif fields.get("gradient_checkpointing"):
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            model.enable_input_require_grads()
        model = peft.get_peft_model(model, peft.LoraConfig(r=16, lora_alpha=32, task_type="CAUSAL_LM"))
        opt = "adamw"
    else:
        model = AutoModelForCausalLM.from_pretrained(saved, dtype=torch.bfloat16, device_map="cuda")
        opt = lambda params: bnb.optim.AdamW8bit(params, lr=1e-5)  # noqa: E731
    torch.cuda.empty_cache()
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (batch, fields["seq_len"]), device="cuda")
    spec = WorkloadSpec.from_dict({"model": model, "inputs": {"input_ids": ids, "labels": ids}, "optimizer": opt}, name)
    runner = StepRunner(spec, "cuda")
    steps = zoo.measure_steps(torch, runner)
    return {"name": name, "steps": steps, "measured_reserved": max(s["peak_reserved"] for s in steps),
            "measured_allocated": max(s["peak_allocated"] for s in steps), "bitsandbytes": bnb.__version__}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--child", nargs=2)
    ap.add_argument("--set", choices=("first", "kbit"), default="first")
    ap.add_argument("--estimate-only", action="store_true", help="the CPU estimates alone, to --out")
    a = ap.parse_args()
    configs = KBIT if a.set == "kbit" else CONFIGS
    if a.child:
        print(json.dumps(measure_one(*a.child)), flush=True)
        return 0
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.estimate_only:
        with ProcessPoolExecutor(max_workers=2) as pool:
            rows_e = list(pool.map(estimate_one, configs))
        (out / f"bnb_check_{a.set}_estimated.json").write_text(json.dumps(rows_e, indent=1))
        return 0
    pool = ProcessPoolExecutor(max_workers=len(configs))
    futures = [pool.submit(estimate_one, c) for c in configs]
    import estimate_llm_zoo as zoo
    import torch
    from transformers import AutoModelForCausalLM

    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        saved = {}
        for shape in sorted({c[1] for c in configs}):
            d = os.path.join(tmp, shape)
            with torch.device("cuda"):
                AutoModelForCausalLM.from_config(zoo._config(shape), dtype=torch.bfloat16).save_pretrained(d)
            torch.cuda.empty_cache()
            saved[shape] = d
        for name, shape, _, _ in configs:
            r = subprocess.run([sys.executable, __file__, "--out", a.out, "--child", name, saved[shape]],
                               capture_output=True, text=True, timeout=200)
            try:
                rows[name] = json.loads(r.stdout.strip().splitlines()[-1])
            except (IndexError, ValueError):
                rows[name] = {"name": name, "measure_error": r.stderr[-600:]}
            print(json.dumps(rows[name])[:300], flush=True)
    for f in futures:
        e = f.result()
        rows[e["name"]].update(e)
        r = rows[e["name"]]
        if r.get("measured_reserved") and r.get("estimated_reserved"):
            r["err_reserved_pct"] = round(100 * (r["estimated_reserved"] / r["measured_reserved"] - 1), 2)
        print(r["name"], r.get("err_reserved_pct"), r.get("estimate_error", ""), flush=True)
    (out / ("bnb_check.json" if a.set == "first" else f"bnb_check_{a.set}.json")).write_text(
        json.dumps(list(rows.values()), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
