"""expect: leak. Issue 19: an evaluation loop without torch.no_grad() keeps 120 outputs with their
graphs; memory climbs by gigabytes in about a second and the script ends."""
import torch
from _models import gpt, tokens

model = gpt(d=512, layers=4).eval()
outputs = []
for _ in range(120):
    idx = tokens(4, 128)
    outputs.append(model(idx))  # the bug: no torch.no_grad(), and the outputs are kept
    if torch.cuda.memory_allocated() > 12 << 30:
        break
torch.cuda.synchronize()
print("done", len(outputs), "outputs")
