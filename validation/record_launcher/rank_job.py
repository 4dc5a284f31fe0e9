"""A 2-rank torchrun job on one GPU (gloo for the collective): `hog` makes rank 1 eat host memory from step 10;
`raise` makes rank 1 raise ValueError at step 10."""
import os
import sys
import time

import torch
import torch.distributed as dist

how = sys.argv[1]
dist.init_process_group("gloo")
rank = dist.get_rank()
dev = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: a smoke test off the GPU
x = torch.ones(64 << 20, device=dev)  # 256 MiB each on the GPU
hoard = []
for step in range(60):
    t = torch.ones(1)
    dist.all_reduce(t)
    print(f"rank {rank} step {step}", flush=True)
    if rank == 1 and how == "hog" and step == 9:
        with open("/proc/self/comm", "w") as f:  # as some PyTorch builds name their main thread: the kill line's name
            f.write("pt_main_thread")
    if rank == 1 and step >= 10:
        if how == "hog":
            for _ in range(64):
                hoard.append(bytearray(256 << 20))  # touched: bytearray zero-fills
        elif how == "raise":
            raise ValueError("rank 1 fails on purpose")
    time.sleep(0.3)
dist.destroy_process_group()
