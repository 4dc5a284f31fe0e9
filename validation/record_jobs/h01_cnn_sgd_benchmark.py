"""expect: healthy. A ResNet-18-like CNN, SGD with momentum, cudnn.benchmark (autotuning in the first steps)."""
import time

import torch
from _models import cnn, images

torch.backends.cudnn.benchmark = True
model = cnn()
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
x, y = images(128, 96)
t0 = time.time()
step = 0
while time.time() - t0 < 20:
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    step += 1
print("done", step, "steps, last loss", loss.item())
