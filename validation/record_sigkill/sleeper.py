"""A healthy CUDA job that steps slowly; killed from outside with `kill -9` (as a user, a preemption or a time limit
would). Expected: `report` names host memory only as one possible cause (confidence low), with how to check."""
import time

import torch

import oomdoctor

if __name__ == "__main__":
    x = torch.ones(1024, 1024, device="cuda")
    for step in range(600):
        x = x * 1.0
        time.sleep(0.05)
        oomdoctor.step()
