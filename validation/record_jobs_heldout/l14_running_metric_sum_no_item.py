"""expect: leak. A slow leak: a running "confidence" metric accumulated as a tensor
(`running = running + (probs * onehot).sum(1).mean()`) without .item() and outside torch.no_grad().
The metric's graph is never backpropagated, so each step's softmax output and one-hot target
(64 x 4096 fp32 each, ~2 MiB per step) stay alive through the growing sum; 300 steps (~600 MiB).
The input pipeline takes ~60 ms a batch (a sleep stands in for decoding and augmentation on the CPU),
so the leak is slow in time too: ~25 MiB/s over ~25 s. A plain loop without step markers.

GPU: `python -m oomdoctor record -- python l14_running_metric_sum_no_item.py`. `--cpu-smoke`: 3 tiny steps on the CPU.
"""
import sys
import time

import torch
from torch import nn

SMOKE = "--cpu-smoke" in sys.argv
DEV = "cpu" if SMOKE else "cuda"
torch.manual_seed(0)

batch, size, classes, w = (2, 32, 16, 8) if SMOKE else (64, 96, 4096, 48)
model = nn.Sequential(
    nn.Conv2d(3, w, 3, 2, 1), nn.BatchNorm2d(w), nn.ReLU(),
    nn.Conv2d(w, 2 * w, 3, 2, 1), nn.BatchNorm2d(2 * w), nn.ReLU(),
    nn.Conv2d(2 * w, 4 * w, 3, 2, 1), nn.BatchNorm2d(4 * w), nn.ReLU(),
    nn.Conv2d(4 * w, 8 * w, 3, 2, 1), nn.BatchNorm2d(8 * w), nn.ReLU(),
    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8 * w, classes)).to(DEV)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
running_conf = torch.zeros((), device=DEV)


def load_batch():
    time.sleep(0.0 if SMOKE else 0.06)  # stands in for JPEG decoding and augmentation on the CPU
    x = torch.randn(batch, 3, size, size)
    y = torch.randint(0, classes, (batch,))
    return x.to(DEV, non_blocking=True), y.to(DEV, non_blocking=True)


t0 = time.time()
step = 0
while step < (3 if SMOKE else 300) and time.time() - t0 < 60:
    x, y = load_batch()
    logits = model(x)
    loss = nn.functional.cross_entropy(logits, y)
    probs = logits.softmax(-1)
    onehot = nn.functional.one_hot(y, classes).float()
    running_conf = running_conf + (probs * onehot).sum(1).mean()  # should be .item() or under no_grad
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    step += 1
    if step % 50 == 0:
        print(f"step {step} loss {loss.item():.3f} mean confidence {running_conf.item() / step:.4f}", flush=True)
print("done", step, "steps")
