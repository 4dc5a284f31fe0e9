"""The issue's acceptance scenarios, as FactSets: verdict and key findings of each."""

from __future__ import annotations

from builders import GiB, MiB, a100, at_least, ids, log_events, make_facts, seed_facts
from oomdoctor.checks.engine import diagnose


def by_id(report, check_id):
    return [f for f in report.findings if f.id == check_id]


def test_seed_case_is_context_or_driver_with_the_key_findings():
    r = diagnose(seed_facts(), {"source": "bundle"})
    assert r.verdict.category.value == "context_or_driver"
    assert "DRV003" in r.verdict.finding_ids
    kernel = by_id(r, "DRV003")[0]
    assert kernel.severity.value == "error" and kernel.confidence.value == "high"
    assert "3.10" in kernel.title and "535" in kernel.title
    assert kernel.category.value == "context_or_driver"
    vcuda = by_id(r, "SHR004")[0]
    assert "gpu-manager/vcuda" in vcuda.title
    idle = by_id(r, "DRV008")[0]
    assert "4.00 MiB" in idle.title and "abnormal" in idle.title and idle.severity.value == "warning"
    fine = by_id(r, "CUDA001")[0]
    assert fine.severity.value == "info" and "11.3" in fine.title and "fine by NVIDIA's rules" in fine.title
    assert "12.2" in fine.title
    shm = by_id(r, "STO001")[0]
    assert "64.00 MiB" in shm.title and shm.category.value == "shm_exhausted"
    assert "emptyDir" in shm.remedy  # a Kubernetes pod gets the k8s remedy
    assert "3.10.0-1062" in r.verdict.summary


def test_seed_without_the_kernel_problem_is_no_longer_context_or_driver_by_kernel():
    r = diagnose(seed_facts(kernel__release="4.19.91-24.el8.x86_64"), {})
    assert "DRV003" not in ids(r)


def test_driver_too_old_for_torch_cuda():
    facts = make_facts(driver__version="570.124.06", cuda__driver_max="12.8", torch__version="2.12.0",
                       cuda__torch_runtime="13.0", torch__cuda_available=False,
                       torch__error="The NVIDIA driver on your system is too old (found version 12080).")
    r = diagnose(facts, {})
    assert r.verdict.category.value == "context_or_driver"
    f = by_id(r, "CUDA001")[0]
    assert f.severity.value == "error" and "too old" in f.title and "580.65.06" in f.title
    assert "FWK002" in ids(r)


def test_docker_64mb_shm_with_dataloader_bus_error():
    log = ("RuntimeError: DataLoader worker (pid 4121) is killed by signal: Bus error. It is possible that "
           "dataloader's workers are out of shared memory. Please try to raise your shared memory limit.")
    facts = make_facts(shm__size_bytes=64 * 1000**2, runtime__container="docker",
                       workload__oom_events=log_events(log))
    r = diagnose(facts, {})
    assert r.verdict.category.value == "shm_exhausted"
    sto = by_id(r, "STO001")[0]
    assert sto.severity.value == "error" and "--shm-size" in sto.remedy
    assert "STO003" in ids(r)
    assert "WRK001" not in ids(r)  # shm lines are the storage layer's, not counted twice


def test_hami_slice():
    facts = make_facts(runtime__container="kubernetes", runtime__kubernetes=True,
                       sharing__hami={"memory_limit": "4096m", "memory_limits": {}, "sm_limit": "50",
                                      "libvgpu": "/usr/local/vgpu/libvgpu.so", "preload": True},
                       sharing__ld_preload=["/usr/local/vgpu/libvgpu.so"],
                       probe__mem_get_info=[{"gpu": 0, "free_bytes": 3900 * MiB, "total_bytes": 4096 * MiB}],
                       workload__oom_events=log_events(
                           "[HAMI-core ERROR (pid:12 thread=1 allocator.c:52)]: Device 0 OOM 4400000000 / 4294967296"))
    r = diagnose(facts, {})
    assert r.verdict.category.value == "gpu_sharing_limit"
    assert "4.00 GiB" in by_id(r, "SHR003")[0].title
    assert "SHR011" in ids(r) and "SHR009" in ids(r)


def test_other_processes_hold_most_of_the_gpu():
    facts = make_facts(driver__gpus=[a100(used=76 * GiB)],
                       sharing__processes=[{"gpu": 0, "pid": 817, "used_bytes": 75 * GiB, "name": "python hog.py", "self": False}],
                       workload__oom_events=log_events("torch.AcceleratorError: CUDA error: out of memory"))
    r = diagnose(facts, {})
    assert r.verdict.category.value == "other_process"
    f = by_id(r, "SHR010")[0]
    assert f.severity.value == "error" and "817" in str(f.evidence)


def test_cgroup_oom_kill_exit_137():
    facts = make_facts(runtime__container="kubernetes", runtime__kubernetes=True,
                       cgroup__memory_limit_bytes=32 * GiB, cgroup__memory_peak_bytes=32 * GiB, cgroup__oom_kill=2,
                       cgroup__oom_events=5,
                       k8s__terminations=[{"pod": "train-0", "container": "trainer", "reason": "OOMKilled", "exit_code": 137}])
    r = diagnose(facts, {})
    assert r.verdict.category.value == "host_oom"
    assert {"RES001", "RES002", "RES004"} <= ids(r)
    assert by_id(r, "RES004")[0].severity.value == "error"


def test_mig_slice():
    inst = [{"name": "1g.10gb", "uuid": "MIG-4f2a", "memory_total_bytes": 9728 * MiB}]
    facts = make_facts(sharing__mig=[{"gpu": 0, "current": "Enabled", "pending": "Enabled", "instances": inst}],
                       probe__mem_get_info=[{"gpu": 0, "free_bytes": 9500 * MiB, "total_bytes": 9728 * MiB}],
                       workload__oom_events=log_events(
                           "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                           "capacity of 9.50 GiB of which 1.20 GiB is free. Including non-PyTorch memory, this process "
                           "has 8.29 GiB memory in use. Of the allocated memory 7.80 GiB is allocated by PyTorch, and "
                           "100.00 MiB is reserved by PyTorch but unallocated."))
    r = diagnose(facts, {})
    assert r.verdict.category.value == "gpu_sharing_limit"
    assert "1g.10gb" in by_id(r, "SHR001")[0].title
    assert by_id(r, "SHR011")[0].severity.value == "info"  # expected under MIG, not a surprise


def test_healthy_node_has_no_false_alarms():
    r = diagnose(make_facts(), {})
    assert at_least(r, "warning") == []
    assert r.verdict.category.value == "unknown"
    assert all(s.value == "ok" for s in r.layer_status.values())


def test_healthy_kubernetes_node_with_big_shm_and_limits_is_quiet_too():
    r = diagnose(make_facts(runtime__container="kubernetes", runtime__kubernetes=True,
                            cgroup__memory_limit_bytes=64 * GiB, cgroup__memory_peak_bytes=20 * GiB,
                            probe__context={"attempts": 5, "failures": 0, "errors": [], "seconds": 4.1},
                            probe__context_bytes=520 * MiB,
                            probe__mem_get_info=[{"gpu": 0, "free_bytes": 79 * GiB, "total_bytes": 80 * GiB - 400 * MiB}],
                            torch__alloc_conf="expandable_segments:True"), {})
    assert at_least(r, "warning") == []
