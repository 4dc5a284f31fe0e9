"""Keeps each step's logits on the GPU (32 MiB per step, the classic leak), 40 steps. Host memory stays flat.
Expected: the GPU-memory leak finding, not the host-memory lead."""
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
        kept.append(out.detach())  # stays on the GPU
        time.sleep(0.05)
        oomdoctor.step()
