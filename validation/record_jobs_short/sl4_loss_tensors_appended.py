"""expect: leak. A short training run (40 steps, ~4 s) that appends the loss tensor (not .item()) to a
list and backpropagates with retain_graph=True, so each step's activations stay alive.
record: --history 20000"""
import torch
from torch import nn

torch.manual_seed(0)
net = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 10)).cuda()
opt = torch.optim.SGD(net.parameters(), lr=1e-3)
losses = []
for _ in range(40):
    x = torch.randn(2048, 1024, device="cuda")
    y = torch.randint(0, 10, (2048,), device="cuda")
    loss = nn.functional.cross_entropy(net(x), y)
    opt.zero_grad()
    loss.backward(retain_graph=True)
    opt.step()
    losses.append(loss)  # the bug: the tensor keeps its graph
torch.cuda.synchronize()
print("done", sum(float(v) for v in losses) / len(losses))
