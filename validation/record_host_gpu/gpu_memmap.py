"""Reads a 1.25 GiB memory-mapped dataset (np.memmap) front to back, 32 MiB per step onto the GPU, 40 steps. The
page cache pages it touches count in RSS (file-backed, reclaimable). Expected: the host-memory lead fires (the known
false lead that made it a lead and not a failure)."""
import os
import tempfile
import time

import numpy as np
import torch

import oomdoctor

if __name__ == "__main__":
    rows, width = 40 * 1024, 8192  # 40 steps x 1024 rows x 8192 float32 = 1.25 GiB
    path = os.path.join(tempfile.mkdtemp(), "data.f32")
    np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(rows, width))[:] = 1.0
    data = np.load(path, mmap_mode="r")
    w = torch.randn(width, 16, device="cuda")
    for step in range(40):
        x = torch.from_numpy(np.ascontiguousarray(data[step * 1024:(step + 1) * 1024])).cuda()
        (x @ w).sum().item()
        time.sleep(0.05)
        oomdoctor.step()
