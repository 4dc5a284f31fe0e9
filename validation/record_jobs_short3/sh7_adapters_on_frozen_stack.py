"""expect: healthy. A frozen 12-layer bf16 MLP stack with small trainable adapters (AdamW on the
adapters only) trained for ~3 s; the adapter optimizer state appears at the first step.
record: --history 20000"""
import time

import torch
from torch import nn

torch.manual_seed(0)
base = nn.ModuleList(nn.Linear(2048, 2048, dtype=torch.bfloat16) for _ in range(12)).cuda().requires_grad_(False)
adapters = nn.ModuleList(nn.Sequential(nn.Linear(2048, 16, bias=False), nn.Linear(16, 2048, bias=False))
                         for _ in range(12)).cuda().to(torch.bfloat16)
opt = torch.optim.AdamW(adapters.parameters(), lr=1e-4)
t0 = time.time()
while time.time() - t0 < 3.0:
    x = torch.randn(64, 2048, device="cuda", dtype=torch.bfloat16)
    for b, a in zip(base, adapters):
        x = torch.relu(b(x) + a(x))
    loss = x.float().square().mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print("done", loss.item())
