"""`explain` on logs that real libraries print on a real GPU: healthy runs, recovered OOMs, failures.

Issue #17: "0 events on logs with no failure; a recovered OOM is reported as recovered (exit 0)". The benign
corpus measures that on public texts; this measures it on whole logs as a user would pipe them
(`python train.py 2>&1 | tee log`), printed by the libraries themselves (HF Trainer, Lightning's batch-size
finder, accelerate, PEFT, timm, the profiler, pytest, torchrun, torch.compile), each run made on purpose so
its truth is known by construction. A few failures of the same libraries check that whole-log noise (progress
bars, warnings, summaries) does not hide a real failure. Written for validation (session 14) before any run;
one case has since driven a rule (pytest_oom_test -> explain/testrun.py) and is in-sample from then on.

Usage:
  device machine:  python3 validation/explain_logs_gpu.py run OUTDIR [--only NAME ...]
                   (writes OUTDIR/<case>.log and OUTDIR/meta.json)
  anywhere:        PYTHONPATH=src python3 validation/explain_logs_gpu.py score OUTDIR [--code NAME=SRC ...]
                   (reads each log with `oomdoctor explain --format json`, once per source tree; prints a table)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

PY = sys.executable

HEAD = r"""
import os, sys, time
os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
import torch
"""

GPT2_DATA = r"""
from torch.utils.data import Dataset
class Tokens(Dataset):
    def __init__(self, n, seq, vocab=1000): self.n, self.seq, self.vocab = n, seq, vocab
    def __len__(self): return self.n
    def __getitem__(self, i):
        ids = torch.randint(0, self.vocab, (self.seq,))
        return {"input_ids": ids, "labels": ids}
"""

CONV = r"""
import torch.nn as nn
def convnet(ch=128, depth=4):
    layers, c = [], 3
    for _ in range(depth):
        layers += [nn.Conv2d(c, ch, 3, padding=1), nn.ReLU()]; c = ch
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(ch, 10))
"""

CASES: dict[str, dict] = {}


def case(name: str, expect: str, kind: str, code: str, *, argv: list[str] | None = None, timeout: int = 180,
         env: dict | None = None, note: str = "") -> None:
    CASES[name] = {"expect": expect, "kind": kind, "code": code, "argv": argv, "timeout": timeout,
                   "env": env or {}, "note": note}


# ---- healthy runs (expect: no event) ----------------------------------------------------------------
case("trainer_gpt2", "none", "healthy_training", HEAD + GPT2_DATA + r"""
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
model = GPT2LMHeadModel(GPT2Config(vocab_size=1000, n_layer=4, n_embd=256, n_head=4, n_positions=128))
args = TrainingArguments(output_dir="/tmp/o_trainer", per_device_train_batch_size=16, num_train_epochs=1,
                         logging_steps=8, report_to=[], save_strategy="no", bf16=True)
Trainer(model=model, args=args, train_dataset=Tokens(512, 128)).train()
print(f"max memory allocated: {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
""", note="HF Trainer fine-tune of a small GPT-2, loss logs, peak memory printed")

case("lightning_fit", "none", "healthy_training", HEAD + r"""
import lightning as L, torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
class M(L.LightningModule):
    def __init__(self):
        super().__init__(); self.net = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 10))
    def training_step(self, b, i):
        x, y = b; loss = nn.functional.cross_entropy(self.net(x), y); self.log("train_loss", loss, prog_bar=True)
        return loss
    def configure_optimizers(self): return torch.optim.AdamW(self.parameters(), 1e-3)
ds = TensorDataset(torch.randn(4096, 256), torch.randint(0, 10, (4096,)))
L.Trainer(max_epochs=2, accelerator="gpu", devices=1, logger=False, enable_checkpointing=False).fit(M(), DataLoader(ds, batch_size=64))
print("peak", torch.cuda.max_memory_allocated() // 2**20, "MiB")
""", note="Lightning fit, model summary and progress bar")

case("peft_lora", "none", "healthy_training", HEAD + r"""
from transformers import LlamaConfig, LlamaForCausalLM
from peft import LoraConfig, get_peft_model
cfg = LlamaConfig(vocab_size=2000, hidden_size=512, intermediate_size=1376, num_hidden_layers=4, num_attention_heads=8)
model = get_peft_model(LlamaForCausalLM(cfg).cuda(), LoraConfig(r=8, target_modules=["q_proj", "v_proj"]))
model.print_trainable_parameters()
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], 1e-4)
for step in range(1, 41):
    ids = torch.randint(0, 2000, (8, 256), device="cuda")
    loss = model(input_ids=ids, labels=ids).loss; loss.backward(); opt.step(); opt.zero_grad()
    if step % 10 == 0:
        print(f"step {step} loss {loss.item():.3f} mem {torch.cuda.memory_allocated() / 2**30:.2f} GB "
              f"max {torch.cuda.max_memory_allocated() / 2**30:.2f} GB", flush=True)
