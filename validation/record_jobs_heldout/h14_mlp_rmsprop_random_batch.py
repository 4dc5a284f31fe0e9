"""expect: healthy. A wide MLP trained with RMSprop (centered, with momentum: three state tensors per
parameter, created at the first step), the batch size drawn at random between 16 and 2048 every step
(so activation memory jumps up and down), with oomdoctor.step() markers; about 25 s.

GPU: `python -m oomdoctor record -- python h14_mlp_rmsprop_random_batch.py`. `--cpu-smoke`: 3 tiny steps on the CPU.
"""
import random
import sys
import time

import torch
from torch import nn

import oomdoctor

SMOKE = "--cpu-smoke" in sys.argv
DEV = "cpu" if SMOKE else "cuda"
torch.manual_seed(0)
rng = random.Random(1234)

d_in, width, classes = (64, 128, 10) if SMOKE else (2048, 4096, 1000)
model = nn.Sequential(nn.Linear(d_in, width), nn.GELU(), nn.Dropout(0.1),
                      nn.Linear(width, width), nn.GELU(), nn.Dropout(0.1),
                      nn.Linear(width, width), nn.GELU(),
                      nn.Linear(width, classes)).to(DEV)
opt = torch.optim.RMSprop(model.parameters(), lr=1e-4, alpha=0.99, momentum=0.9, centered=True)
t0 = time.time()
step = 0
while step < (3 if SMOKE else 20000) and time.time() - t0 < 25:
    batch = rng.randint(2, 8) if SMOKE else rng.randint(16, 2048)
    x = torch.randn(batch, d_in, device=DEV)
    y = torch.randint(0, classes, (batch,), device=DEV)
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    step += 1
    oomdoctor.step()
    if step % 500 == 0:
        print(f"step {step} batch {batch} loss {loss.item():.3f}", flush=True)
print("done", step, "steps")
