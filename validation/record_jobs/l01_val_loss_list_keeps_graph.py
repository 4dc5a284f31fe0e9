"""expect: leak. Each step also scores a validation batch without torch.no_grad() and keeps the loss
tensor: every step's validation graph (and its saved activations) stays alive. (A training loss kept
after backward() holds only a scalar: backward frees the saved activations.)"""
import torch
from _models import cnn, images

model = cnn(width=32)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
xv, yv = images(8, 64)
val_losses = []
for step in range(400):
    x, y = images(32, 64)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    val_losses.append(torch.nn.functional.cross_entropy(model(xv), yv))  # the bug
    if torch.cuda.memory_allocated() > 12 << 30:
        break
print("done", step + 1, "steps", torch.stack(val_losses).mean().item())
