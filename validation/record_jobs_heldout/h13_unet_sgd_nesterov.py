"""expect: healthy. A small UNet (encoder/decoder with skip connections, BatchNorm) trained for
segmentation with SGD (momentum 0.9, Nesterov, weight decay) and a StepLR schedule; fixed shapes,
a plain training loop without step markers, about 25 s.

GPU: `python -m oomdoctor record -- python h13_unet_sgd_nesterov.py`. `--cpu-smoke`: 3 tiny steps on the CPU.
"""
import sys
import time

import torch
from torch import nn

SMOKE = "--cpu-smoke" in sys.argv
DEV = "cpu" if SMOKE else "cuda"
torch.manual_seed(0)


def conv_block(c_in: int, c_out: int) -> nn.Module:
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(inplace=True),
                         nn.Conv2d(c_out, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(inplace=True))


class UNet(nn.Module):
    def __init__(self, c_in: int = 3, classes: int = 8, w: int = 32):
        super().__init__()
        chans = [w, 2 * w, 4 * w, 8 * w]
        self.downs = nn.ModuleList()
        c = c_in
        for ch in chans:
            self.downs.append(conv_block(c, ch))
            c = ch
        self.pool = nn.MaxPool2d(2)
        self.mid = conv_block(c, 2 * c)
        c = 2 * c
        self.ups = nn.ModuleList()
        self.dec = nn.ModuleList()
        for ch in reversed(chans):
            self.ups.append(nn.ConvTranspose2d(c, ch, 2, stride=2))
            self.dec.append(conv_block(2 * ch, ch))
            c = ch
        self.out = nn.Conv2d(c, classes, 1)

    def forward(self, x):
        skips = []
        for down in self.downs:
            x = down(x)
            skips.append(x)
            x = self.pool(x)
        x = self.mid(x)
        for up, dec, skip in zip(self.ups, self.dec, reversed(skips)):
            x = dec(torch.cat([up(x), skip], dim=1))
        return self.out(x)


batch, size, classes = (2, 32, 8) if SMOKE else (16, 128, 8)
model = UNet(classes=classes, w=8 if SMOKE else 32).to(DEV)
opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9, nesterov=True, weight_decay=1e-4)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=200, gamma=0.5)
t0 = time.time()
step = 0
while step < (3 if SMOKE else 5000) and time.time() - t0 < 25:
    x = torch.randn(batch, 3, size, size, device=DEV)
    y = torch.randint(0, classes, (batch, size, size), device=DEV)
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    sched.step()
    step += 1
    if step % 100 == 0:
        print(f"step {step} loss {loss.item():.3f}", flush=True)
print("done", step, "steps")
