"""expect: leak. Logits collected for an epoch-end metric, detached but kept on the GPU (bf16 autocast)."""
import torch
from _models import gpt, lm_loss, tokens

model = gpt(d=512, layers=4)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
all_logits = []
for step in range(250):
    idx = tokens(8, 256)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(idx)
        loss = lm_loss(logits, idx)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    all_logits.append(logits.detach())  # 8 x 256 x 8192 bf16 = 32 MiB per step
    if torch.cuda.memory_allocated() > 12 << 30:
        break
print("done", step + 1, "steps")
