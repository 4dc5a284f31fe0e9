"""expect: leak. A contrastive image encoder (MoCo-style, two augmented views of 32x32 images) whose
negative "memory bank" of embeddings grows with torch.cat on the GPU every step and is never
truncated (only its last 8192 rows are used in the loss): 512 x 2048 fp32 = 4 MiB per step, 400
steps (~1.6 GiB, plus a bank-sized copy during each cat). With oomdoctor.step() markers.

GPU: `python -m oomdoctor record -- python l15_memory_bank_torch_cat.py`. `--cpu-smoke`: 3 tiny steps on the CPU.
"""
import sys
import time

import torch
from torch import nn

import oomdoctor

SMOKE = "--cpu-smoke" in sys.argv
DEV = "cpu" if SMOKE else "cuda"
torch.manual_seed(0)

batch, size, dim, w = (8, 16, 16, 8) if SMOKE else (512, 32, 2048, 64)
encoder = nn.Sequential(
    nn.Conv2d(3, w, 3, 1, 1, bias=False), nn.BatchNorm2d(w), nn.ReLU(),
    nn.Conv2d(w, 2 * w, 3, 2, 1, bias=False), nn.BatchNorm2d(2 * w), nn.ReLU(),
    nn.Conv2d(2 * w, 4 * w, 3, 2, 1, bias=False), nn.BatchNorm2d(4 * w), nn.ReLU(),
    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4 * w, dim)).to(DEV)
opt = torch.optim.SGD(encoder.parameters(), lr=0.03, momentum=0.9, weight_decay=1e-4)
bank = torch.empty(0, dim, device=DEV)
t0 = time.time()
step = 0
while step < (3 if SMOKE else 400) and time.time() - t0 < 60:
    x = torch.randn(batch, 3, size, size, device=DEV)
    q = nn.functional.normalize(encoder(x + 0.1 * torch.randn_like(x)), dim=1)
    with torch.no_grad():
        k = nn.functional.normalize(encoder(x + 0.1 * torch.randn_like(x)), dim=1)
    pos = (q * k).sum(1, keepdim=True)
    neg = q @ bank[-8192:].T if bank.shape[0] else q.new_zeros(batch, 0)
    logits = torch.cat([pos, neg], dim=1) / 0.07
    loss = nn.functional.cross_entropy(logits, torch.zeros(batch, dtype=torch.long, device=DEV))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    bank = torch.cat([bank, k])  # the bug: the queue is never cut back to its 8192 rows
    step += 1
    oomdoctor.step()
    if step % 50 == 0:
        print(f"step {step} loss {loss.item():.3f} bank {tuple(bank.shape)}", flush=True)
print("done", step, "steps, bank", tuple(bank.shape))
