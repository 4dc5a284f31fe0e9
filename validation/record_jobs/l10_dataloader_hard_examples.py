"""expect: leak. DataLoader workers feed a CNN; 'hard examples' (every batch, in effect) are kept on the GPU."""
import torch
from _models import cnn
from torch.utils.data import DataLoader, Dataset


class Synthetic(Dataset):
    def __len__(self):
        return 20_000

    def __getitem__(self, i):
        return torch.randn(3, 96, 96), i % 100


if __name__ == "__main__":
    model = cnn()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    hard = []
    for step, (x, y) in enumerate(DataLoader(Synthetic(), batch_size=64, num_workers=2, pin_memory=True)):
        x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
        losses = torch.nn.functional.cross_entropy(model(x), y, reduction="none")
        losses.mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        hard.append(x[losses.detach() > 0])  # ~all of the batch: 7 MiB per step
        if step >= 250:
            break
    print("done", step + 1, "steps", len(hard))
