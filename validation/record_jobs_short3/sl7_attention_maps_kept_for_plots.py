"""expect: leak. An evaluation loop keeps each batch's attention map (8 x 16 x 256 x 256 fp32 = 32 MiB)
on the GPU "to plot later", about 10 batches per second for 3 s. No markers, no history."""
import time

import torch

torch.manual_seed(0)
maps = []
t0 = time.time()
with torch.no_grad():
    while time.time() - t0 < 3.0:
        q = torch.randn(8, 16, 256, 64, device="cuda")
        k = torch.randn(8, 16, 256, 64, device="cuda")
        maps.append(torch.softmax(q @ k.transpose(-1, -2) / 8.0, dim=-1))
        time.sleep(0.08)
torch.cuda.synchronize()
print("done", len(maps))
