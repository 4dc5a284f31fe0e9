"""Keeps each step's logits on the host (`.detach().cpu()`, 32 MiB per step), 40 steps, a common way to collect
predictions. GPU memory stays flat. Expected: the host-memory lead (about 32 MiB/step)."""
import time

import torch

import oomdoctor

if __name__ == "__main__":
    model = torch.nn.Linear(1024, 8192).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    kept = []
    for step in range(40):
        x = torch.randn(1024, 1024, device="cuda")
        out = model(x)
        loss = out.float().pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        kept.append(out.detach().cpu())  # 1024 x 8192 float32 = 32 MiB
        time.sleep(0.05)
        oomdoctor.step()
