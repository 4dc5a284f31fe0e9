"""expect: healthy. Variable sequence lengths (64..1024 at random): memory goes up and down."""
import random
import time

import torch
from _models import gpt, lm_loss, tokens

random.seed(0)
model = gpt(d=512, layers=6)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
t0, step = time.time(), 0
while time.time() - t0 < 25:
    idx = tokens(16, random.randint(64, 1024))
    loss = lm_loss(model(idx), idx)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    step += 1
print("done", step, "steps")
