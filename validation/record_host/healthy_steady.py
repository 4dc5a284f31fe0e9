"""A healthy CPU training loop: an MLP, a fixed batch, 60 steps. Expected: no host-memory verdict."""
import time

import torch

import oomdoctor

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 10))
opt = torch.optim.AdamW(model.parameters())
for step in range(60):
    x, y = torch.randn(256, 512), torch.randint(0, 10, (256,))
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    time.sleep(0.05)
    oomdoctor.step()
