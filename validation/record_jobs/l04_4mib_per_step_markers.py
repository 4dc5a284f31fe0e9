"""expect: leak. 4 MiB per step (a slow leak, issue 19's case), with oomdoctor.step() markers:
features kept for a later t-SNE plot, detached but never moved off the GPU."""
import torch
from _models import cnn, images

import oomdoctor

model = cnn(width=32, classes=16384)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
feats = []
for step in range(300):
    x, y = images(64, 64, classes=16384)
    out = model(x)
    loss = torch.nn.functional.cross_entropy(out, y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    feats.append(out.detach())  # 64 x 16384 fp32 = 4 MiB
    oomdoctor.step()
print("done", step + 1, "steps", len(feats))
