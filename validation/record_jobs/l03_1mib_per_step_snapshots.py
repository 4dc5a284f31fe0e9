"""expect: leak. 1 MiB per step: a 'debug' snapshot of part of the embedding kept on the GPU each step."""
import torch
from _models import gpt, lm_loss, tokens

model = gpt(d=512, layers=2)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
snapshots = []
for step in range(700):
    idx = tokens(8, 128)
    loss = lm_loss(model(idx), idx)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    snapshots.append(model.emb.weight[:512].detach().clone())  # 512 x 512 fp32 = 1 MiB
print("done", step + 1, "steps", len(snapshots))
