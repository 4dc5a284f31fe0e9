"""Touches host memory 256 MiB per step (a list of CPU tensors) on a CUDA job, until something stops it; 400 steps at
most (100 GiB). Run inside a cgroup with a small memory.max, the kernel's OOM killer ends it with SIGKILL.
Expected there: `report` says host_oom with confidence high (the cgroup's oom_kill count rose; the RSS near the limit)."""
import time

import torch

import oomdoctor

if __name__ == "__main__":
    x = torch.ones(1024, 1024, device="cuda")
    kept = []
    for step in range(400):
        kept.append(torch.ones(64 * 1024 * 1024))  # 256 MiB, written
        x = x * 1.0
        time.sleep(0.05)
        oomdoctor.step()
