"""expect: leak. An embedding-extraction loop keeps every batch's embeddings on the GPU (detached, so
no graph: 8 MiB per batch) in a list, ~300 batches over about 3 s. No markers, no history."""
import time

import torch
from torch import nn

torch.manual_seed(0)
enc = nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 2048)).cuda().eval()
kept = []
t0 = time.time()
with torch.no_grad():
    for _ in range(300):
        x = torch.randn(1024, 512, device="cuda")
        kept.append(enc(x))  # 1024 x 2048 fp32 = 8 MiB, never moved to the CPU
        time.sleep(0.01)
torch.cuda.synchronize()
print("done", len(kept), round(time.time() - t0, 1), "s")
