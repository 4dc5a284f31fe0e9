"""expect: leak. Under an 8 GiB cap (set_per_process_memory_fraction), a training loop keeps each
step's output with its graph in a list ("for logging") and runs out of memory after ~2 s. No markers,
no history; the job dies with CUDA OOM.
dies: oom"""
import time

import torch
from torch import nn

torch.manual_seed(0)
total = torch.cuda.get_device_properties(0).total_memory
torch.cuda.set_per_process_memory_fraction((8 << 30) / total)
net = nn.Sequential(*[nn.Sequential(nn.Linear(2048, 2048), nn.GELU()) for _ in range(4)]).cuda()
opt = torch.optim.SGD(net.parameters(), lr=1e-3)
history = []
while True:
    x = torch.randn(2048, 2048, device="cuda")
    out = net(x)
    loss = out.square().mean()
    opt.zero_grad()
    loss.backward(retain_graph=True)
    opt.step()
    history.append(out)  # the bug: keeps the graph's activations alive (~64 MiB per step)
    time.sleep(0.01)
