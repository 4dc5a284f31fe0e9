"""A healthy CNN step on CUDA fed by a DataLoader with 2 workers and pin_memory=True (pinned host buffers count in
RSS), 80 steps. Expected: no host-memory lead, no GPU growth."""
import time

import numpy as np
import torch

import oomdoctor


class Data(torch.utils.data.Dataset):
    def __init__(self):
        self.x = np.random.default_rng(0).standard_normal((2048, 3, 64, 64), dtype=np.float32)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return torch.from_numpy(self.x[i]), i % 10


if __name__ == "__main__":
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                                torch.nn.Flatten(), torch.nn.Linear(64, 10)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader(Data(), batch_size=128, num_workers=2, shuffle=True, pin_memory=True)
    step = 0
    while step < 80:
        for x, y in loader:
            x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            torch.cuda.synchronize()
            time.sleep(0.05)
            oomdoctor.step()
            step += 1
            if step == 80:
                break
