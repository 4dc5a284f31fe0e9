"""A run that fragments: a cache keeps one in three mid-sized activations (5-7 MiB, which the caching
allocator carves three to a 20 MiB segment), so most segments stay partly used and cannot be returned;
later one large buffer does not fit although reserved-but-free memory exceeds it.

The allocator is capped at 4 GiB with set_per_process_memory_fraction so the run is quick and does not
depend on the GPU's size. Expected verdict: fragmentation.
"""

import random

import torch

import oomdoctor

GiB, MiB = 1 << 30, 1 << 20
dev = torch.device("cuda")
total = torch.cuda.get_device_properties(dev).total_memory
torch.cuda.set_per_process_memory_fraction(4 * GiB / total)
random.seed(0)
cache = []

for _ in range(1, 4):  # steps 1-3: variable-size activations, one in three cached
    acts = [torch.empty(random.randint(5 * MiB, 7 * MiB) // 4, device=dev) for _ in range(195)]
    cache += acts[::3]
    del acts
    oomdoctor.step()
print(f"allocated {torch.cuda.memory_allocated() / GiB:.2f} GiB, reserved {torch.cuda.memory_reserved() / GiB:.2f} GiB")
for _ in range(4, 7):  # steps 4-6: ordinary work that fits in the holes
    tmp = [torch.empty(6 * MiB // 4, device=dev) for _ in range(20)]
    del tmp
    oomdoctor.step()
big = torch.empty(GiB // 4, device=dev)  # 1 GiB in one block: does not fit although > 2 GiB is free
print("unexpected: the large buffer fit")
