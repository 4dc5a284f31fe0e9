"""expect: leak. Streaming inference with an LSTM: the recurrent state is carried from chunk to chunk
without detach() (and without torch.no_grad()), so every chunk's graph and activations stay reachable
from the state and memory grows with the stream."""
import torch
from torch import nn

model = nn.LSTM(256, 1024, num_layers=2, batch_first=True).cuda()
head = nn.Linear(1024, 256).cuda()
state = None
outs = 0.0
for step in range(400):
    x = torch.randn(32, 32, 256, device="cuda")
    out, state = model(x, state)  # the bug: state keeps the graph of every earlier chunk
    outs += head(out[:, -1]).float().mean().item()
    if torch.cuda.memory_allocated() > 12 << 30:
        break
print("done", step + 1, "chunks", outs)
