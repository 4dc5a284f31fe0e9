"""expect: healthy. A ~0.8B-parameter fp16 decoder built on the GPU layer by layer (memory rises for a
second or two while it loads), then 40 inference batches under torch.inference_mode(); the run ends in
a few seconds. No step markers, no allocation history."""
import torch
from torch import nn

torch.manual_seed(0)
d, layers = 2048, 16
blocks = nn.ModuleList()
for _ in range(layers):
    blocks.append(nn.TransformerEncoderLayer(d, 16, 4 * d, batch_first=True, dtype=torch.float16, device="cuda"))
head = nn.Linear(d, 32000, dtype=torch.float16, device="cuda")
with torch.inference_mode():
    for _ in range(40):
        x = torch.randn(8, 256, d, dtype=torch.float16, device="cuda")
        for b in blocks:
            x = b(x)
        logits = head(x[:, -1])
        _ = logits.argmax(-1).cpu()
print("done")
