"""expect: healthy. CNN with Adam and fp16 autocast + GradScaler (optimizer state appears at step 1)."""
import time

import torch
from _models import cnn, images

model = cnn(width=96)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
scaler = torch.amp.GradScaler("cuda")
t0, step = time.time(), 0
while time.time() - t0 < 20:
    x, y = images(96, 96)
    with torch.autocast("cuda", dtype=torch.float16):
        loss = torch.nn.functional.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    step += 1
print("done", step, "steps")
