"""expect: leak. A forward hook registered "for feature visualisation" on a ResNet-style CNN's first
stage appends that stage's output to a global list every forward and is never removed: 32 x 64 x
32 x 32 fp32 = 8 MiB per step, 250 steps (~2 GiB). A plain loop without step markers, recorded with
allocation history (so the verdict can name the hook).

record: --history
GPU: `python -m oomdoctor record --history 20000 -- python l13_hook_appends_activations.py`. `--cpu-smoke`: 3 tiny steps on the CPU.
"""
import sys
import time

import torch
from torch import nn

SMOKE = "--cpu-smoke" in sys.argv
DEV = "cpu" if SMOKE else "cuda"
torch.manual_seed(0)

ACTIVATIONS = []


def keep_activation(module, inputs, output):
    ACTIVATIONS.append(output)


class Res(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(),
                                  nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False), nn.BatchNorm2d(c_out))
        self.skip = nn.Conv2d(c_in, c_out, 1, stride, bias=False) if (stride != 1 or c_in != c_out) else nn.Identity()

    def forward(self, x):
        return torch.relu(self.body(x) + self.skip(x))


def stage(c_in: int, c_out: int, stride: int) -> nn.Module:
    return nn.Sequential(Res(c_in, c_out, stride), Res(c_out, c_out, 1))


w = 8 if SMOKE else 64
model = nn.Sequential(nn.Conv2d(3, w, 7, 2, 3, bias=False), nn.BatchNorm2d(w), nn.ReLU(), nn.MaxPool2d(3, 2, 1),
                      stage(w, w, 1), stage(w, 2 * w, 2), stage(2 * w, 4 * w, 2), stage(4 * w, 8 * w, 2),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8 * w, 200)).to(DEV)
model[4].register_forward_hook(keep_activation)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
batch, size = (2, 32) if SMOKE else (32, 128)
t0 = time.time()
step = 0
while step < (3 if SMOKE else 250) and time.time() - t0 < 60:
    x = torch.randn(batch, 3, size, size, device=DEV)
    y = torch.randint(0, 200, (batch,), device=DEV)
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    step += 1
    if step % 50 == 0:
        print(f"step {step} loss {loss.item():.3f} kept {len(ACTIVATIONS)} activations", flush=True)
print("done", step, "steps", len(ACTIVATIONS), "activations kept")
