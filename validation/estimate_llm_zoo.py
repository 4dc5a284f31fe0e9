"""Ground truth for `oomdoctor estimate --model` (issue 18): LLM-era recipes measured on one GPU.

Each configuration is a transformers config written out here (shapes of public 1B-8B models; random
init, nothing downloaded) and one recipe of estimate/hf.py. The GPU side builds exactly what the
estimator traces (hf.make_build) directly on the GPU, runs three steps of the shared StepRunner and
records torch.cuda.max_memory_reserved() / max_memory_allocated() after reset_peak_memory_stats()
per step (docs/contracts.md §6). Configurations run in a few child processes (one import of
transformers per group), each starting from an empty caching allocator (cuBLAS workspaces cleared,
empty_cache; the reserved memory before each one is recorded). Meanwhile CPU workers compute our
estimate (as `oomdoctor estimate --model` does, reduced depth included) and accelerate's
estimate-memory figure for the same model. Results go to OUT/llm_zoo.json as they come.

    PYTHONPATH=src python3 validation/estimate_llm_zoo.py --out $OUT [--deadline 330] [--only NAME,...]
    python3 validation/report_estimate_llm.py $OUT/llm_zoo.json     # the table for docs/validation

Needs torch with CUDA, transformers, peft, accelerate. Every configuration fits in 80 GB.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent

LLAMA = {"model_type": "llama", "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "max_position_embeddings": 8192,
         "hidden_act": "silu"}
SHAPES = {
    "llama3.2-1b": dict(LLAMA, vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                        num_attention_heads=32, num_key_value_heads=8, head_dim=64, tie_word_embeddings=True),
    "llama3.2-3b": dict(LLAMA, vocab_size=128256, hidden_size=3072, intermediate_size=8192, num_hidden_layers=28,
                        num_attention_heads=24, num_key_value_heads=8, head_dim=128, tie_word_embeddings=True),
    "llama3-8b": dict(LLAMA, vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=False),
    "qwen2.5-1.5b": {"model_type": "qwen2", "vocab_size": 151936, "hidden_size": 1536, "intermediate_size": 8960,
                     "num_hidden_layers": 28, "num_attention_heads": 12, "num_key_value_heads": 2,
                     "tie_word_embeddings": True, "max_position_embeddings": 32768, "rope_theta": 1000000.0},
    "qwen2.5-3b": {"model_type": "qwen2", "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 11008,
                   "num_hidden_layers": 36, "num_attention_heads": 16, "num_key_value_heads": 2,
                   "tie_word_embeddings": True, "max_position_embeddings": 32768, "rope_theta": 1000000.0},
    "qwen2.5-7b": {"model_type": "qwen2", "vocab_size": 152064, "hidden_size": 3584, "intermediate_size": 18944,
                   "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
                   "tie_word_embeddings": False, "max_position_embeddings": 32768, "rope_theta": 1000000.0},
    "mistral-7b": {"model_type": "mistral", "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336,
                   "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                   "tie_word_embeddings": False, "max_position_embeddings": 32768, "sliding_window": None},
    "gpt2-medium": {"model_type": "gpt2", "vocab_size": 50257, "n_embd": 1024, "n_layer": 24, "n_head": 16,
                    "n_positions": 1024},
    "gpt2-large": {"model_type": "gpt2", "vocab_size": 50257, "n_embd": 1280, "n_layer": 36, "n_head": 20,
                   "n_positions": 1024},
    "t5-base": {"model_type": "t5", "vocab_size": 32128, "d_model": 768, "d_ff": 3072, "num_layers": 12,
                "num_decoder_layers": 12, "num_heads": 12, "d_kv": 64, "decoder_start_token_id": 0,
                "pad_token_id": 0, "eos_token_id": 1},
    "t5-large": {"model_type": "t5", "vocab_size": 32128, "d_model": 1024, "d_ff": 4096, "num_layers": 24,
                 "num_decoder_layers": 24, "num_heads": 16, "d_kv": 64, "decoder_start_token_id": 0,
                 "pad_token_id": 0, "eos_token_id": 1},
    "bart-large": {"model_type": "bart", "vocab_size": 50265, "d_model": 1024, "encoder_layers": 12,
                   "decoder_layers": 12, "encoder_attention_heads": 16, "decoder_attention_heads": 16,
                   "encoder_ffn_dim": 4096, "decoder_ffn_dim": 4096, "max_position_embeddings": 1024,
                   "decoder_start_token_id": 2, "pad_token_id": 1},
    "phi3-mini": {"model_type": "phi3", "vocab_size": 32064, "hidden_size": 3072, "intermediate_size": 8192,
                  "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
                  "max_position_embeddings": 4096, "tie_word_embeddings": False, "pad_token_id": 32000},
    "gemma-2b": {"model_type": "gemma", "vocab_size": 256000, "hidden_size": 2048, "intermediate_size": 16384,
                 "num_hidden_layers": 18, "num_attention_heads": 8, "num_key_value_heads": 1, "head_dim": 256,
                 "max_position_embeddings": 8192, "tie_word_embeddings": True, "hidden_act": "gelu_pytorch_tanh"},
    # shapes of the second, held-out zoo (ZOO2)
    "tinyllama-1.1b": dict(LLAMA, vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                           num_attention_heads=32, num_key_value_heads=4, rope_theta=10000.0,
                           max_position_embeddings=2048, tie_word_embeddings=False),
    "smollm2-1.7b": dict(LLAMA, vocab_size=49152, hidden_size=2048, intermediate_size=8192, num_hidden_layers=24,
                         num_attention_heads=32, num_key_value_heads=32, rope_theta=130000.0,
                         tie_word_embeddings=True),
    "pythia-1.4b": {"model_type": "gpt_neox", "vocab_size": 50304, "hidden_size": 2048, "intermediate_size": 8192,
                    "num_hidden_layers": 24, "num_attention_heads": 16, "rotary_pct": 0.25,
                    "max_position_embeddings": 2048, "use_parallel_residual": True, "tie_word_embeddings": False},
    "opt-1.3b": {"model_type": "opt", "vocab_size": 50272, "hidden_size": 2048, "ffn_dim": 8192,
                 "num_hidden_layers": 24, "num_attention_heads": 32, "max_position_embeddings": 2048,
                 "word_embed_proj_dim": 2048, "do_layer_norm_before": True, "pad_token_id": 1},
    "phi-1.5": {"model_type": "phi", "vocab_size": 51200, "hidden_size": 2048, "intermediate_size": 8192,
                "num_hidden_layers": 24, "num_attention_heads": 32, "partial_rotary_factor": 0.5,
                "max_position_embeddings": 2048, "tie_word_embeddings": False},
    "stablelm-2-1.6b": {"model_type": "stablelm", "vocab_size": 100352, "hidden_size": 2048,
                        "intermediate_size": 5632, "num_hidden_layers": 24, "num_attention_heads": 32,
                        "num_key_value_heads": 32, "partial_rotary_factor": 0.25, "max_position_embeddings": 4096,
                        "tie_word_embeddings": False},
    "qwen3-1.7b": {"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 6144,
                   "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
                   "tie_word_embeddings": True, "max_position_embeddings": 40960, "rope_theta": 1000000.0},
    "qwen3-4b": {"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 2560, "intermediate_size": 9728,
                 "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                 "tie_word_embeddings": True, "max_position_embeddings": 40960, "rope_theta": 1000000.0},
    "gemma2-2b": {"model_type": "gemma2", "vocab_size": 256000, "hidden_size": 2304, "intermediate_size": 9216,
                  "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                  "max_position_embeddings": 8192, "tie_word_embeddings": True, "sliding_window": 4096,
                  "hidden_activation": "gelu_pytorch_tanh"},
}

# (name, shape, batch, recipe fields)
ZOO = [
    ("llama1b-train-bf16", "llama3.2-1b", 4, {"task": "train", "seq_len": 1024, "dtype": "bf16"}),
    ("llama1b-train-fp32amp", "llama3.2-1b", 4, {"task": "train", "seq_len": 1024, "dtype": "fp32", "amp": "bf16"}),
    ("llama1b-train-ckpt", "llama3.2-1b", 8, {"task": "train", "seq_len": 2048, "gradient_checkpointing": True}),
    ("llama1b-train-fused", "llama3.2-1b", 4, {"task": "train", "seq_len": 1024, "optimizer": "adamw-fused"}),
    ("llama1b-lora", "llama3.2-1b", 8, {"task": "lora", "seq_len": 1024}),
    ("llama1b-infer", "llama3.2-1b", 16, {"task": "infer", "seq_len": 1024}),
    ("llama1b-generate", "llama3.2-1b", 8, {"task": "generate", "seq_len": 256, "max_new_tokens": 128}),
    ("llama3b-train-bf16", "llama3.2-3b", 2, {"task": "train", "seq_len": 1024}),
    ("llama3b-lora-ckpt", "llama3.2-3b", 4, {"task": "lora", "seq_len": 2048, "gradient_checkpointing": True}),
    ("llama3b-generate-beams", "llama3.2-3b", 4, {"task": "generate", "seq_len": 256, "max_new_tokens": 64,
                                                  "num_beams": 4}),
    ("llama8b-lora", "llama3-8b", 2, {"task": "lora", "seq_len": 1024}),
    ("llama8b-infer", "llama3-8b", 8, {"task": "infer", "seq_len": 1024}),
    ("llama8b-generate", "llama3-8b", 4, {"task": "generate", "seq_len": 512, "max_new_tokens": 128}),
    ("qwen1.5b-train-bf16", "qwen2.5-1.5b", 4, {"task": "train", "seq_len": 1024}),
    ("qwen1.5b-lora-all", "qwen2.5-1.5b", 8, {"task": "lora", "seq_len": 1024, "lora_targets": ("all-linear",)}),
    ("qwen3b-train-ckpt", "qwen2.5-3b", 4, {"task": "train", "seq_len": 1024, "gradient_checkpointing": True}),
    ("qwen7b-lora-ckpt", "qwen2.5-7b", 4, {"task": "lora", "seq_len": 1024, "gradient_checkpointing": True}),
    ("qwen7b-generate", "qwen2.5-7b", 4, {"task": "generate", "seq_len": 256, "max_new_tokens": 128}),
    ("mistral7b-lora", "mistral-7b", 4, {"task": "lora", "seq_len": 1024}),
    ("mistral7b-lora-ckpt-all", "mistral-7b", 8, {"task": "lora", "seq_len": 2048, "gradient_checkpointing": True,
                                                  "lora_targets": ("all-linear",)}),
    ("gpt2m-train-fp32", "gpt2-medium", 8, {"task": "train", "seq_len": 1024, "dtype": "fp32"}),
    ("gpt2l-train-fp32amp", "gpt2-large", 8, {"task": "train", "seq_len": 1024, "dtype": "fp32", "amp": "bf16"}),
    ("t5base-train-fp32", "t5-base", 16, {"task": "train", "seq_len": 512, "dtype": "fp32"}),
    ("t5large-train-fp32amp", "t5-large", 8, {"task": "train", "seq_len": 512, "dtype": "fp32", "amp": "bf16"}),
    ("bartlarge-train-fp32amp", "bart-large", 8, {"task": "train", "seq_len": 512, "dtype": "fp32", "amp": "bf16"}),
    ("phi3mini-lora", "phi3-mini", 4, {"task": "lora", "seq_len": 1024, "lora_targets": ("qkv_proj", "o_proj")}),
    ("gemma2b-train-ckpt", "gemma-2b", 4, {"task": "train", "seq_len": 1024, "gradient_checkpointing": True}),
    ("gemma2b-generate", "gemma-2b", 8, {"task": "generate", "seq_len": 256, "max_new_tokens": 64}),
]

# The second zoo: written after the first zoo's fixes, before any run of it, run once to check the
# estimator on configurations it was not tuned on (issue 18's held-out measurement). New shapes
# (TinyLlama, SmolLM2, Pythia, OPT, Phi-1.5, StableLM-2, Qwen3, Gemma-2) and new recipes on old ones.
ZOO2 = [
    ("z2-tinyllama-train-bf16", "tinyllama-1.1b", 8, {"task": "train", "seq_len": 1024}),
    ("z2-tinyllama-lora-ckpt", "tinyllama-1.1b", 16, {"task": "lora", "seq_len": 1024, "gradient_checkpointing": True}),
    ("z2-tinyllama-generate", "tinyllama-1.1b", 16, {"task": "generate", "seq_len": 256, "max_new_tokens": 128}),
    ("z2-smollm2-train-fp32amp", "smollm2-1.7b", 4, {"task": "train", "seq_len": 1024, "dtype": "fp32", "amp": "bf16"}),
    ("z2-smollm2-infer", "smollm2-1.7b", 32, {"task": "infer", "seq_len": 512}),
    ("z2-smollm2-generate-beams", "smollm2-1.7b", 4, {"task": "generate", "seq_len": 128, "max_new_tokens": 64,
                                                      "num_beams": 4}),
    ("z2-pythia-train-bf16", "pythia-1.4b", 8, {"task": "train", "seq_len": 1024}),
    ("z2-pythia-lora", "pythia-1.4b", 8, {"task": "lora", "seq_len": 1024, "lora_targets": ("query_key_value",)}),
    ("z2-pythia-generate", "pythia-1.4b", 8, {"task": "generate", "seq_len": 256, "max_new_tokens": 128}),
    ("z2-opt-train-ckpt", "opt-1.3b", 16, {"task": "train", "seq_len": 1024, "gradient_checkpointing": True}),
    ("z2-opt-infer", "opt-1.3b", 16, {"task": "infer", "seq_len": 1024}),
    ("z2-phi15-train-bf16", "phi-1.5", 4, {"task": "train", "seq_len": 1024}),
    ("z2-phi15-lora", "phi-1.5", 8, {"task": "lora", "seq_len": 1024, "lora_targets": ("q_proj", "v_proj")}),
    ("z2-stablelm-train-fused", "stablelm-2-1.6b", 4, {"task": "train", "seq_len": 1024, "optimizer": "adamw-fused"}),
    ("z2-stablelm-generate", "stablelm-2-1.6b", 8, {"task": "generate", "seq_len": 256, "max_new_tokens": 64}),
    ("z2-qwen3-1.7b-train-bf16", "qwen3-1.7b", 4, {"task": "train", "seq_len": 1024}),
    ("z2-qwen3-1.7b-lora-all", "qwen3-1.7b", 8, {"task": "lora", "seq_len": 1024, "lora_targets": ("all-linear",)}),
    ("z2-qwen3-4b-lora-ckpt", "qwen3-4b", 8, {"task": "lora", "seq_len": 2048, "gradient_checkpointing": True}),
    ("z2-qwen3-4b-infer", "qwen3-4b", 8, {"task": "infer", "seq_len": 2048}),
    ("z2-mistral7b-generate", "mistral-7b", 8, {"task": "generate", "seq_len": 512, "max_new_tokens": 128}),
    ("z2-mistral7b-infer", "mistral-7b", 4, {"task": "infer", "seq_len": 2048}),
    ("z2-llama3b-train-ckpt", "llama3.2-3b", 8, {"task": "train", "seq_len": 2048, "gradient_checkpointing": True}),
    ("z2-qwen3b-generate-beams", "qwen2.5-3b", 2, {"task": "generate", "seq_len": 256, "max_new_tokens": 64,
                                                   "num_beams": 4}),
    ("z2-gemma2-infer", "gemma2-2b", 8, {"task": "infer", "seq_len": 1024}),
    ("z2-gemma2-lora", "gemma2-2b", 4, {"task": "lora", "seq_len": 1024}),
    ("z2-llama8b-lora-ckpt", "llama3-8b", 4, {"task": "lora", "seq_len": 2048, "gradient_checkpointing": True}),
    ("z2-qwen7b-infer", "qwen2.5-7b", 4, {"task": "infer", "seq_len": 2048}),
]
ALL = ZOO + ZOO2


def _recipe(fields: dict):
    from oomdoctor.estimate.hf import Recipe

    return Recipe(**fields)


def _config(shape: str):
    from oomdoctor.estimate.hf import load_config_dict

    return load_config_dict(dict(SHAPES[shape]))


# ------------------------------------------------------------------------------------------ estimate
def estimate_one(name: str) -> dict:
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    import torch

    torch.set_num_threads(2)
    from oomdoctor.estimate.hf import estimate_model

    _, shape, batch, fields = next(z for z in ALL if z[0] == name)
    t0 = time.perf_counter()
    try:
        est = estimate_model(_config(shape), _recipe(fields), batch, gpu="h100")
    except Exception as exc:  # noqa: BLE001 - reported per row
        return {"name": name, "estimate_error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    d = est.details
    return {"name": name, "estimated_reserved": est.peak_reserved_bytes, "estimated_allocated": est.peak_allocated_bytes,
            "estimated_process": est.process_total_bytes, "estimated_breakdown": est.breakdown,
            "estimated_peak_phase": est.peak_phase, "parameter_count": est.parameter_count,
            "accelerate": d.get("accelerate"), "analytic": d.get("analytic"), "reduced_depth": d.get("reduced_depth"),
            "estimate_seconds": round(time.perf_counter() - t0, 2)}


# ------------------------------------------------------------------------------------------- measure
def measure_steps(torch, runner, steps: int = 3) -> list[dict]:
    """Contract section 6 ground truth: peak allocated and reserved of each step, after
    reset_peak_memory_stats() (shared by the zoo, bnb_check, parallel_per_rank, generate_alloc_trace)."""
    out = []
    for _ in range(steps):
        torch.cuda.reset_peak_memory_stats()
        runner.step()
        torch.cuda.synchronize()
        out.append({"peak_allocated": torch.cuda.max_memory_allocated(),
                    "peak_reserved": torch.cuda.max_memory_reserved()})
    return out


def measure_group(names: list[str], out_path: str) -> None:
    """Child process: measure each named configuration in turn on cuda:0, one JSON line each."""
    import gc

    import torch

    from oomdoctor.estimate.hf import make_build
    from oomdoctor.workload.load import WorkloadSpec
    from oomdoctor.workload.step import StepRunner

    torch.cuda.init()
    for name in names:
        _, shape, batch, fields = next(z for z in ALL if z[0] == name)
        torch._C._cuda_clearCublasWorkspaces()
        torch.cuda.empty_cache()
        before = torch.cuda.memory_reserved()
        torch.cuda.reset_peak_memory_stats()
        row: dict = {"name": name, "reserved_before": before}
        t0 = time.time()
        try:
            build = make_build(_config(shape), _recipe(fields))
            with torch.device("cuda"):
                spec = WorkloadSpec.from_dict(build(batch), name)
            row["after_build_allocated"] = torch.cuda.memory_allocated()
            row["after_build_reserved"] = torch.cuda.memory_reserved()
            # Built on the GPU for speed, but users load with from_pretrained (weights straight to the
            # device) or build on the CPU and .to("cuda"), which the estimator models. from_config on the
            # GPU also allocates an untied lm_head before tie_weights() frees it (501 MiB for Llama-3.2-1B,
            # 1000 MiB for Gemma-2B): a cached segment no user load has. Drop such build-time leftovers.
            torch.cuda.empty_cache()
            row["after_build_reserved_emptied"] = torch.cuda.memory_reserved()
            runner = StepRunner(spec, "cuda")
            per_step = measure_steps(torch, runner)
            row.update({"per_step": per_step, "measured_reserved": max(s["peak_reserved"] for s in per_step),
                        "measured_allocated": max(s["peak_allocated"] for s in per_step)})
            del runner, spec, build
        except torch.OutOfMemoryError as exc:
            row["measure_error"] = f"OutOfMemoryError: {str(exc).splitlines()[0][:300]}"
        except Exception as exc:  # noqa: BLE001 - reported per row
            row["measure_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        row["measure_seconds"] = round(time.time() - t0, 2)
        gc.collect()
        with open(out_path, "a") as fh:
            fh.write(json.dumps(row) + "\n")


def _versions() -> dict:
    out = {}
    for mod in ("torch", "transformers", "peft", "accelerate", "bitsandbytes"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001
            out[mod] = None
    try:
        import torch

        if torch.cuda.is_available():
            p = torch.cuda.get_device_properties(0)
            out.update({"gpu": p.name, "total_memory": p.total_memory, "cuda": torch.version.cuda})
    except Exception:  # noqa: BLE001
        pass
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--deadline", type=float, default=330,
                    help="seconds: start no group after this; estimates still running at deadline + 100 are dropped")
    ap.add_argument("--groups", type=int, default=5)
    ap.add_argument("--workers", type=int, default=max(1, min(6, (os.cpu_count() or 2) // 2 - 1)))
    ap.add_argument("--only", default="", help="comma-separated names")
    ap.add_argument("--child", nargs="*", help=argparse.SUPPRESS)
    ap.add_argument("--skip-measure", action="store_true")
    ap.add_argument("--set", choices=("first", "heldout2"), default="first",
                    help="first: the 28 configurations of the first run; heldout2: the second, held-out zoo")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    lines = out / "llm_zoo_measured.jsonl"
    if a.child is not None:
        measure_group(a.child, str(lines))
        return 0
    t0 = time.time()
    zoo = ZOO2 if a.set == "heldout2" else ZOO
    names = [z[0] for z in zoo if not a.only or z[0] in a.only.split(",")]
    if lines.exists():
        lines.unlink()
    pool = ProcessPoolExecutor(max_workers=a.workers)
    futures = {n: pool.submit(estimate_one, n) for n in names}
    if not a.skip_measure:
        groups = [names[i::a.groups] for i in range(a.groups)]
        env = dict(os.environ)
        for g in groups:
            if not g:
                continue
            if time.time() - t0 > a.deadline:
                print(f"deadline: skipping {g}", flush=True)
                continue
            try:
                r = subprocess.run([sys.executable, __file__, "--out", str(out), "--child", *g], env=env,
                                   timeout=max(30, a.deadline + 90 - (time.time() - t0)))
                rc = r.returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
            print(f"group {g}: rc {rc}, {time.time() - t0:.0f}s", flush=True)
    measured = {}
    if lines.exists():
        for ln in lines.read_text().splitlines():
            row = json.loads(ln)
            measured[row["name"]] = row
    rows = []
    for n in names:
        try:
            est = futures[n].result(timeout=max(1, a.deadline + 100 - (time.time() - t0)))
        except Exception as exc:  # noqa: BLE001
            est = {"name": n, "estimate_error": f"{type(exc).__name__}: {exc}"}
        _, shape, batch, fields = next(z for z in ALL if z[0] == n)
        row = {"name": n, "shape": shape, "batch_size": batch, "recipe": {k: (list(v) if isinstance(v, tuple) else v)
                                                                          for k, v in fields.items()}}
        row.update(est)
        row.update(measured.get(n, {}))
        m, e = row.get("measured_reserved"), row.get("estimated_reserved")
        if m and e:
            row["err_reserved_pct"] = round(100 * (e / m - 1), 2)
            acc = (row.get("accelerate") or {}).get("bytes")
            if acc:
                row["err_accelerate_pct"] = round(100 * (acc / m - 1), 2)
            if row.get("measured_allocated") and row.get("estimated_allocated"):
                row["err_allocated_pct"] = round(100 * (row["estimated_allocated"] / row["measured_allocated"] - 1), 2)
        rows.append(row)
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in list((getattr(pool, "_processes", None) or {}).values()):  # estimates past the deadline: stop them
        proc.terminate()
    result = {"versions": _versions(), "seconds": round(time.time() - t0, 1), "rows": rows}
    (out / "llm_zoo.json").write_text(json.dumps(result, indent=1))
    ok = [r for r in rows if "err_reserved_pct" in r]
    print(f"{len(ok)}/{len(rows)} configurations compared in {time.time() - t0:.0f}s -> {out / 'llm_zoo.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
