"""/dev/shm and the DataLoader (environment-facts.md section 6).

DataLoader workers hand batches to the main process through shared memory in /dev/shm; a 64 MB tmpfs
(Docker's default and what containerd/CRI-O give a pod) overflows with a few image batches, the
worker dies of SIGBUS and PyTorch reports "Bus error ... out of shared memory".
"""

from __future__ import annotations

import re

DOCKER_DEFAULT_SHM = 64 * 1024**2  # --shm-size default 64m [MOBY29492]
K8S_DEFAULT_SHM = 64 * 1024**2  # containerd / CRI-O per-pod tmpfs [K8S28272][KB6014]
SMALL_SHM = 1024**3  # below this, a few workers x prefetch_factor x batch easily overflow
SOURCES = ("Docker --shm-size (default 64m) moby#29492 [MOBY29492]; k8s pod /dev/shm 64 MiB kubernetes#28272 "
           "[K8S28272]; torch/csrc/DataLoader.cpp SIGBUS handler [PTDL]")

REMEDY_DOCKER = "docker run --shm-size=8g … (or --ipc=host); compose: `shm_size: \"8gb\"` or `ipc: host`"
REMEDY_K8S = ("mount a memory emptyDir at /dev/shm: volumes: [{name: dshm, emptyDir: {medium: Memory, sizeLimit: 8Gi}}] "
              "+ volumeMounts: [{name: dshm, mountPath: /dev/shm}] (it counts toward the pod memory limit)")

# Log lines that mean "shared memory ran out" [PTDL][PTMAP][SHMSEEN].
SHM_PATTERNS: tuple[re.Pattern[str], ...] = tuple(re.compile(p, re.I) for p in (
    r"killed by signal: Bus error",
    r"Unexpected bus error encountered in worker",
    r"out of shared memory",
    r"unable to (?:allocate shared memory\(shm\)|write to file </torch_|mmap \d+ bytes from file </torch_)",
    r"No space left on device \(28\)",
))
FD_PATTERN = re.compile(r"Too many open files", re.I)


def is_shm_error(text: str) -> bool:
    return any(p.search(text) for p in SHM_PATTERNS)
