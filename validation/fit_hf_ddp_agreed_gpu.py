"""The Trainer mixin with recover_under_ddp=True on two GPUs, with real OOMs (written for validation before its run).

    PYTHONPATH=src python3 validation/fit_hf_ddp_agreed_gpu.py OUTDIR        # on a 2-GPU machine

Models new to fit's Trainer checks: GPT-NeoX causal LM with gradient accumulation 2 (the loss honours
num_items_in_batch) and GPT-NeoX sequence classifier with accumulation 1 (it drops it: pieces weighted). 6 layers,
hidden 512, random init, float32, TF32 off, SGD (lr 0.05), no clipping, 4 optimizer steps of 16 sequences x 512
tokens per rank. Per model, one torchrun job (2 processes, NCCL, Trainer's DDP, ddp_timeout 120 s) per case:
  ref     the plain Trainer
  split8  the mixin, recover_under_ddp, micro_batch=8 preset, no cap (the split the OOM should lead to; its peak)
  cap0    the mixin, recover_under_ddp, no preset; rank 0 under set_per_process_memory_fraction half-way between
          ref's and split8's peak reserved: rank 0 must OOM at 16 and go on at 8, rank 1 never split
  floor0  as cap0 with min_micro_batch=16 (classifier only): every rank must raise, well before the timeout
  ref2    the plain Trainer again (added after the first run: the noise floor, with deterministic algorithms on)
  optoom0 (added in session 25, before its run) the mixin with AdamW (lr 1e-4); at rank 0's first optimizer step a
          pre-hook on the torch optimizer empties the cache and caps rank 0 at what it holds + 32 MiB, so Adam's
          state cannot be allocated: a real OOM in the Trainer's optimizer step (the mixin's wrapped step). Both ranks
          must raise at the first step, rank 1 with rank 0's message, well before the timeout.
Select: validation/fit_hf_ddp_agreed_gpu.py OUTDIR [MODEL,...] [CASE,...] (the cap cases need ref and split8).
FIT_HF_NPROC=4 runs every job on 4 GPUs (session 25); rank 0 is still the only capped rank.
Pass: cap0 within 1e-3 of ref's update (float32 summation order) on both ranks; equal or near split8; floor0 ends
with both ranks' FitOutOfMemoryError (rank 0 floor, rank 1 peer).
"""

from __future__ import annotations

import json
import os

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import subprocess  # noqa: E402
import sys
import time
from pathlib import Path

import fit_hf_gpu  # noqa: E402  (beside this script)

BATCH, SEQ, STEPS = 16, 512, 4
WEIGHTS = Path("/tmp/fit_hf_ddp_agreed")
MODELS = {"neox-lm-ga2": ("lm", 2), "neox-cls-ga1": ("cls", 1)}


def make_model(kind):
    import torch
    import transformers
    cfg = transformers.GPTNeoXConfig(vocab_size=32000, hidden_size=512, intermediate_size=2048, num_hidden_layers=6,
                                     num_attention_heads=8, max_position_embeddings=SEQ, num_labels=5, pad_token_id=0,
                                     use_cache=False, attention_dropout=0.0, hidden_dropout=0.0)
    torch.manual_seed(0)
    return (transformers.GPTNeoXForSequenceClassification if kind == "cls" else transformers.GPTNeoXForCausalLM)(cfg)


class Data(fit_hf_gpu.Data):
    """fit_hf_gpu's data (random tokens, causal-LM labels cut at random lengths), twice as many samples."""

    def __init__(self, kind, n=BATCH * STEPS * 2 * 2):
        super().__init__(kind, n)


def worker(model_key: str, case: str, out: Path, cap: float) -> int:
    import torch
    import transformers

    from oomdoctor import fit
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.use_deterministic_algorithms(True, warn_only=True)
    rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(rank)
    kind, ga = MODELS[model_key]
    if case in ("cap0", "floor0") and rank == 0:
        torch.cuda.set_per_process_memory_fraction(cap / torch.cuda.get_device_properties(rank).total_memory)
    model = make_model(kind)
    adam = case == "optoom0"
    args = transformers.TrainingArguments(
        output_dir=str(WEIGHTS / "run"), per_device_train_batch_size=BATCH, gradient_accumulation_steps=ga,
        max_steps=STEPS, optim="adamw_torch" if adam else "sgd", learning_rate=1e-4 if adam else 0.05,
        max_grad_norm=0.0, report_to=[], save_strategy="no",
        logging_steps=1, seed=7, data_seed=7, dataloader_num_workers=0, disable_tqdm=True, ddp_timeout=120)
    callbacks = []
    if adam and rank == 0:
        class CapAtFirstUpdate(transformers.TrainerCallback):
            def on_train_begin(self, args, state, control, optimizer=None, **kw):
                inner = getattr(optimizer, "optimizer", optimizer)

                def cap(opt, a, k):
                    if not opt.state:  # the first update: Adam's state is still to be allocated
                        torch.cuda.empty_cache()
                        limit = torch.cuda.memory_reserved(rank) + 32 * 2**20
                        torch.cuda.set_per_process_memory_fraction(
                            limit / torch.cuda.get_device_properties(rank).total_memory, rank)
                inner.register_step_pre_hook(cap)
        callbacks.append(CapAtFirstUpdate())
    if case in ("ref", "ref2"):
        trainer = transformers.Trainer(model=model, args=args, train_dataset=Data(kind))
    else:
        class Split(fit.MicroBatchTrainerMixin, transformers.Trainer):
            pass
        trainer = Split(model=model, args=args, train_dataset=Data(kind), recover_under_ddp=True,
                        micro_batch=8 if case == "split8" else None, min_micro_batch=16 if case == "floor0" else 2,
                        callbacks=callbacks)
    row: dict = {"model": model_key, "case": case, "rank": rank}
    torch.cuda.reset_peak_memory_stats()
    t0 = time.time()
    try:
        trainer.train()
        row["losses"] = [h["loss"] for h in trainer.state.log_history if "loss" in h]
        if rank == 0:
            WEIGHTS.mkdir(exist_ok=True)
            torch.save(torch.cat([p.detach().float().flatten().cpu() for p in model.parameters()]),
                       WEIGHTS / f"{model_key}-{case}.pt")
    except (fit.FitOutOfMemoryError, fit.FitPeerError) as exc:
        row["error"] = {"type": type(exc).__name__, "phase": getattr(exc, "phase", None), "text": str(exc)[:600],
                        "step": trainer.state.global_step}
    row["seconds"] = round(time.time() - t0, 1)
    row["peak_reserved"] = torch.cuda.max_memory_reserved()
    row["events"] = getattr(trainer, "oom_events", None)
    with (out / "ranks.jsonl").open("a") as f:
        f.write(json.dumps(row) + "\n")
    if "error" in row:  # every rank raised: meet, so that the launcher stops none before it wrote its row
        torch.distributed.barrier()
    sys.stdout.flush()
    os._exit(1 if "error" in row else 0)


