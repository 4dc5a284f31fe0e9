"""Memory-relevant Xid codes (environment-facts.md section 9; numbers from nverror.h [NVERR]).

`kind` says what an Xid means for an OOM investigation: 'app' = a program error (illegal address,
faulted channel), not capacity; 'hardware' = GPU health; 'info' = monitor only. A genuine capacity OOM
produces no Xid at all (just cudaErrorMemoryAllocation = 2).
"""

from __future__ import annotations

from dataclasses import dataclass

SOURCE = "NVIDIA Xid catalog https://docs.nvidia.com/deploy/xid-errors/ [XIDCAT][XIDLEGACY]; nverror.h [NVERR]"


@dataclass(frozen=True)
class Xid:
    code: int
    mnemonic: str
    kind: str  # app | hardware | info
    meaning: str
    action: str


XIDS: dict[int, Xid] = {x.code: x for x in (
    Xid(13, "ROBUST_CHANNEL_GR_EXCEPTION", "app", "graphics/compute engine exception, usually an illegal instruction or address in the program", "restart the application; debug with compute-sanitizer"),
    Xid(31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "app", "GPU memory page fault (MMU fault): an illegal address from the program, a bug rather than OOM", "restart the application; run it under `compute-sanitizer` or with CUDA_LAUNCH_BLOCKING=1 to find the faulting kernel"),
    Xid(43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "app", "GPU stopped processing: a user program faulted and its channel was torn down; the GPU stays healthy", "restart the application"),
    Xid(48, "ROBUST_CHANNEL_GPU_ECC_DBE", "hardware", "uncorrectable double-bit ECC error in device memory; the program is killed (cudaErrorECCUncorrectable = 214)", "drain the node, reset the GPU (`nvidia-smi -r -i <gpu>`), check retired pages / remapped rows"),
    Xid(63, "INFOROM_PAGE_RETIREMENT_EVENT", "hardware", "a page was retired (pre-Ampere) or a row marked for remapping (Ampere+); activates after a reset", "reset the GPU when idle (`nvidia-smi -r -i <gpu>`) or reboot"),
    Xid(64, "INFOROM_PAGE_RETIREMENT_FAILURE", "hardware", "page retirement / row remap could not be recorded", "drain the node and contact the vendor (RMA candidate)"),
    Xid(79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "hardware", "the GPU is unreachable on PCIe; every CUDA call fails", "drain and reboot the node; check power, cooling and PCIe seating"),
    Xid(92, "EXCESSIVE_SBE_INTERRUPTS", "info", "high rate of correctable single-bit ECC errors", "monitor; plan a GPU check if it repeats"),
    Xid(94, "ROBUST_CHANNEL_CONTAINED_ERROR", "hardware", "contained ECC/poison error: only the affected program dies, the GPU stays usable", "restart the application; watch for repeats"),
    Xid(95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "hardware", "uncontained ECC error: every program on the GPU is affected", "drain the GPU and reset it (MIG: drain all instances first)"),
    Xid(119, "GSP_RPC_TIMEOUT", "hardware", "GSP firmware timed out", "reset the GPU; update the driver"),
    Xid(120, "GSP_ERROR", "hardware", "GSP firmware error", "reset the GPU; update the driver"),
)}
