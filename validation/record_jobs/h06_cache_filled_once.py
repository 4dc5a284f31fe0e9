"""expect: healthy. A fixed 2 GiB feature cache filled once at step 15, then 135 more steps (issue 19:
this level shift was called a 574 MiB/s leak)."""
import torch
from _models import gpt, lm_loss, tokens

model = gpt(d=512, layers=6)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
cache = None
for step in range(150):
    if step == 15:
        cache = torch.empty(2 << 30, dtype=torch.uint8, device="cuda").fill_(1)  # e.g. a prefetched shard
    idx = tokens(16, 256)
    loss = lm_loss(model(idx), idx)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
print("done", step + 1, "steps", cache.numel())
