"""expect: leak. A short training run (~3 s) that logs each step's penultimate features (detached, but
left on the GPU: 16 MiB per step) into a list for a later t-SNE.
record: --history 20000"""
import time

import torch
from torch import nn

torch.manual_seed(0)
body = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 2048), nn.ReLU()).cuda()
head = nn.Linear(2048, 10).cuda()
opt = torch.optim.SGD(list(body.parameters()) + list(head.parameters()), lr=1e-3)
logged = []
t0 = time.time()
while time.time() - t0 < 3.0:
    x = torch.randn(2048, 1024, device="cuda")
    y = torch.randint(0, 10, (2048,), device="cuda")
    feats = body(x)
    loss = nn.functional.cross_entropy(head(feats), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    logged.append(feats.detach())  # the bug: 2048 x 2048 fp32 per step stays on the GPU
    time.sleep(0.03)
print("done", len(logged))
