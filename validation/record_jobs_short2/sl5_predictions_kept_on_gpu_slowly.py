"""expect: leak. A 4-second inference loop that keeps every batch's class probabilities on the GPU
(4096 x 1000 fp32 = 16 MiB per batch, ~25 batches per second) for "later analysis". No markers, no
history."""
import time

import torch
from torch import nn

torch.manual_seed(0)
net = nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 1000)).cuda().eval()
probs = []
t0 = time.time()
with torch.no_grad():
    while time.time() - t0 < 4.0:
        probs.append(net(torch.randn(4096, 512, device="cuda")).softmax(-1))
        time.sleep(0.04)
torch.cuda.synchronize()
print("done", len(probs))
