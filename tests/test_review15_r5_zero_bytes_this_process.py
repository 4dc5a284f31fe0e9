"""PyTorch >= 2.1 prints "this process has 0 bytes memory in use" where NVML gives no per-process figure
(common on cloud VMs and containers: GKE L4, AutoDL, RunPod; many public logs). The rules take 0 as the job's
own memory, so the whole card reads as memory "this job does not own":
- text only (torch_oom, change 1): other_process and, new this session, gpu_sharing_limit ("an MPS pinned-memory
  limit") are offered on a 35.6 GiB "hidden" gap although PyTorch itself allocated 34.94 GiB of it;
- with MPS (rules_by_kind.unaccounted -> _mps_weight, change 2): the 3.5 branch fires and the answer becomes
  gpu_sharing_limit 0.81 for a job that filled the card itself.
What the process holds is at least what PyTorch reserved (allocated + reserved-unallocated): the gap should
be computed with max(process, reserved). BUG (medium; the text-only part predates this session, the new
lead and the MPS flip are new)."""

from oomdoctor.explain.rank import explain_text
from oomdoctor.facts.base import Fact, FactSet

# from a public vLLM deployment guide (Google Cloud): the job's own weights and KV cache filled the card
MSG = ("[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. GPU 0 has a total capacity "
       "of 39.38 GiB of which 3.76 GiB is free. Including non-PyTorch memory, this process has 0 bytes memory in use. "
       "Of the allocated memory 34.94 GiB is allocated by PyTorch, and 175.15 MiB is reserved by PyTorch but "
       "unallocated.")


def test_text_only_no_hidden_memory_leads_on_a_zero_bytes_message():
    ex = explain_text([MSG])
    assert ex.hypotheses[0].category == "true_capacity"
    hidden = [e for h in ex.hypotheses for e in h.evidence if "this job does not own" in e or "MPS pinned" in e]
    assert not hidden, hidden


def test_mps_does_not_turn_a_zero_bytes_message_into_a_limit():
    facts = FactSet([
        Fact("sharing.processes", [], "NVML"),
        Fact("driver.gpus", [{"index": 0, "memory_total_bytes": 42_285_000_000}], "NVML"),
        Fact("sharing.mig", [], "NVML"),
        Fact("sharing.mps", {"pipe_directory": None, "pinned_device_mem_limit": None,
                             "active_thread_percentage": None, "control_present": True, "env": []}, "environment"),
    ])
    ex = explain_text([MSG], facts)
    assert ex.hypotheses[0].category == "true_capacity", [(h.category, round(h.confidence, 2)) for h in ex.hypotheses]


def test_unaccounted_treats_nvmls_not_available_sentinel_as_unknown():
    # WSL2 / WDDM: NVML's "not available" (2**64 bytes) printed as 17179869184.00 GiB (many public logs).
    # unaccounted() returns -16 EiB, i.e. "the message accounts for the whole card", which _co_tenants then uses
    # to drop every NVML co-tenant. LOW: NVML there rarely lists processes, but the helper should say None.
    from oomdoctor.explain.rules import unaccounted
    msg = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of "
           "8.00 GiB of which 0 bytes is free. Including non-PyTorch memory, this process has 17179869184.00 GiB "
           "memory in use. Of the allocated memory 11.32 GiB is allocated by PyTorch, and 216.03 MiB is reserved by "
           "PyTorch but unallocated.")
    gap = unaccounted(explain_text([msg]).events[0])
    assert gap is None or gap > -(1 << 40), gap
