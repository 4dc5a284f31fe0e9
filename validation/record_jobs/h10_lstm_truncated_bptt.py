"""expect: healthy. An LSTM trained with truncated BPTT: the hidden state is carried over and detached."""
import time

import torch
from torch import nn

model = nn.LSTM(512, 1024, num_layers=2, batch_first=True).cuda()
head = nn.Linear(1024, 512).cuda()
opt = torch.optim.Adam(list(model.parameters()) + list(head.parameters()), lr=1e-3)
state = None
t0, step = time.time(), 0
while time.time() - t0 < 20:
    x = torch.randn(64, 64, 512, device="cuda")
    out, state = model(x, state)
    state = tuple(s.detach() for s in state)
    loss = nn.functional.mse_loss(head(out), x)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    step += 1
print("done", step, "steps")
