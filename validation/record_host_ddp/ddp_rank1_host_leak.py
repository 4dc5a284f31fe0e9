"""Rank 1 keeps 16 MiB of host memory per step (a list of CPU tensors), rank 0 nothing; 120 steps.
Expected: a host-memory lead of about 16 MiB/step that names rank 1, none for rank 0; no GPU leak."""
import torch

from common import train

kept = []


def keep(rank, step):
    if rank == 1:
        kept.append(torch.ones(4 * 1024 * 1024))  # 16 MiB, written so the pages are resident


if __name__ == "__main__":
    train(120, on_step=keep)
