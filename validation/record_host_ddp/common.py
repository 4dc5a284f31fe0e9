"""Shared set-up of the DDP jobs: NCCL over the GPUs of one host, one GPU per rank, a small MLP fed by a DataLoader
with two workers and pinned memory (the host memory of a real input pipeline), one `oomdoctor.step()` per step."""
import os
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

import oomdoctor


class Random(Dataset):
    def __len__(self):
        return 10**6

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.randn(4096, generator=g), torch.randint(0, 10, (), generator=g)


def train(steps: int, on_step=None, sleep: float = 0.0):
    gpu = torch.cuda.is_available()  # a CPU (gloo) run only to try the scripts before a device run
    dist.init_process_group("nccl" if gpu else "gloo")
    rank = dist.get_rank()
    dev = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if gpu else torch.device("cpu")
    if gpu:
        torch.cuda.set_device(dev)
    model = torch.nn.Sequential(torch.nn.Linear(4096, 8192), torch.nn.ReLU(), torch.nn.Linear(8192, 10)).to(dev)
    model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    loader = DataLoader(Random(), batch_size=256, num_workers=2, pin_memory=gpu)
    it = iter(loader)
    for step in range(steps):
        x, y = next(it)
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if on_step is not None:
            on_step(rank, step)
        if sleep:
            if gpu:
                torch.cuda.synchronize()
            time.sleep(sleep)
        oomdoctor.step()
    dist.barrier()
    dist.destroy_process_group()
