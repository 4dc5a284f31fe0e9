"""A training run that leaks: each step also scores a validation batch WITHOUT torch.no_grad() and keeps
the loss tensor in a list, so every step's validation graph (and its saved activations) stays alive.

Run under `oomdoctor record -- python validation/record_leak.py`; the report must say leak_in_code.
"""

import sys

import torch
import torchvision

import oomdoctor

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 40
dev = "cuda"
model = torchvision.models.resnet18(num_classes=100).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x, y = torch.randn(32, 3, 224, 224, device=dev), torch.randint(0, 100, (32,), device=dev)
xv, yv = torch.randn(8, 3, 224, 224, device=dev), torch.randint(0, 100, (8,), device=dev)
val_losses = []
for _ in range(steps):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    val_loss = torch.nn.functional.cross_entropy(model(xv), yv)  # the bug: no torch.no_grad()
    val_losses.append(val_loss)  # ... and the tensor (with its graph) is kept
    oomdoctor.step()
torch.cuda.synchronize()
print(f"done: {steps} steps, allocated {torch.cuda.memory_allocated() / 2**30:.2f} GiB")