""", note="PEFT LoRA loop printing memory per 10 steps")

case("timm_summary", "none", "allocator_summary", HEAD + r"""
import timm
model = timm.create_model("resnet50", num_classes=100).cuda()
opt = torch.optim.SGD(model.parameters(), 0.1)
for step in range(10):
    x = torch.randn(64, 3, 224, 224, device="cuda"); y = torch.randint(0, 100, (64,), device="cuda")
    loss = torch.nn.functional.cross_entropy(model(x), y); loss.backward(); opt.step(); opt.zero_grad()
print(f"train: 10 steps, loss {loss.item():.3f}")
print(torch.cuda.memory_summary())
""", note="timm ResNet-50 steps, then torch.cuda.memory_summary()")

case("nvidia_smi_busy", "none", "nvidia_smi", HEAD + r"""
import subprocess
x = torch.empty(20 * 2**30, dtype=torch.uint8, device="cuda")
print(subprocess.run(["nvidia-smi"], capture_output=True, text=True).stdout)
print(subprocess.run(["nvidia-smi", "-q", "-d", "MEMORY"], capture_output=True, text=True).stdout)
""", note="nvidia-smi and nvidia-smi -q -d MEMORY while a process holds 20 GiB")

case("profiler_memory", "none", "other", HEAD + r"""
from torch.profiler import profile, ProfilerActivity
model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(6)]).cuda()
x = torch.randn(512, 2048, device="cuda")
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], profile_memory=True) as prof:
    for _ in range(3):
        model(x).sum().backward()
print(prof.key_averages().table(sort_by="self_cuda_memory_usage", row_limit=15))
""", note="torch.profiler memory table")

case("pytest_oom_test", "none", "test_log", r"""
import pytest, sys
sys.exit(pytest.main(["-v", "-rA", "-p", "no:cacheprovider", sys.argv[1]]))
""", argv=["@TESTFILE@"], note="a test suite whose OOM test passes (pytest.raises), messages captured by -rA")

case("torchrun_ddp", "none", "healthy_training", None, note="torchrun, 1 process, DDP loop printing memory")

case("compile_autotune", "none", "healthy_training", HEAD + r"""
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).cuda().half()
f = torch.compile(model, mode="max-autotune-no-cudagraphs")
x = torch.randn(256, 1024, device="cuda", dtype=torch.half)
for i in range(3):
    y = f(x)
