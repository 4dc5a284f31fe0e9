"""_co_tenants' new dismissal line is two adjacent literals of which only the first is an f-string: the user
sees a literal "({src})" in the evidence. BUG (low, cosmetic; shown whenever other_process has other evidence)."""

from oomdoctor.explain.rank import explain_text
from oomdoctor.facts.base import Fact, FactSet

GIB = 1 << 30
MSG = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 10.00 GiB. GPU 0 has a total capacity of "
       "79.10 GiB of which 0.50 GiB is free. Process 4242 has 30.00 GiB memory in use. Including non-PyTorch memory, "
       "this process has 48.00 GiB memory in use. Of the allocated memory 47.50 GiB is allocated by PyTorch, and "
       "10.00 MiB is reserved by PyTorch but unallocated.")


def test_no_unformatted_placeholder_in_evidence():
    facts = FactSet([
        Fact("sharing.processes", [{"gpu": 0, "pid": 4242, "used_bytes": 30 * GIB, "name": "python", "self": False},
                                   {"gpu": 1, "pid": 777, "used_bytes": 20 * GIB, "name": "python", "self": False}],
             "NVML"),
        Fact("driver.gpus", [{"index": i, "memory_total_bytes": 85_520_809_984} for i in range(2)], "NVML"),
        Fact("sharing.mig", [], "NVML"),
    ])
    ev = [e for h in explain_text([MSG], facts).hypotheses for e in h.evidence]
    assert not any("{src}" in e for e in ev), [e for e in ev if "{" in e]
