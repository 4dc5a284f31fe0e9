"""expect: leak. GiB/s: every batch of augmented inputs (64 MiB) is kept on the GPU 'to re-use later'."""
import torch
from _models import cnn

model = cnn(width=16)
kept = []
for step in range(200):
    x = torch.randn(256, 3, 128, 128, device="cuda")  # 48 MiB
    x = torch.cat([x, x[:, :1]], 1)[:, :3] * 1.0 + torch.randn_like(x) * 0.01  # 'augmentation'
    kept.append(x)
    with torch.no_grad():
        model(x[:32])
    if torch.cuda.memory_allocated() > 12 << 30:
        break
torch.cuda.synchronize()
print("done", step + 1, "steps", len(kept))
