"""expect: leak. A CNN evaluated without torch.no_grad(); every batch's logits are kept in a list with
their autograd graphs (the activations stay alive): memory climbs fast for ~2 s and the script ends.
record: --history 20000"""
import torch
from torch import nn

torch.manual_seed(0)
net = nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), nn.ReLU(), nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(),
                    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 100)).cuda().eval()
all_logits = []
for _ in range(60):
    x = torch.randn(32, 3, 96, 96, device="cuda")
    all_logits.append(net(x))  # the bug: no no_grad, and the graph-carrying logits are kept
    if torch.cuda.memory_allocated() > 14 << 30:
        break
torch.cuda.synchronize()
print("done", len(all_logits))
