"""expect: healthy. A nearest-neighbour index built once on the GPU from 400 chunks of embeddings
(grown with torch.cat, ~0.8 GiB, over about a second), then queried for ~3 s with memory flat.
No markers, no history."""
import time

import torch

torch.manual_seed(0)
index = torch.empty(0, 512, device="cuda")
for _ in range(400):
    index = torch.cat([index, torch.nn.functional.normalize(torch.randn(1024, 512, device="cuda"), dim=-1)])
t0 = time.time()
hits = 0
while time.time() - t0 < 3.0:
    q = torch.nn.functional.normalize(torch.randn(256, 512, device="cuda"), dim=-1)
    hits += int((q @ index.T).topk(5, dim=-1).indices[0, 0])
print("done", index.shape[0], hits)
