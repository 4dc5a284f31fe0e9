"""expect: healthy. A short evaluation (a few seconds) under torch.no_grad(), keeping only Python floats."""
import torch
from _models import gpt, lm_loss, tokens

model = gpt(d=768, layers=8, heads=12).eval()
losses = []
with torch.no_grad():
    for _ in range(120):
        idx = tokens(16, 512)
        losses.append(lm_loss(model(idx), idx).item())
print("done", len(losses), sum(losses) / len(losses))
