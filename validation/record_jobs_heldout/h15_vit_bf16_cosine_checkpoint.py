"""expect: healthy. A ViT (patch embedding, 8 pre-norm blocks) trained under bf16 autocast with AdamW,
linear warm-up then cosine LR, and every 25 steps a checkpoint: model and optimizer state copied to
the CPU and written with torch.save to a temporary file (only the latest kept). oomdoctor.step()
markers; about 30 s.

GPU: `python -m oomdoctor record -- python h15_vit_bf16_cosine_checkpoint.py`. `--cpu-smoke`: 3 tiny steps on the CPU.
"""
import os
import sys
import tempfile
import time

import torch
from torch import nn

import oomdoctor

SMOKE = "--cpu-smoke" in sys.argv
DEV = "cpu" if SMOKE else "cuda"
torch.manual_seed(0)


class ViT(nn.Module):
    def __init__(self, img: int, patch: int, dim: int, depth: int, heads: int, classes: int):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch, stride=patch)
        n = (img // patch) ** 2
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, n + 1, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.1, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        return self.head(self.norm(self.blocks(x))[:, 0])


if SMOKE:
    img, batch, model = 32, 2, ViT(32, 8, 64, 2, 4, 10)
else:
    img, batch, model = 160, 64, ViT(160, 16, 384, 8, 6, 1000)
model = model.to(DEV)
steps = 3 if SMOKE else 600
opt = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.05)
warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.01, total_iters=max(1, steps // 20))
cos = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)
sched = torch.optim.lr_scheduler.SequentialLR(opt, [warm, cos], milestones=[max(1, steps // 20)])
ckpt_path = os.path.join(tempfile.mkdtemp(prefix="h15-"), "last.pt")
t0 = time.time()
step = 0
while step < steps and time.time() - t0 < 30:
    x = torch.randn(batch, 3, img, img, device=DEV)
    y = torch.randint(0, 1000 if not SMOKE else 10, (batch,), device=DEV)
    with torch.autocast(DEV, dtype=torch.bfloat16):
        loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    sched.step()
    step += 1
    oomdoctor.step()
    if step % 25 == 0 or SMOKE:
        cpu_state = {
            "model": {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()},
            "opt": {i: {k: (v.detach().to("cpu", copy=True) if torch.is_tensor(v) else v) for k, v in s.items()}
                    for i, s in opt.state_dict()["state"].items()},
            "step": step, "lr": sched.get_last_lr()[0], "loss": loss.item(),
        }
        torch.save(cpu_state, ckpt_path)
        del cpu_state
        print(f"step {step} loss {loss.item():.3f} lr {sched.get_last_lr()[0]:.2e} saved", flush=True)
print("done", step, "steps", os.path.getsize(ckpt_path) >> 20, "MiB checkpoint")