torch.cuda.synchronize(); print("compiled, out", tuple(y.shape), "peak MiB", torch.cuda.max_memory_allocated() // 2**20)
""", timeout=300, env={"TORCHINDUCTOR_MAX_AUTOTUNE_REPORT_CHOICES_STATS": "1"},
     note="torch.compile max-autotune (autotune tables)")

# ---- recovered OOMs (expect: recovered, exit 0) -------------------------------------------------------
case("trainer_auto_batch", "recovered", "batch_finder_recovered", HEAD + GPT2_DATA + r"""
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
model = GPT2LMHeadModel(GPT2Config(vocab_size=1000, n_layer=12, n_embd=768, n_head=12, n_positions=1024))
args = TrainingArguments(output_dir="/tmp/o_auto", per_device_train_batch_size=4096, auto_find_batch_size=True,
                         max_steps=6, logging_steps=2, report_to=[], save_strategy="no", bf16=True, log_level="info")
Trainer(model=model, args=args, train_dataset=Tokens(100000, 1024)).train()
print("done")
""", timeout=300, note="HF Trainer auto_find_batch_size from 4096 (log_level info)")

case("lightning_bs_finder", "recovered", "batch_finder_recovered", HEAD + CONV + r"""
import lightning as L
from lightning.pytorch.tuner import Tuner
from torch.utils.data import DataLoader, Dataset
class Img(Dataset):
    def __len__(self): return 4096
    def __getitem__(self, i): return torch.randn(3, 384, 384), torch.randint(0, 10, ()).item()
class M(L.LightningModule):
    def __init__(self):
        super().__init__(); self.batch_size = 2; self.net = convnet(128, 4)
    def train_dataloader(self): return DataLoader(Img(), batch_size=self.batch_size, num_workers=4)
    def training_step(self, b, i):
        x, y = b; return nn.functional.cross_entropy(self.net(x), y)
    def configure_optimizers(self): return torch.optim.SGD(self.parameters(), 0.01)
m = M()
t = L.Trainer(max_steps=5, accelerator="gpu", devices=1, logger=False, enable_checkpointing=False)
Tuner(t).scale_batch_size(m, mode="power", steps_per_trial=2, max_trials=12)
t.fit(m)
print("trained with batch size", m.batch_size)
""", timeout=300, note="Lightning Tuner.scale_batch_size (power) to the OOM, then fit")

case("accelerate_find_batch", "recovered", "batch_finder_recovered", HEAD + CONV + r"""
from accelerate import Accelerator
from accelerate.utils import find_executable_batch_size
acc = Accelerator()
@find_executable_batch_size(starting_batch_size=1024)
def train(batch_size):
    acc.free_memory()
    acc.print(f"Trying batch size {batch_size}")
    model = acc.prepare(convnet(128, 4))
    opt = torch.optim.SGD(model.parameters(), 0.01)
    for step in range(3):
        x = torch.randn(batch_size, 3, 256, 256, device=acc.device)
        loss = model(x).logsumexp(1).mean(); acc.backward(loss); opt.step(); opt.zero_grad()
    acc.print(f"trained 3 steps at batch size {batch_size}, loss {loss.item():.3f}")
train()
""", timeout=240, note="accelerate find_executable_batch_size from 1024 (prints its own tries)")

case("retry_smaller_chunks", "recovered", "other", HEAD + r"""
x = torch.randn(200_000, 512, device="cuda")
chunk = 200_000
while True:
    try:
        sims = [(x[i:i + chunk] @ x.T).topk(5, dim=1).indices for i in range(0, len(x), chunk)]
        break
    except torch.OutOfMemoryError as e:
        print(f"OOM with chunk={chunk}: {e}", flush=True)
        torch.cuda.empty_cache(); chunk //= 2
        print(f"retrying with chunk={chunk}", flush=True)
print(f"nearest neighbours done for {len(x)} rows (chunk {chunk})")
""", note="a user's loop: catch the OOM, print it, halve the chunk, go on")

# ---- failures of the same libraries (expect: the category) --------------------------------------------
case("trainer_too_big", "true_capacity", "failure", HEAD + GPT2_DATA + r"""
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
model = GPT2LMHeadModel(GPT2Config(vocab_size=1000, n_layer=36, n_embd=1280, n_head=20, n_positions=1024))
args = TrainingArguments(output_dir="/tmp/o_big", per_device_train_batch_size=64, max_steps=4, logging_steps=1,
                         report_to=[], save_strategy="no")
Trainer(model=model, args=args, train_dataset=Tokens(1000, 1024)).train()
""", timeout=240, note="HF Trainer, 0.8B GPT-2 in fp32 at batch 64 x 1024 tokens")

case("lightning_leak", "leak_in_code", "failure", HEAD + r"""
import lightning as L, torch.nn as nn
from torch.utils.data import DataLoader, Dataset
class Batches(Dataset):
    def __len__(self): return 400
    def __getitem__(self, i): return torch.randn(4096, 4096), torch.randint(0, 10, (4096,))
class M(L.LightningModule):
    def __init__(self):
        super().__init__(); self.net = nn.Sequential(nn.Linear(4096, 32768), nn.ReLU(), nn.Linear(32768, 10)); self.seen = []
    def training_step(self, b, i):
        x, y = b; h = self.net[1](self.net[0](x)); out = self.net[2](h); loss = nn.functional.cross_entropy(out, y)
        self.seen.append(h.detach())   # a feature cache kept on the GPU: grows 512 MiB every step
        self.log("train_loss", loss, prog_bar=True)
        return loss
    def configure_optimizers(self): return torch.optim.SGD(self.parameters(), 1e-3)
L.Trainer(max_epochs=1, accelerator="gpu", devices=1, logger=False, enable_checkpointing=False).fit(M(), DataLoader(Batches(), batch_size=None))
""", timeout=240, note="Lightning: training_step keeps its hidden features in a list on the GPU (first version kept outputs with their graph: backward frees those buffers, no OOM on the H200; rewritten and re-run, session 14)")

case("trainer_fraction", "gpu_sharing_limit", "failure", HEAD + GPT2_DATA + r"""
torch.cuda.set_per_process_memory_fraction(0.06)
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
model = GPT2LMHeadModel(GPT2Config(vocab_size=1000, n_layer=12, n_embd=768, n_head=12, n_positions=1024))
args = TrainingArguments(output_dir="/tmp/o_frac", per_device_train_batch_size=16, max_steps=4, logging_steps=1,
                         report_to=[], save_strategy="no")
Trainer(model=model, args=args, train_dataset=Tokens(1000, 1024)).train()
""", timeout=240, note="set_per_process_memory_fraction(0.06) in the script, then HF Trainer (needs more)")

case("trainer_cotenant", "other_process", "failure", HEAD + GPT2_DATA + r"""
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
model = GPT2LMHeadModel(GPT2Config(vocab_size=1000, n_layer=12, n_embd=768, n_head=12, n_positions=1024))
args = TrainingArguments(output_dir="/tmp/o_co", per_device_train_batch_size=16, max_steps=4, logging_steps=1,
                         report_to=[], save_strategy="no")
Trainer(model=model, args=args, train_dataset=Tokens(1000, 1024)).train()
""", timeout=240, note="another process holds all but 4 GiB; HF Trainer of a 124M GPT-2 (needs ~25 GiB alone)")

HOLDER = r"""
import sys, time, torch
free, total = torch.cuda.mem_get_info()
x = torch.empty(int(free - 4 * 2**30), dtype=torch.uint8, device="cuda")
print("READY", flush=True); time.sleep(900)
"""

DDP = r"""
import os, torch, torch.distributed as dist
dist.init_process_group("nccl"); rank = dist.get_rank(); torch.cuda.set_device(rank)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4096, 4096).cuda(), device_ids=[rank])
opt = torch.optim.SGD(model.parameters(), 0.01)
for step in range(1, 31):
    loss = model(torch.randn(256, 4096, device="cuda")).pow(2).mean(); loss.backward(); opt.step(); opt.zero_grad()
    if step % 10 == 0 and rank == 0:
        print(f"[rank {rank}] step {step} loss {loss.item():.4f} allocated {torch.cuda.memory_allocated() >> 20} MiB "
              f"reserved {torch.cuda.memory_reserved() >> 20} MiB", flush=True)
