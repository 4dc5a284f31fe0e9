"""Host memory that grows over the first 5 steps (buffers sized on first use), then 55 flat steps. Expected: none."""
import time

import torch

import oomdoctor

buffers = []
for step in range(60):
    if step < 5:
        buffers.append(torch.ones(16 * 1024 * 1024))  # 64 MiB each
    x = torch.randn(128, 128) @ torch.randn(128, 128)
    time.sleep(0.05)
    oomdoctor.step()
