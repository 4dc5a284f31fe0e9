"""A run that fragments: a cache keeps one in three 6 MiB activations. The caching allocator carves
6 MiB requests three to a 20 MiB segment, so every segment keeps one live block and cannot be
returned, with a 14 MiB hole beside it. Ordinary later steps fit in the holes; then one 1 GiB buffer
does not fit anywhere, although more than 2 GiB is reserved and free.

The allocator is capped at 4 GiB (set_per_process_memory_fraction) so the run is quick and does not
depend on the GPU's size. Expected verdict: fragmentation.
"""

import torch

import oomdoctor

GiB, MiB = 1 << 30, 1 << 20
dev = torch.device("cuda")
total = torch.cuda.get_device_properties(dev).total_memory
torch.cuda.set_per_process_memory_fraction(4 * GiB / total)
cache = []
acts = [torch.empty(6 * MiB // 4, device=dev) for _ in range(3 * 190)]  # step 1: 190 segments
cache += acts[::3]
del acts
oomdoctor.step()
print(f"allocated {torch.cuda.memory_allocated() / GiB:.2f} GiB, reserved {torch.cuda.memory_reserved() / GiB:.2f} GiB",
      flush=True)
for _ in range(4):  # steps 2-5: ordinary work that fits in the holes
    tmp = [torch.empty(6 * MiB // 4, device=dev) for _ in range(40)]
    del tmp
    oomdoctor.step()
big = torch.empty(GiB // 4, device=dev)  # 1 GiB in one block
print("unexpected: the large buffer fit")
