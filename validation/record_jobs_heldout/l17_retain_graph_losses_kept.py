"""expect: leak. backward(retain_graph=True) "to be safe" (copied from a GAN loop), and the loss tensor
kept in a list for a plot: every step's whole autograd graph, with all its saved activations, stays
alive, so the set of live graphs grows by one per step (~43 MiB per step, 120 steps, ~5 GiB in about
a second: the fastest leak of the set).
A plain loop without step markers.

GPU: `python -m oomdoctor record -- python l17_retain_graph_losses_kept.py`. `--cpu-smoke`: 3 tiny steps on the CPU.
"""
import sys
import time

import torch
from torch import nn

SMOKE = "--cpu-smoke" in sys.argv
DEV = "cpu" if SMOKE else "cuda"
torch.manual_seed(0)

batch, size, w = (2, 32, 8) if SMOKE else (16, 64, 16)
model = nn.Sequential(
    nn.Conv2d(3, w, 3, 1, 1), nn.GroupNorm(8, w), nn.SiLU(),
    nn.Conv2d(w, w, 3, 1, 1), nn.GroupNorm(8, w), nn.SiLU(), nn.MaxPool2d(2),
    nn.Conv2d(w, 2 * w, 3, 1, 1), nn.GroupNorm(8, 2 * w), nn.SiLU(),
    nn.Conv2d(2 * w, 2 * w, 3, 1, 1), nn.GroupNorm(8, 2 * w), nn.SiLU(), nn.MaxPool2d(2),
    nn.Conv2d(2 * w, 4 * w, 3, 1, 1), nn.GroupNorm(8, 4 * w), nn.SiLU(),
    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4 * w, 10)).to(DEV)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
losses = []
t0 = time.time()
step = 0
while step < (3 if SMOKE else 120) and time.time() - t0 < 60:
    x = torch.randn(batch, 3, size, size, device=DEV)
    y = torch.randint(0, 10, (batch,), device=DEV)
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward(retain_graph=True)
    opt.step()
    losses.append(loss)  # the tensor, with its retained graph
    step += 1
    if step % 20 == 0:
        print(f"step {step} loss {loss.item():.3f}", flush=True)
print("done", step, "steps", len(losses), "losses kept")
