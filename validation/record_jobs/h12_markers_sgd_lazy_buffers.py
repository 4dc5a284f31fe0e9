"""expect: healthy. A CNN with step markers whose first steps allocate lazily (a LazyLinear head, the
optimizer created after the first forward), then 200 steady steps."""
import torch
from _models import cnn, images
from torch import nn

import oomdoctor

body = cnn(classes=512)
head = nn.LazyLinear(100).cuda()
x, y = images(96, 96)
head(body(x))  # materialises the lazy layer
opt = torch.optim.SGD(list(body.parameters()) + list(head.parameters()), lr=0.05, momentum=0.9)
for step in range(200):
    loss = nn.functional.cross_entropy(head(body(x)), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    oomdoctor.step()
print("done", step + 1, "steps")