dist.destroy_process_group()
"""

PYTEST_FILE = r"""
import torch, pytest

def test_oom_is_raised_and_recoverable():
    with pytest.raises(torch.OutOfMemoryError) as err:
        torch.empty(1 << 48, dtype=torch.uint8, device="cuda")
    print(err.value)
    torch.cuda.empty_cache()
    assert torch.ones(10, device="cuda").sum().item() == 10

def test_small_alloc():
    assert torch.zeros(1024, device="cuda").shape == (1024,)
"""


def run_one(name: str, c: dict, out: Path, work: Path) -> dict:
    log = out / f"{name}.log"
    env = {**os.environ, **c["env"], "PYTHONUNBUFFERED": "1"}
    holder = None
    if name == "torchrun_ddp":
        (work / "ddp.py").write_text(DDP)
        cmd = [PY, "-m", "torch.distributed.run", "--nproc_per_node=1", str(work / "ddp.py")]
    else:
        script = work / f"{name}.py"
        script.write_text(c["code"])
        argv = [a.replace("@TESTFILE@", str(work / "test_oom_paths.py")) for a in (c["argv"] or [])]
        if "@TESTFILE@" in " ".join(c["argv"] or []):
            (work / "test_oom_paths.py").write_text(PYTEST_FILE)
        cmd = [PY, str(script), *argv]
    if name == "trainer_cotenant":
        (work / "holder.py").write_text(HOLDER)
        holder = subprocess.Popen([PY, str(work / "holder.py")], stdout=subprocess.PIPE, text=True)
        holder.stdout.readline()
    t0 = time.monotonic()
    with open(log, "w") as f:
        try:
            p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=c["timeout"], env=env, cwd=work)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    if holder:
        holder.kill()
        holder.wait()
    return {"name": name, "rc": rc, "seconds": round(time.monotonic() - t0, 1), "bytes": log.stat().st_size,
            **{k: c[k] for k in ("expect", "kind", "note")}}


def machine() -> dict:
    import torch
    q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                       capture_output=True, text=True, timeout=30).stdout.strip()
    vers = {"torch": torch.__version__, "gpu": q, "python": sys.version.split()[0]}
    for mod in ("transformers", "lightning", "accelerate", "peft", "timm", "pytest"):
        try:
            vers[mod] = __import__(mod).__version__
        except Exception as e:  # noqa: BLE001 (a missing library is recorded, its cases fail visibly)
            vers[mod] = f"missing: {e}"
    return vers


def cmd_run(a: argparse.Namespace) -> int:
    out = Path(a.outdir)
    out.mkdir(parents=True, exist_ok=True)
    work = Path("/tmp/explain_logs_work")
    work.mkdir(exist_ok=True)
    meta = {"machine": machine(), "cases": []}
    for name, c in CASES.items():
        if a.only and name not in a.only:
            continue
        r = run_one(name, c, out, work)
        meta["cases"].append(r)
        print(f"{name:24s} rc={r['rc']!s:8s} {r['seconds']:6.1f}s {r['bytes']:8d} bytes", flush=True)
        (out / "meta.json").write_text(json.dumps(meta, indent=1))
    return 0


def read(log: Path, src: str | None) -> dict:
    """`oomdoctor explain --format json LOG` read with source tree `src` (the --here script's reader)."""
    from explain_here_gpu import explain  # validation/ is the script's own directory on sys.path

    r = explain(log, False, src)
    if "error" in r:
        return r
    return {"rc": r["rc"], "failed": bool(r["failed"]), "ranked": r["ranked"], "events": len(r["events"]),
            "recovered": r["recovered"]}


def verdict(expect: str, r: dict) -> str:
    if "error" in r:
        return "ERROR"
    if expect == "none":
        return "ok" if not r["failed"] and r["events"] == 0 else ("recovered?" if not r["failed"] else "FALSE ALARM")
    if expect == "recovered":
        return "ok" if not r["failed"] and r["recovered"] else ("no event" if not r["failed"] else "FALSE ALARM")
    if not r["failed"]:
        return "MISSED"
    return "top-1" if r["ranked"][:1] == [expect] else ("top-2" if expect in r["ranked"][:2] else "wrong")


def cmd_score(a: argparse.Namespace) -> int:
    out = Path(a.outdir)
    meta = json.loads((out / "meta.json").read_text())
    codes = [("here", None)] + [tuple(x.split("=", 1)) for x in a.code]
    rows = []
    for c in meta["cases"]:
        row = {**c}
        for cname, src in codes:
            r = read(out / f"{c['name']}.log", src)
            row[cname] = {**r, "verdict": verdict(c["expect"], r)}
        rows.append(row)
    print("machine:", json.dumps(meta["machine"]))
    print("| case | expect | job rc | " + " | ".join(n for n, _ in codes) + " |")
    print("| --- | --- | --- | " + " | ".join("---" for _ in codes) + " |")
    for row in rows:
        cells = []
        for n, _ in codes:
            r = row[n]
            top = (r.get("ranked") or ["-"])[0] if r.get("failed") else "no failure"
            cells.append(f"{r['verdict']} ({top}; {r.get('events', '?')} ev, {r.get('recovered', '?')} rec)")
        print(f"| {row['name']} | {row['expect']} | {row['rc']} | " + " | ".join(cells) + " |")
    if a.json:
        Path(a.json).write_text(json.dumps({"machine": meta["machine"], "rows": rows}, indent=1))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("outdir")
    r.add_argument("--only", nargs="*")
    s = sub.add_parser("score")
    s.add_argument("outdir")
    s.add_argument("--code", action="append", default=[])
    s.add_argument("--json")
    a = ap.parse_args()
    return cmd_run(a) if a.cmd == "run" else cmd_score(a)


if __name__ == "__main__":
    sys.exit(main())
