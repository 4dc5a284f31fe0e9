"""expect: healthy. A 3-second evaluation under torch.no_grad() with a different sequence length every
batch (the allocator caches blocks of many sizes), keeping only Python floats.
record: --history 20000"""
import time

import torch
from torch import nn

torch.manual_seed(0)
model = nn.TransformerEncoder(nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True), 4).cuda().eval()
scores = []
t0 = time.time()
with torch.no_grad():
    while time.time() - t0 < 3.0:
        seq = int(torch.randint(32, 512, ()))
        scores.append(model(torch.randn(16, seq, 512, device="cuda")).mean().item())
print("done", len(scores))
