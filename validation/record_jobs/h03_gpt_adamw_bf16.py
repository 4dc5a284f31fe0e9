"""expect: healthy. A 6-layer GPT with AdamW under bf16 autocast: AdamW's state (2x the parameters)
appears at the first step, the case an earlier version called a leak."""
import time

import torch
from _models import gpt, lm_loss, tokens

model = gpt(d=768, layers=8, heads=12)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
t0, step = time.time(), 0
while time.time() - t0 < 25:
    idx = tokens(16, 512)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = lm_loss(model(idx), idx)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    step += 1
print("done", step, "steps")
