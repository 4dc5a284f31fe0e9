"""expect: leak. Every 10th step a prediction on 8 samples is logged without torch.no_grad() (its graph
is kept): a staircase, over a long run."""
import torch
from _models import cnn, images

model = cnn(width=32)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
log = []
for step in range(800):
    x, y = images(32, 64)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if step % 10 == 0:
        log.append(model(x[:8]))  # the bug: no torch.no_grad(), the output (and graph) is kept
    if torch.cuda.memory_allocated() > 12 << 30:
        break
print("done", step + 1, "steps", len(log))
