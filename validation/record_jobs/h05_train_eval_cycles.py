"""expect: healthy. Train 30 steps, then evaluate 15 batches of a bigger batch under torch.no_grad()."""
import time

import torch
from _models import cnn, images

model = cnn()
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
t0 = time.time()
accs = []
while time.time() - t0 < 25:
    model.train()
    for _ in range(30):
        x, y = images(64, 96)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    model.eval()
    with torch.no_grad():
        correct = 0
        for _ in range(15):
            x, y = images(256, 96)
            correct += (model(x).argmax(1) == y).sum().item()
    accs.append(correct)
print("done", len(accs), "epochs")
