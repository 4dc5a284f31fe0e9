"""A dataset that caches each sample on first use (8 MiB each): epoch 1 (40 steps) fills the cache, epoch 2 (40
steps) reads it. Host memory rises by 320 MiB, then stays. Expected: no host-memory verdict (a cache, not a leak)."""
import time

import torch

import oomdoctor

cache = {}


def sample(i):
    if i not in cache:
        cache[i] = torch.randn(2 * 1024 * 1024)  # 8 MiB
    return cache[i]


for epoch in range(2):
    for i in range(40):
        s = sample(i).sum()
        time.sleep(0.05)
        oomdoctor.step()
