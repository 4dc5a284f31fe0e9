"""expect: healthy. A short fine-tune: 30 steps of a 6-layer transformer classifier with AdamW (its
state appears at the first step), bf16 autocast, about 3 s.
record: --history 20000"""
import torch
from torch import nn

torch.manual_seed(0)
enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(768, 12, 3072, batch_first=True), 6).cuda()
head = nn.Linear(768, 5).cuda()
params = list(enc.parameters()) + list(head.parameters())
opt = torch.optim.AdamW(params, lr=1e-4)
for _ in range(30):
    x = torch.randn(32, 256, 768, device="cuda")
    y = torch.randint(0, 5, (32,), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = nn.functional.cross_entropy(head(enc(x).mean(1)), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
torch.cuda.synchronize()
print("done", loss.item())
