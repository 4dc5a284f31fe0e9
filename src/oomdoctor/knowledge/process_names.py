"""The names a process of a PyTorch job goes by in the kernel's log.

The kernel's OOM-kill line prints the victim's `comm`: the name of its main thread, in a 16-byte field
(TASK_COMM_LEN), so 15 characters at most. A rename of the main thread is a rename of the process there:
PyTorch names threads with pthread_setname_np (`pt_main_thread` for the main thread in some versions,
`pt_data_worker` in a DataLoader worker's, `pt_elastic` in torchrun's agent), setproctitle renames the
process, and a name read through psutil may be the longer one of the command line.
"""

from __future__ import annotations

import re

COMM_LEN = 15  # TASK_COMM_LEN (16) less the terminating NUL

# Names PyTorch gives its threads (torch.multiprocessing._set_thread_name, c10::setThreadName), from the
# sources of torch 2.x: the main thread of a process shows one of them as the process's name. Each is 15
# characters or fewer, so the kernel prints it whole.
_TORCH = re.compile(r"pt_(?:main_thread|data_worker|data_pin|elastic|dist_engine|gloo_runloop|tcpstore|"
                    r"workerserver|autograd_\d+)")


def comm(name: str) -> str:
    """A name as the kernel keeps it: its first 15 characters."""
    return name[:COMM_LEN]


def same_comm(a: str, b: str) -> bool:
    return comm(a) == comm(b)


def is_torch_name(name: str) -> bool:
    """True for a name PyTorch gives its threads (cut as the kernel cuts it)."""
    return _TORCH.fullmatch(comm(name)) is not None