def drive(out: Path, models: list[str] | None = None, cases: list[str] | None = None) -> None:
    import torch
    import transformers
    out.mkdir(parents=True, exist_ok=True)
    WEIGHTS.mkdir(exist_ok=True)
    res: dict = {"torch": torch.__version__, "transformers": transformers.__version__,
                 "gpu": torch.cuda.get_device_name(0), "runs": []}

    def launch(model_key, case, cap=0.0):
        t0 = time.time()
        try:
            p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", os.environ.get("FIT_HF_NPROC", "2"),
                                __file__, model_key, case, str(out), str(cap)], capture_output=True, text=True,
                               timeout=300)
            rc, tail = p.returncode, (p.stdout + p.stderr)[-3000:]
        except subprocess.TimeoutExpired as e:
            rc, tail = "timeout", str(e)[-3000:]
        rows = [json.loads(x) for x in (out / "ranks.jsonl").read_text().splitlines()] \
            if (out / "ranks.jsonl").exists() else []
        rows = sorted((r for r in rows if r["model"] == model_key and r["case"] == case), key=lambda r: r["rank"])
        run = {"model": model_key, "case": case, "rc": rc, "wall_s": round(time.time() - t0, 1), "ranks": rows,
               "tail": tail if rc not in (0,) else ""}
        print(model_key, case, "rc", rc, run["wall_s"], "s",
              [(r["rank"], (r.get("error") or {}).get("phase"), r.get("events")) for r in rows], flush=True)
        res["runs"].append(run)
        return run

    cases = cases or ["ref", "split8", "ref2", "cap0", "floor0", "optoom0"]
    for key, (kind, _ga) in MODELS.items():
        if models and key not in models:
            continue
        ref, split = launch(key, "ref"), launch(key, "split8")
        if "ref2" in cases:
            launch(key, "ref2")
        p16 = next(r["peak_reserved"] for r in ref["ranks"] if r["rank"] == 0)
        p8 = next(r["peak_reserved"] for r in split["ranks"] if r["rank"] == 0)
        cap = (p16 + p8) / 2
        if "cap0" in cases:
            launch(key, "cap0", cap)
        if kind == "cls" and "floor0" in cases:
            launch(key, "floor0", cap)
        if kind == "cls" and "optoom0" in cases:
            launch(key, "optoom0")
        w_ref = torch.load(WEIGHTS / f"{key}-ref.pt")
        init = torch.cat([p.detach().float().flatten() for p in make_model(kind).parameters()])
        upd = (w_ref - init).abs().max().item()
        for case in ("ref2", "split8", "cap0"):
            f = WEIGHTS / f"{key}-{case}.pt"
            if f.exists():
                w = torch.load(f)
                res.setdefault("vs_ref", {})[f"{key}-{case}"] = (w - w_ref).abs().max().item() / upd
        fs, fc = WEIGHTS / f"{key}-split8.pt", WEIGHTS / f"{key}-cap0.pt"
        if fs.exists() and fc.exists():
            a, b = torch.load(fc), torch.load(fs)
            res.setdefault("cap0_vs_split8", {})[key] = (a - b).abs().max().item() / upd
        res.setdefault("cap_bytes", {})[key] = int(cap)
    print(json.dumps({k: res.get(k) for k in ("vs_ref", "cap0_vs_split8", "cap_bytes")}, indent=1))
    (out / "fit_hf_ddp_agreed.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    if "LOCAL_RANK" in os.environ:
        worker(sys.argv[1], sys.argv[2], Path(sys.argv[3]), float(sys.argv[4]))
    else:
        drive(Path(sys.argv[1]), sys.argv[2].split(",") if len(sys.argv) > 2 else None,
              sys.argv[3].split(",") if len(sys.argv) > 3 else None)
