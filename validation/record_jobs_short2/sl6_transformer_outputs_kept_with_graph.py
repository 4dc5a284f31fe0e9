"""expect: leak. A transformer evaluated without torch.no_grad() for about 3 s; each batch's output is
kept in a list with its graph, so the activations of every batch stay alive.
record: --history 20000"""
import time

import torch
from torch import nn

torch.manual_seed(0)
model = nn.TransformerEncoder(nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True), 4).cuda().eval()
outs = []
t0 = time.time()
while time.time() - t0 < 3.0 and torch.cuda.memory_allocated() < (14 << 30):
    outs.append(model(torch.randn(8, 256, 512, device="cuda")))
    torch.cuda.synchronize()
    time.sleep(0.02)
print("done", len(outs))
