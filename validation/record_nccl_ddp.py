"""Two-rank DDP training over NCCL where only rank 1 leaks (it keeps every loss with its graph).

Run under `oomdoctor record -- torchrun --standalone --nproc_per_node=2 validation/record_nccl_ddp.py`:
the report must show one timeline per rank, merged, and flag the leak on rank 1 only.
"""

import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import oomdoctor

dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 4096)).cuda())
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
kept = []
for step in range(40):
    x = torch.randn(512, 4096, device="cuda")
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if rank == 1:
        # the classic leak: an activation-sized tensor that still holds its graph
        kept.append(model(x) * 1.0)
    oomdoctor.step()
dist.barrier()
print(f"rank {rank} done, peak reserved {torch.cuda.max_memory_reserved() / 2**30:.2f} GiB", flush=True)
dist.destroy_process_group()
