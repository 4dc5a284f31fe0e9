"""Host memory that grows 32 MiB per step for 40 steps (a list of CPU tensors kept). Expected: the host-memory verdict."""
import torch, time, oomdoctor
keep = []
for step in range(40):
    keep.append(torch.ones(8*1024*1024))  # 32 MiB/step host
    time.sleep(0.1)
    oomdoctor.step()
print("done")
