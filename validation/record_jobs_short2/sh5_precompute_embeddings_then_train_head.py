"""expect: healthy. Embeddings of 200 batches are computed once with a frozen encoder and kept on the
GPU (2 x 1024 x 1024 fp32 = 8 MiB each, ~1.6 GiB rising over the first second or two), then a linear
head trains on them for ~4 s with memory flat. No markers, no history."""
import time

import torch
from torch import nn

torch.manual_seed(0)
enc = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 1024)).cuda().eval()
feats, labels = [], []
with torch.no_grad():
    for _ in range(200):
        feats.append(enc(torch.randn(2048, 256, device="cuda")))
        labels.append(torch.randint(0, 10, (2048,), device="cuda"))
        time.sleep(0.005)
head = nn.Linear(1024, 10).cuda()
opt = torch.optim.SGD(head.parameters(), lr=0.1)
t0 = time.time()
while time.time() - t0 < 4.0:
    i = int(torch.randint(0, 200, ()))
    loss = nn.functional.cross_entropy(head(feats[i]), labels[i])
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done", loss.item())
