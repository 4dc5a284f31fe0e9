"""expect: healthy. Gradient accumulation over 4 micro-batches, AdamW, running loss kept as a float."""
import time

import torch
from _models import gpt, lm_loss, tokens

model = gpt(d=512, layers=8)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
t0, step, running = time.time(), 0, 0.0
while time.time() - t0 < 25:
    for _ in range(4):
        idx = tokens(8, 512)
        loss = lm_loss(model(idx), idx) / 4
        loss.backward()
        running += loss.item()
    opt.step()
    opt.zero_grad(set_to_none=True)
    step += 1
print("done", step, "steps", running)
