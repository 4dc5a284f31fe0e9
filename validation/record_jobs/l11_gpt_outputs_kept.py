"""expect: leak. A 12-layer GPT whose whole outputs (logits with the graph) are kept every step."""
import torch
from _models import gpt, lm_loss, tokens

model = gpt(d=768, layers=12, heads=12)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
history = []
for step in range(60):
    idx = tokens(2, 256)
    logits = model(idx)
    loss = lm_loss(logits, idx)
    loss.backward(retain_graph=True)
    opt.step()
    opt.zero_grad(set_to_none=True)
    history.append(logits)  # the graph is kept with it
    if torch.cuda.memory_allocated() > 12 << 30:
        break
print("done", step + 1, "steps")
