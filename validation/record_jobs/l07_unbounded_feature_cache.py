"""expect: leak. A memo cache of features keyed by batch id that is never evicted (every id is new)."""
import time

import torch
from _models import gpt, lm_loss, tokens

model = gpt(d=512, layers=4)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
cache = {}
t0, step = time.time(), 0
while time.time() - t0 < 20:
    idx = tokens(16, 256)
    with torch.no_grad():
        cache[step] = model.emb(idx)  # 16 x 256 x 512 fp32 = 8 MiB, never evicted
    loss = lm_loss(model(idx), idx)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    step += 1
    if torch.cuda.memory_allocated() > 12 << 30:
        break
print("done", step, "steps", len(cache))
