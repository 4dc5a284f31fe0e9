"""Validate `fit.MicroBatchTrainerMixin` (the Hugging Face Trainer) on GPUs with REAL out-of-memory errors.

Written on 2026-11-28 for this check. Per model, on one GPU (CUDA_VISIBLE_DEVICES=0: with two visible the
Trainer uses DataParallel and doubles the batch), 4 Trainer steps of 16 sequences of 512 tokens, float32 with TF32
off, deterministic algorithms, no dropout:
  ref    the plain Trainer, no cap;
  split  the mixin with micro_batch=8 preset, no cap (the split the OOM should lead to, without an OOM);
  capped the mixin with no preset under set_per_process_memory_fraction half-way between split's and ref's peak
         reserved: the first step must OOM at 16 and go on at 8.
`capped` must equal `split` and be within float32 summation noise of `ref`: the difference is printed beside the
size of the update. SGD without gradient clipping, so that a wrong loss scale shows in the weights (AdamW and the
Trainer's default clipping at 1.0 hide it).

Two sets. `dev` (Llama, 4 layers, hidden 512; causal LM and sequence classifier): its first run (AdamW, clipping on)
showed the classifier's logged loss doubled under the split, which led to the mixin asking the model whether its
loss honours num_items_in_batch (transformers#47688); `dev` was read while fixing it. `heldout` (Qwen2 and BERT
heads of other sizes), written with the fix, before any run of it.

Several processes (`ddp`: two GPUs, torchrun, DDP through the Trainer): ref and split8 (pieces but the last under
no_sync); a cap on rank 0 only (one rank OOMs, the other does not) and on both ranks, with the code under test and,
when --old-src is given, with the code before this check (which retried on the failing rank alone).

    python validation/fit_hf_gpu.py single --set heldout --out DIR
    python validation/fit_hf_gpu.py ddp --out DIR [--old-src PATH]     # on a 2-GPU machine
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
HERE = Path(__file__).resolve()
SRC = os.environ.get("FIT_HF_SRC") or str(HERE.parent.parent / "src")
sys.path.insert(0, SRC)

BATCH, SEQ, STEPS, MICRO = 16, 512, 4, 8
WEIGHTS = Path("/tmp/fit_hf_gpu")


def setup():
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.use_deterministic_algorithms(True, warn_only=True)
    return torch


def _llama(head):
    import transformers

    cfg = transformers.LlamaConfig(vocab_size=32000, hidden_size=512, intermediate_size=1408, num_hidden_layers=4,
                                   num_attention_heads=8, num_key_value_heads=8, pad_token_id=0, num_labels=5,
                                   attn_implementation="eager")
    return (transformers.LlamaForSequenceClassification if head == "cls" else transformers.LlamaForCausalLM)(cfg)


def _qwen2(head):
    import transformers

    cfg = transformers.Qwen2Config(vocab_size=32000, hidden_size=384, intermediate_size=1024, num_hidden_layers=6,
                                   num_attention_heads=6, num_key_value_heads=2, pad_token_id=0, num_labels=5,
                                   attn_implementation="eager")
    return (transformers.Qwen2ForSequenceClassification if head == "cls" else transformers.Qwen2ForCausalLM)(cfg)


def _bert(head):
    import transformers

    cfg = transformers.BertConfig(vocab_size=32000, hidden_size=512, intermediate_size=2048, num_hidden_layers=4,
                                  num_attention_heads=8, max_position_embeddings=512, num_labels=5,
                                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                  attn_implementation="eager")
    return transformers.BertForSequenceClassification(cfg)


# name -> (model, head, gradient accumulation steps)
SETS = {
    "dev": {"lm-ga1": (_llama, "lm", 1), "cls-ga1": (_llama, "cls", 1), "lm-ga2": (_llama, "lm", 2)},
    "heldout": {"qwen2-lm-ga1": (_qwen2, "lm", 1), "qwen2-cls-ga1": (_qwen2, "cls", 1),
                "qwen2-cls-ga2": (_qwen2, "cls", 2), "bert-cls-ga1": (_bert, "cls", 1)},
}


def make_model(kind, family=_llama):
    import torch

    torch.manual_seed(0)
    return family(kind)


class Data:
    """Random tokens (no padding token 0 inside); causal-LM labels cut at random lengths (-100), so that the
    samples carry different numbers of items."""

    def __init__(self, kind, n=BATCH * STEPS * 2):
        import torch

        g = torch.Generator().manual_seed(1)
        self.kind, self.x = kind, torch.randint(1, 32000, (n, SEQ), generator=g)
        self.y = torch.randint(0, 5, (n,), generator=g)
        self.lab = self.x.clone()
        for i, k in enumerate(torch.randint(SEQ // 4, SEQ, (n,), generator=g).tolist()):
            self.lab[i, k:] = -100

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"input_ids": self.x[i], "labels": self.y[i] if self.kind == "cls" else self.lab[i]}


def train(kind, mixin, ga=1, micro=None, out_dir="/tmp/fit_hf_gpu/run", ddp_timeout=90, family=_llama, sgd=True):
    import torch
    import transformers

    from oomdoctor import fit

    model = make_model(kind, family)
    opt = {"optim": "sgd", "learning_rate": 0.05, "max_grad_norm": 0.0} if sgd else \
        {"optim": "adamw_torch", "learning_rate": 1e-4 if kind == "lm" else 0.05}
    args = transformers.TrainingArguments(
        output_dir=out_dir, per_device_train_batch_size=BATCH, gradient_accumulation_steps=ga, max_steps=STEPS,
        report_to=[], save_strategy="no", logging_steps=1, seed=7, data_seed=7, dataloader_num_workers=0,
        disable_tqdm=True, ddp_timeout=ddp_timeout, **opt)
    if mixin:
        class Split(fit.MicroBatchTrainerMixin, transformers.Trainer):
            pass
        trainer = Split(model=model, args=args, train_dataset=Data(kind), min_micro_batch=2, micro_batch=micro)
    else:
        trainer = transformers.Trainer(model=model, args=args, train_dataset=Data(kind))
    torch.cuda.reset_peak_memory_stats()
    t0 = time.time()
    trainer.train()
    row = {"seconds": round(time.time() - t0, 2), "peak_reserved": torch.cuda.max_memory_reserved(),
           "losses": [h["loss"] for h in trainer.state.log_history if "loss" in h],
           "oom_events": getattr(trainer, "oom_events", None), "micro_batch": getattr(trainer, "micro_batch", None),
           "honours_num_items": getattr(trainer, "_honours_num_items", None),
           "model_accepts_loss_kwargs": getattr(trainer, "model_accepts_loss_kwargs", None)}
    weights = torch.cat([p.detach().float().flatten().cpu() for p in model.parameters()])
    del trainer, model
    gc.collect()
    torch.cuda.empty_cache()
    return row, weights


def compare(a, b, init):
    import torch

    d = (a - b).abs()
    upd = (a - init).abs().max().item()
    return {"max_abs_diff": d.max().item(), "max_update": upd, "diff_over_update": d.max().item() / upd if upd else None,
            "equal": bool(torch.equal(a, b))}


def single(out: Path, which: str, tag: str) -> dict:
    torch = setup()
    total = torch.cuda.get_device_properties(0).total_memory
    import transformers

    res: dict = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0), "visible": torch.cuda.device_count(),
                 "transformers": transformers.__version__, "src": SRC, "set": which}
    for key, (family, kind, ga) in SETS[which].items():
        init = torch.cat([p.detach().float().flatten() for p in make_model(kind, family).parameters()])
        ref, w_ref = train(kind, False, ga, family=family)
        split, w_split = train(kind, True, ga, micro=MICRO, family=family)
        cap = (ref["peak_reserved"] + split["peak_reserved"]) / 2
        torch.cuda.set_per_process_memory_fraction(cap / total)
        try:
            capped, w_cap = train(kind, True, ga, family=family)
        except Exception as exc:  # noqa: BLE001 - recorded, the check fails
            capped, w_cap = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}, None
        finally:
            torch.cuda.set_per_process_memory_fraction(1.0)
        row = {"ref": ref, "split": split, "capped": capped, "cap_bytes": int(cap),
               "split_vs_ref": compare(w_split, w_ref, init)}
        if w_cap is not None:
            row["capped_vs_split"] = compare(w_cap, w_split, init)
            row["capped_vs_ref"] = compare(w_cap, w_ref, init)
        res[key] = row
        print(key, json.dumps({k: (v["diff_over_update"], v["equal"]) for k, v in row.items() if "_vs_" in k}),
              capped.get("oom_events"), "honours", split.get("honours_num_items"), flush=True)
    (out / f"fit_hf_single_{which}{tag}.json").write_text(json.dumps(res, indent=1))
    return res


def ddp_run(a) -> int:
    """One torchrun configuration (inside torchrun): rank 0 writes its row; weights go to WEIGHTS/NAME.pt."""
    torch = setup()
    rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(rank)
    if a.cap and rank in a.cap_ranks:
        torch.cuda.set_per_process_memory_fraction(a.cap / torch.cuda.get_device_properties(rank).total_memory)
    row = {"name": a.name, "rank": rank, "src": SRC}
    try:
        r, w = train(a.kind, a.mixin, 1, micro=a.micro, ddp_timeout=60, family=_qwen2 if a.kind == "cls" else _llama,
                     sgd=a.kind == "cls")
        row.update(r)
        if rank == 0:
            WEIGHTS.mkdir(exist_ok=True)
            torch.save(w, WEIGHTS / f"{a.name}.pt")
    except Exception as exc:  # noqa: BLE001 - the outcome is the result
        row["error"] = f"{type(exc).__name__}: {str(exc)[:400]}"
    with (Path(a.out) / "fit_hf_ddp_ranks.jsonl").open("a") as f:
        f.write(json.dumps(row) + "\n")
    return 1 if "error" in row else 0


def ddp(out: Path, old_src: str | None, only_cls: bool = False) -> dict:
    import torch

    WEIGHTS.mkdir(exist_ok=True)
    ranks_file = out / "fit_hf_ddp_ranks.jsonl"

    def launch(name, mixin=True, micro=None, cap=None, cap_ranks=(), src=None, kind="lm"):
        env = dict(os.environ, FIT_HF_SRC=src or SRC)
        cmd = ["torchrun", "--nproc_per_node", "2", str(HERE), "ddp-run", "--name", name, "--out", str(out),
               "--kind", kind]
        cmd += ["--mixin"] if mixin else []
        cmd += ["--micro", str(micro)] if micro else []
        cmd += ["--cap", str(int(cap)), "--cap-ranks", ",".join(map(str, cap_ranks))] if cap else []
        t0 = time.time()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env)
            rc, tail = p.returncode, (p.stdout + p.stderr)[-2500:]
        except subprocess.TimeoutExpired as e:
            rc, tail = "timeout", (str(e.stdout or "") + str(e.stderr or ""))[-2500:]
        rows = [json.loads(x) for x in ranks_file.read_text().splitlines()] if ranks_file.exists() else []
        rows = [r for r in rows if r["name"] == name]
        res = {"name": name, "src": "old" if src else "new", "rc": rc, "wall_s": round(time.time() - t0, 1),
               "ranks": rows, "tail": tail}
        print(name, res["src"], "rc", rc, res["wall_s"], "s", [(r["rank"], r.get("error", "ok")[:160],
                                                                 r.get("oom_events")) for r in rows], flush=True)
        return res

    res: dict = {"torch": torch.__version__, "runs": []}
    if only_cls:  # the classifier (Qwen2, SGD, no clipping) under DDP: the probe on a wrapped model, no_sync pieces
        res["runs"] += [launch("ddp-cls-ref", mixin=False, kind="cls"), launch("ddp-cls-split8", micro=MICRO, kind="cls")]
        w_ref = torch.load(WEIGHTS / "ddp-cls-ref.pt")
        init = torch.cat([p.detach().float().flatten() for p in make_model("cls", _qwen2).parameters()])
        f = WEIGHTS / "ddp-cls-split8.pt"
        res["weights_vs_ref"] = {"ddp-cls-split8": compare(torch.load(f), w_ref, init)} if f.exists() else {}
        print(json.dumps(res["weights_vs_ref"]), flush=True)
        (out / "fit_hf_ddp_cls.json").write_text(json.dumps(res, indent=1))
        return res
    ref = launch("ddp-ref", mixin=False)
    split = launch("ddp-split8", micro=MICRO)
    res["runs"] += [ref, split]
    p16 = {r["rank"]: r["peak_reserved"] for r in ref["ranks"] if "peak_reserved" in r}
    p8 = {r["rank"]: r["peak_reserved"] for r in split["ranks"] if "peak_reserved" in r}
    cap = (p16[0] + p8[0]) / 2
    res["cap_bytes"] = int(cap)
    for src in [None] + ([old_src] if old_src else []):
        tag = "old" if src else "new"
        res["runs"].append(launch(f"ddp-cap-rank0-{tag}", cap=cap, cap_ranks=(0,), src=src))
        res["runs"].append(launch(f"ddp-cap-both-{tag}", cap=cap, cap_ranks=(0, 1), src=src))
    w_ref = torch.load(WEIGHTS / "ddp-ref.pt")
    init = torch.cat([p.detach().float().flatten() for p in make_model("lm").parameters()])
    res["weights_vs_ref"] = {}
    for run in res["runs"][1:]:
        f = WEIGHTS / f"{run['name']}.pt"
        if f.exists():
            res["weights_vs_ref"][run["name"]] = compare(torch.load(f), w_ref, init)
    print(json.dumps(res["weights_vs_ref"], indent=1), flush=True)
    (out / "fit_hf_ddp.json").write_text(json.dumps(res, indent=1))
    return res


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["single", "ddp", "ddp-run"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--old-src")
    ap.add_argument("--name")
    ap.add_argument("--mixin", action="store_true")
    ap.add_argument("--micro", type=int)
    ap.add_argument("--cap", type=int)
    ap.add_argument("--cap-ranks", type=lambda s: tuple(int(x) for x in s.split(",")), default=())
    ap.add_argument("--kind", default="lm")
    ap.add_argument("--set", default="heldout", choices=sorted(SETS))
    ap.add_argument("--tag", default="", help="suffix of the single-GPU result file")
    ap.add_argument("--cls", action="store_true", help="ddp: the classifier pair only")
    a = ap.parse_args()
    if a.mode == "single":
        os.environ.setdefault("CUDA_VISIBLE_DEVICES", "0")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.mode == "ddp-run":
        return ddp_run(a)
    if a.mode == "single":
        single(out, a.set, a.tag)
    else:
        ddp(out, a.old_src, a.cls)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
