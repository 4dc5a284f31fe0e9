"""expect: healthy. A 2 GiB replay buffer is allocated once, as 64 chunks of 32 MiB filled one after
another over ~0.6 s at the start (one source line adds many blocks, then never again), then a small
MLP trains for ~3 s sampling from it.
record: --history 20000"""
import time

import torch
from torch import nn

torch.manual_seed(0)
buffer = []
for _ in range(64):
    buffer.append(torch.randn(8 * 1024 * 1024, device="cuda"))  # 32 MiB each
    time.sleep(0.01)
model = nn.Sequential(nn.Linear(1024, 2048), nn.ReLU(), nn.Linear(2048, 10)).cuda()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
t0 = time.time()
while time.time() - t0 < 3.0:
    chunk = buffer[int(torch.randint(0, 64, ())) ]
    x = chunk[: 256 * 1024].view(256, 1024)
    loss = model(x).logsumexp(-1).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
torch.cuda.synchronize()
print("done", float(loss))
