"""A healthy loop over a DataLoader with two workers (a map dataset of numpy arrays), 60 steps. Expected: none."""
import time

import numpy as np
import torch

import oomdoctor


class Data(torch.utils.data.Dataset):
    def __init__(self):
        self.x = np.random.default_rng(0).standard_normal((4096, 256), dtype=np.float32)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return torch.from_numpy(self.x[i]), i % 10


if __name__ == "__main__":
    model = torch.nn.Linear(256, 10)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader(Data(), batch_size=64, num_workers=2, shuffle=True)
    for step, (x, y) in enumerate(loader):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(0.05)
        oomdoctor.step()
        if step == 59:
            break
