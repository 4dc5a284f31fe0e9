"""expect: healthy. A DataLoader with 4 worker processes and pinned memory feeding a CNN."""
import time

import torch
from _models import cnn
from torch.utils.data import DataLoader, Dataset


class Synthetic(Dataset):
    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.randn(3, 96, 96, generator=g), i % 100


if __name__ == "__main__":
    model = cnn()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = DataLoader(Synthetic(), batch_size=64, num_workers=4, pin_memory=True, shuffle=True)
    t0, step = time.time(), 0
    for x, y in loader:
        x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        if time.time() - t0 > 20:
            break
    print("done", step, "steps")
