"""Each check, fired by a FactSet built for it, and silent (or info) where the rule does not apply."""

from __future__ import annotations

import pytest

import oomdoctor.checks.all  # noqa: F401
from builders import DROP, UNAVAILABLE, GiB, MiB, a100, log_events, make_facts
from oomdoctor.checks.registry import CHECKS

# (check id, overrides, expected severity, expected category or None, text expected in the title)
FIRING = [
    ("DRV001", {"driver__nvml_error": "Driver/library version mismatch"}, "critical", "context_or_driver", "mismatch"),
    ("DRV001", {"driver__nvml_error": "NVML Shared Library Not Found"}, "info", None, "not usable"),
    ("DRV002", {"driver__version": "570.124.06", "kernel__release": "4.4.0-210-generic"}, "critical", "context_or_driver", "floor 4.15"),
    ("DRV003", {"driver__version": "550.54.14", "kernel__release": "4.4.0-210-generic"}, "error", "context_or_driver", "older than every non-EL7 kernel CUDA 12.4"),
    ("DRV003", {"driver__version": "570.124.06", "kernel__release": "4.9.0-13-amd64"}, "error", "context_or_driver", "older than every kernel CUDA 12.8"),
    ("DRV003", {"driver__version": "470.82.01", "cuda__driver_max": "11.4", "cuda__torch_runtime": "11.3",
                "kernel__release": "3.10.0-1160.el7.x86_64"}, "info", None, "validated for CUDA 11.4"),
    ("DRV004", {"driver__xid_events": [{"code": 31, "pci": "0000:01:00", "pid": 12, "text": "MMU Fault"}]}, "warning", "not_oom", "Xid 31"),
    ("DRV004", {"driver__xid_events": [{"code": 79, "text": "GPU has fallen off the bus"}]}, "critical", "context_or_driver", "Xid 79"),
    ("DRV004", {"driver__xid_events": [{"code": 48, "text": "DBE"}]}, "error", "not_oom", "Xid 48"),
    ("DRV004", {"driver__xid_events": [{"code": 92, "text": "SBE"}]}, "info", None, "Xid 92"),
    ("DRV005", {"driver__gpus": [a100(remapped_pending=True)]}, "error", "context_or_driver", "pending"),
    ("DRV005", {"driver__gpus": [a100(remapped_failure=True)]}, "critical", "not_oom", "remapping failed"),
    ("DRV006", {"driver__gpus": [a100(ecc_uncorrected=3)]}, "error", "not_oom", "3 uncorrectable"),
    ("DRV007", {"driver__gpus": [a100(persistence_mode="Disabled")]}, "info", None, "Persistence mode is off"),
    ("DRV008", {"sharing__processes": [{"gpu": 0, "pid": 5, "used_bytes": 600 * MiB, "name": "python"}]}, "error", "context_or_driver", "while 1 process"),
    ("DRV008", {"sharing__hami": {"memory_limit": "8g"}}, "warning", "context_or_driver", "hami NVML hook"),
    ("DRV009", {"driver__nvrm_errors": ["NVRM: RmInitAdapter failed! (0x26:0x56:1474)"]}, "error", "context_or_driver", "RmInitAdapter"),
    ("DRV009", {"driver__nvrm_errors": ["nvidia-uvm: uvm_pmm_gpu.c:2933 devmem_alloc_pagemap request_free_mem_region() err -34"]}, "error", "context_or_driver", "KASLR"),
    ("DRV010", {"driver__gpus": [a100(compute_mode="Prohibited")]}, "error", "context_or_driver", "no process may"),
    ("CUDA001", {"cuda__torch_runtime": "13.0"}, "error", "context_or_driver", "too old"),
    ("CUDA001", {"driver__version": "535.129.03", "cuda__driver_max": "12.2", "cuda__torch_runtime": "12.8"}, "warning", "context_or_driver", "minor version compatibility"),
    ("CUDA002", {"cuda__image_toolkit": "13.0.1"}, "warning", "context_or_driver", "too old"),
    ("CUDA003", {"cuda__device_capabilities": ["6.1"]}, "error", "not_oom", "6.1"),
    ("CUDA003", {"cuda__arch_list": DROP, "torch__version": "2.9.0+cu130", "cuda__device_capabilities": ["7.0"]}, "error", "not_oom", "7.0"),
    ("CUDA004", {"cuda__compat_libs": True, "driver__gpus": [a100(name="NVIDIA GeForce RTX 4090")]}, "warning", "context_or_driver", "RTX 4090"),
    ("CUDA005", {"cuda__module_loading": "EAGER"}, "warning", "true_capacity", "EAGER"),
    ("RES001", {"cgroup__oom_kill": 1}, "error", "host_oom", "OOM-killed 1"),
    ("RES001", {"cgroup__oom_events": 4}, "warning", "host_oom", "4 time"),
    ("RES002", {"cgroup__memory_limit_bytes": 16 * GiB, "cgroup__memory_usage_bytes": 15 * GiB}, "warning", "host_oom", "94%"),
    ("RES003", {"kernel__oom_kills": [{"pid": 77, "comm": "python", "anon_rss_kb": 100000, "shmem_rss_kb": 9000000,
                                       "memcg": "/kubepods/x", "line": "Memory cgroup out of memory: Killed process 77 (python)"}]},
     "error", "shm_exhausted", "shmem-rss"),
    ("RES003", {"kernel__oom_kills": [{"pid": 78, "comm": "python", "anon_rss_kb": 30000000, "shmem_rss_kb": 100}]},
     "error", "host_oom", "killed 1 process"),
    ("RES004", {"k8s__terminations": [{"pod": "p", "container": "c", "reason": "Error", "exit_code": 137}]}, "warning", "host_oom", "exited 137"),
    ("RES005", {"k8s__containers": [{"pod": "p", "name": "c", "requests": {}, "limits": {"nvidia.com/gpu": 1}, "gpu": 1}]}, "info", None, "no memory limit"),
    ("RUN001", {"runtime__cuda_visible_devices": "3"}, "error", "context_or_driver", "names GPU 3"),
    ("RUN001", {"runtime__cuda_visible_devices": "-1"}, "error", "context_or_driver", "hides every GPU"),
    ("RUN001", {"runtime__cuda_visible_devices": "0", "torch__device_count": 0}, "warning", "context_or_driver", "PyTorch sees 0"),
    ("RUN002", {"runtime__nvidia_driver_capabilities": "utility"}, "error", "context_or_driver", "no 'compute'"),
    ("RUN003", {"runtime__nvidia_visible_devices": "void"}, "warning", "context_or_driver", "no GPU"),
    ("RUN004", {"runtime__dev_nodes": ["nvidia0", "nvidiactl"]}, "error", "context_or_driver", "nvidia-uvm"),
    ("RUN005", {"runtime__nvidia_require_cuda": "cuda>=13.0 brand=tesla,driver>=535"}, "warning", "context_or_driver", "requires CUDA >= 13.0"),
    ("SHR001", {"sharing__mig": [{"gpu": 0, "current": "Enabled", "pending": "Disabled", "instances": []}]}, "warning", "context_or_driver", "pending"),
    ("SHR002", {"sharing__mps": {"pipe_directory": "/tmp/nvidia-mps", "pinned_device_mem_limit": "0=2G"}}, "warning", "gpu_sharing_limit", "2.00 GiB"),
    ("SHR002", {"sharing__mps": {"pipe_directory": "/tmp/nvidia-mps", "control_present": True}}, "info", "other_process", "MPS is in use"),
    ("SHR003", {"sharing__hami": {"memory_limits": {"0": "3000m"}}}, "warning", "gpu_sharing_limit", "2.93 GiB"),
    # HAMi's limit not in CUDA's path (H200, CUDA 13, session 19): PyTorch sees the whole card
    ("SHR003", {"sharing__hami": {"memory_limit": 2 * GiB}, "torch__devices": [
        {"name": "NVIDIA H200", "total_memory": 140 * GiB, "capability": "9.0"}]}, "warning", "other_process", "not applied to CUDA"),
    ("SHR004", {"sharing__vcuda": {"config": "/etc/vcuda/vcuda.config"}, "cuda__torch_runtime": "12.1"}, "error", "context_or_driver", "only up to 11.5"),
    ("SHR004", {"sharing__vcuda": {"config": "/etc/vcuda/vcuda.config"}, "sharing__k8s_resources": [
        {"pod": "p", "container": "c", "resource": "tencent.com/vcuda-memory", "value": "32"}], "cuda__torch_runtime": "11.3"}, "warning", "gpu_sharing_limit", "32 x 256 MiB = 8.00 GiB"),
    ("SHR005", {"sharing__cgpu": {"dev_mem": 22, "container_mem": 8, "unit": "GiB"}}, "warning", "gpu_sharing_limit", "8 of 22"),
    ("SHR006", {"sharing__runai": {"gpu_portion": "0.5"}}, "warning", "gpu_sharing_limit", "0.5"),
    ("SHR007", {"sharing__vgpu": [{"gpu": 0, "mode": "VGPU"}]}, "info", "gpu_sharing_limit", "vGPU guest"),
    ("SHR008", {"sharing__k8s_resources": ["nvidia.com/gpu.shared=1"]}, "warning", "other_process", "Time-sliced"),
    ("SHR009", {"sharing__ld_preload": ["/opt/hooks/libweird.so"]}, "info", None, "libweird"),
    ("SHR010", {"driver__gpus": [a100(used=30 * GiB)]}, "warning", "other_process", "no process is visible"),
    ("SHR010", {"driver__gpus": [a100(used=30 * GiB)], "sharing__processes": [
        {"gpu": 0, "pid": 9, "used_bytes": 29 * GiB, "name": "other", "self": False}]}, "info", "other_process", "36%"),
    ("SHR010", {"driver__gpus": [a100(used=60 * GiB)], "sharing__processes": [
        {"gpu": 0, "pid": 9, "used_bytes": 59 * GiB, "name": "other", "self": False}]}, "error", "other_process", "74%"),
    # under MPS NVML lists its server beside the client (H200, session 15): one co-tenant, not two
    ("SHR010", {"driver__gpus": [a100(used=60 * GiB)], "sharing__processes": [
        {"gpu": 0, "pid": 9, "used_bytes": 59 * GiB, "name": "other", "self": False},
        {"gpu": 0, "pid": 8, "used_bytes": 68 * MiB, "name": "nvidia-cuda-mps-server", "self": False}]},
     "error", "other_process", "1 process(es)"),
    ("SHR011", {"probe__mem_get_info": [{"gpu": 0, "free_bytes": 7 * GiB, "total_bytes": 8 * GiB}]}, "warning", "gpu_sharing_limit", "8.00 GiB total"),
    ("SHR011", {"torch__devices": [{"name": "NVIDIA A100-PCIE-40GB", "total_memory": 8 * GiB, "capability": "8.0"}]},
     "warning", "gpu_sharing_limit", "8.00 GiB total"),
    ("STO001", {"shm__size_bytes": 64 * MiB}, "warning", "shm_exhausted", "64.00 MiB"),
    ("STO001", {"shm__size_bytes": 512 * MiB}, "info", None, "512.00 MiB"),
    ("STO002", {"shm__size_bytes": 1 * GiB, "shm__used_bytes": 900 * MiB}, "warning", "shm_exhausted", "88% full"),
    ("STO002", {"shm__torch_segments": 12}, "info", None, "12 torch_"),
    ("STO003", {"workload__oom_events": [{"text": "RuntimeError: unable to allocate shared memory(shm) for file </torch_12_3>: No space left on device (28)"}]}, "error", "shm_exhausted", "1 shared-memory"),
    ("STO003", {"workload__oom_events": [{"text": "RuntimeError: Too many open files. Communication with the workers is no longer possible."}]}, "warning", "shm_exhausted", "file descriptors"),
    ("FWK001", {"torch__alloc_conf": "max_split_size_mb:10"}, "error", None, "at least 20"),
    ("FWK001", {"torch__alloc_conf": "backend:cudaMallocAsync,garbage_collection_threshold:0.6,per_process_memory_fraction:0.9"}, "warning", None, "ignored with backend:cudaMallocAsync"),
    ("FWK001", {"torch__alloc_conf": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segment:True"}}, "error", None, "did you mean"),
    ("FWK002", {"torch__error": "RuntimeError: Found no NVIDIA driver on your system."}, "error", "context_or_driver", "no driver"),
    ("FWK002", {"torch__error": "ModuleNotFoundError: No module named 'torch'"}, "info", None, "not installed"),
    ("FWK002", {"torch__cuda_available": False, "cuda__torch_runtime": None, "torch__version": "2.8.0+cpu"}, "warning", "not_oom", "CPU-only"),
    ("FWK003", {"probe__context": {"attempts": 5, "failures": 2, "errors": ["CUDA error: out of memory"], "seconds": 9}}, "error", "context_or_driver", "2 of 5"),
    ("FWK003", {"probe__context": {"attempts": 5, "failures": 5, "errors": [{"error": "CUDA error: out of memory\nSearch for", "count": 5}]},
                "driver__gpus": [a100(used=79 * GiB)]}, "critical", "other_process", "nearly full"),
    ("FWK004", {"probe__alloc": {"ok": False, "error": "CUDA error: out of memory"}}, "error", "context_or_driver", "small CUDA allocation"),
    ("FWK005", {"probe__context_bytes": 1200 * MiB}, "warning", "true_capacity", "1.17 GiB"),
    ("FWK006", {"torch__no_caching": "1"}, "warning", None, "caching allocator is off"),
    ("WRK001", {"workload__oom_events": log_events("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.25 GiB of which 1.00 GiB is free. Process 22 has 60.00 GiB memory in use.")}, "warning", "other_process", "another process held"),
    ("WRK001", {"workload__oom_events": log_events("RuntimeError: CUDA out of memory. Tried to allocate 734.00 MiB (GPU 0; 79.79 GiB total capacity; 40.20 GiB already allocated; 139.94 MiB free; 78.78 GiB reserved in total by PyTorch)")}, "warning", "fragmentation", "fragmentation"),
    ("WRK001", {"workload__oom_events": log_events("RuntimeError: CUDA error: an illegal memory access was encountered")}, "warning", "not_oom", "program error"),
    # over 100x the card (explain.patterns' absurd_size): doctor reads the size as explain does (session 21's review)
    ("WRK001", {"workload__oom_events": log_events("RuntimeError: CUDA out of memory. Tried to allocate 2.50 TiB (GPU 0; 23.65 GiB total capacity; 3.02 GiB already allocated; 20.12 GiB free; 3.14 GiB reserved in total by PyTorch)")}, "warning", "not_oom", "size gone wrong"),
]


@pytest.mark.parametrize("check_id,overrides,severity,category,text", FIRING,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(FIRING)])
def test_check_fires(check_id, overrides, severity, category, text):
    findings = list(CHECKS[check_id].fn(make_facts(**overrides)))
    assert findings, f"{check_id} did not fire"
    match = [f for f in findings if text in f.title]
    assert match, [f.title for f in findings]
    f = match[0]
    assert f.id == check_id and f.layer == CHECKS[check_id].layer
    assert f.severity.value == severity
    assert (f.category.value if f.category else None) == category
    assert f.remedy and f.evidence, "every finding carries evidence and a remedy"
    assert all(e.source for e in f.evidence)


def test_every_check_has_a_firing_case_and_a_cited_docstring():
    fired = {c[0] for c in FIRING}
    assert fired == set(CHECKS), set(CHECKS) - fired
    for spec in CHECKS.values():
        assert len(spec.doc) > 80 and ("[" in spec.doc or "http" in spec.doc or "memory-tools" in spec.doc), spec.id


@pytest.mark.parametrize("check_id", sorted(CHECKS))
def test_checks_never_crash_on_missing_or_wrong_shaped_facts(check_id):
    from oomdoctor.facts.keys import FACT_KEYS

    fn = CHECKS[check_id].fn
    assert list(fn(make_facts({}))) == []  # nothing known: nothing said
    unavailable = make_facts({k: UNAVAILABLE for k in FACT_KEYS})
    assert list(fn(unavailable)) == []
    for junk in ("x", 7, [1, "a", None], {"a": [1]}, True):
        list(fn(make_facts({k: junk for k in FACT_KEYS})))


def test_healthy_facts_fire_nothing_above_info():
    facts = make_facts()
    for spec in CHECKS.values():
        for f in spec.fn(facts):
            assert f.severity.value == "info", (spec.id, f.title)


def test_processes_named_in_the_jobs_logs_are_not_other_processes():
    procs = [{"gpu": 0, "pid": 88412, "used_bytes": 70 * GiB, "name": "python", "self": False}]
    log = [{"text": "[HAMI-core ERROR (pid:88412 thread=1 allocator.c:52)]: Device 0 OOM 10779361280 / 10737418240"}]
    facts = make_facts(driver__gpus=[a100(used=71 * GiB)], sharing__processes=procs, workload__oom_events=log)
    assert list(CHECKS["SHR010"].fn(facts)) == []
    assert list(CHECKS["SHR010"].fn(make_facts(driver__gpus=[a100(used=71 * GiB)], sharing__processes=procs)))


def test_hami_applied_to_cuda_is_not_flagged():
    # the hook in CUDA's path: PyTorch sees the limit (or less) as the card; a limit above the card binds nothing
    for total, limit in ((2 * GiB, 2 * GiB), (140 * GiB, 400 * GiB)):
        titles = [f.title for f in CHECKS["SHR003"].fn(make_facts(sharing__hami={"memory_limit": limit}, torch__devices=[
            {"name": "NVIDIA H200", "total_memory": total, "capability": "9.0"}]))]
        assert titles and not any("not applied" in t for t in titles), titles
