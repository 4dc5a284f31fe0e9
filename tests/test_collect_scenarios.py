"""GIVEN the eight scenario bundles WHEN collected offline THEN the facts say what each machine was.

These assert facts, not verdicts (the checks are tested on top of the same bundles).
"""

from __future__ import annotations

import io
import shutil
import tarfile
from pathlib import Path

import pytest

from oomdoctor.collectors.machine import collect_bundle
from oomdoctor.facts.keys import FACT_KEYS

BUNDLES = Path(__file__).parent / "fixtures" / "bundles"
MiB = 1024 * 1024
GiB = 1024 * MiB
SCENARIOS = ("seed_a100_k8s", "old_driver_new_torch", "docker_shm_64m", "hami_slice", "other_processes",
             "cgroup_oom_137", "mig_slice", "healthy_node")


def facts_of(name: str):
    return collect_bundle(BUNDLES / name)


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_registered_key_is_present_as_fact_or_unavailable(name):
    facts = facts_of(name)
    assert set(facts) == set(FACT_KEYS)


def test_seed_case_facts():
    f = facts_of("seed_a100_k8s")
    assert f.value("kernel.release") == "3.10.0-1062.9.1.el7.x86_64"
    assert f.value("os.name") == "Ubuntu 20.04.6 LTS"
    assert f.value("driver.version") == "535.129.03"
    assert f.value("driver.flavour") == "proprietary"
    assert f.value("cuda.driver_max") == "12.2"
    assert f.value("cuda.torch_runtime") == "11.3"
    assert f.value("torch.version") == "1.10.1+cu113"
    assert f.value("cuda.image_toolkit") == "11.3.109"
    assert f.value("runtime.container") == "kubernetes"
    assert f.value("runtime.kubernetes") is True
    vcuda = f.value("sharing.vcuda")
    assert vcuda["config"] == "/etc/vcuda/vcuda.config" and vcuda["socket"] and vcuda["client"]
    gpu = f.value("driver.gpus")[0]
    assert gpu["name"] == "NVIDIA A100-PCIE-40GB"
    assert gpu["memory_used_bytes"] == 4 * MiB
    assert gpu["memory_total_bytes"] == 40960 * MiB
    assert f.value("shm.size_bytes") == 64 * MiB
    assert f.value("cgroup.version") == 1
    assert f.value("cgroup.memory_limit_bytes") == 64 * GiB
    assert not f["cgroup.oom_kill"].available  # kernel 3.10: no oom_kill line in oom_control
    assert f.value("cuda.device_capabilities") == ["8.0"]  # from torch: nvidia-smi XML has none
    assert [e["kind"] for e in f.value("workload.oom_events")] == ["cuda_driver_oom"]
    res = {r["resource"] for r in f.value("sharing.k8s_resources")}
    assert res == {"tencent.com/vcuda-core", "tencent.com/vcuda-memory"}
    assert f.value("torch.devices")[0]["total_memory"] == 8 * GiB  # the vcuda slice, not the 40 GiB card


def test_old_driver_new_torch_facts():
    f = facts_of("old_driver_new_torch")
    assert f.value("driver.version") == "470.182.03"
    assert f.value("cuda.driver_max") == "11.4"
    assert f.value("cuda.torch_runtime") == "12.1"
    assert f.value("torch.cuda_available") is False
    assert "too old (found version 11040)" in f.value("torch.error")
    assert f.value("runtime.container") == "docker"
    assert any(e["kind"] == "driver_error" for e in f.value("workload.oom_events"))
    assert f.value("cgroup.memory_limit_bytes") is None  # memory.max = max


def test_docker_shm_facts():
    f = facts_of("docker_shm_64m")
    assert f.value("runtime.container") == "docker"
    assert f.value("shm.size_bytes") == 64 * MiB
    assert f.value("shm.used_bytes") == 64 * MiB
    assert f.value("shm.torch_segments") == 14
    kinds = {e["kind"] for e in f.value("workload.oom_events")}
    assert {"shm_error"} <= kinds
    assert f.value("cuda.image_toolkit") == "12.4.1"


def test_hami_facts():
    f = facts_of("hami_slice")
    hami = f.value("sharing.hami")
    assert hami["memory_limits"] == {"0": 10240 * MiB}
    assert hami["sm_limit"] == "50"
    assert hami["libvgpu"] is True
    assert hami["preload"] == ["/usr/local/vgpu/libvgpu.so"]
    assert f.value("sharing.ld_preload") == ["/usr/local/vgpu/libvgpu.so"]
    assert f.value("driver.gpus")[0]["memory_total_bytes"] == 10240 * MiB  # NVML is hooked: the slice
    assert any(e["kind"] == "hami_oom" for e in f.value("workload.oom_events"))
    names = {r["resource"] for r in f.value("sharing.k8s_resources")}
    assert {"nvidia.com/gpumem", "nvidia.com/gpucores"} <= names


def test_other_processes_facts():
    f = facts_of("other_processes")
    procs = f.value("sharing.processes")
    by_pid = {p["pid"]: p for p in procs}
    assert by_pid[4242]["used_bytes"] == 70104 * MiB
    assert by_pid[5151]["used_bytes"] == 8400 * MiB
    assert not any(p["self"] for p in procs)
    assert f.value("runtime.container") == "none"
    assert f.value("driver.gpus")[0]["memory_used_bytes"] == 78512 * MiB
    # host cgroup: the user's session scope; its files were not in the bundle
    assert f.value("cgroup.path") == "/user.slice/user-1001.slice/session-12.scope"


def test_cgroup_oom_137_facts():
    f = facts_of("cgroup_oom_137")
    assert f.value("cgroup.version") == 2
    assert f.value("cgroup.memory_limit_bytes") == 16 * GiB
    assert f.value("cgroup.oom_kill") == 2
    assert f.value("cgroup.oom_events") == 3
    kills = f.value("kernel.oom_kills")
    assert kills[0]["pid"] == 31337 and kills[0]["comm"] == "python"
    assert kills[0]["reason"] == "Memory cgroup out of memory"
    assert kills[0]["shmem_rss_kb"] == 1048576
    assert kills[0]["constraint"] == "CONSTRAINT_MEMCG"
    term = f.value("k8s.terminations")
    assert term == [{"pod": "bert-pretrain-5d8f7-qz2lx", "container": "trainer", "file": "k8s/pod.yaml",
                     "state": "lastState", "reason": "OOMKilled", "exit_code": 137, "restart_count": 2,
                     "finished_at": "2025-05-02T07:43:58Z"}]
    limits = f.value("k8s.containers")[0]["limits"]
    assert limits["memory"] == 16 * GiB


def test_mig_facts():
    f = facts_of("mig_slice")
    mig = f.value("sharing.mig")
    assert mig[0]["current"] == "Enabled"
    assert [i["memory_total_bytes"] for i in mig[0]["instances"]] == [9984 * MiB, 9984 * MiB]
    assert f.value("runtime.cuda_visible_devices").startswith("MIG-")
    assert f.value("torch.devices")[0]["name"].endswith("MIG 1g.10gb")
    assert f.value("sharing.k8s_resources")[0]["resource"] == "nvidia.com/mig-1g.10gb"


def test_healthy_node_facts():
    f = facts_of("healthy_node")
    assert f.value("driver.version") == "580.95.05"
    assert f.value("driver.flavour") == "open"  # the open-module line: the §5c regex pitfall
    assert f.value("kernel.release") == "6.8.0-79-generic"
    assert f.value("cuda.driver_max") == "13.0"
    assert f.value("cuda.torch_runtime") == "13.0"
    assert f.value("shm.size_bytes") == 16 * GiB
    assert f.value("torch.alloc_conf") == "expandable_segments:True"
    assert f.value("driver.xid_events") == [] and f.value("kernel.oom_kills") == []
    gpu = f.value("driver.gpus")[0]
    assert gpu["persistence_mode"] == "Enabled" and gpu["ecc_uncorrected"] == 0
    assert gpu["remapped_pending"] is False and gpu["remapped_failure"] is False
    for key in ("sharing.hami", "sharing.vcuda", "sharing.mps", "sharing.cgpu", "sharing.runai"):
        assert f.value(key) is None, key
    assert f.value("sharing.processes") == []


def test_seed_example_matches_the_fixture():
    """examples/seed-a100-k8s is the README's first command: it must hold the same evidence."""
    example = Path(__file__).parents[1] / "examples" / "seed-a100-k8s"
    a, b = collect_bundle(example).to_json(), facts_of("seed_a100_k8s").to_json()
    assert a == b


def test_bundle_reads_the_same_as_directory_or_tarball(tmp_path):
    tgz = tmp_path / "seed.tar.gz"
    with tarfile.open(tgz, "w:gz") as tar:
        tar.add(BUNDLES / "seed_a100_k8s", arcname="oomdoctor-bundle")
    assert collect_bundle(tgz).to_json() == facts_of("seed_a100_k8s").to_json()


def test_bundle_mode_reads_nothing_of_the_local_machine(tmp_path, monkeypatch):
    """An empty bundle gives unavailable facts, not this machine's /proc or environment."""
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    (tmp_path / "meta.json").write_text('{"format": "oomdoctor-bundle", "version": 1}')
    f = collect_bundle(tmp_path)
    assert not f["kernel.release"].available
    assert not f["host.mem_total_bytes"].available
    # no proc/self/environ in the bundle: unknown, not this machine's variables, not "unset"
    assert not f["runtime.kubernetes"].available
    assert not f["runtime.cuda_visible_devices"].available
    assert "proc/self/environ" in f["runtime.cuda_visible_devices"].reason
    assert not f["driver.version"].available
    assert not f["torch.version"].available


def test_garbage_files_give_unavailable_facts_not_crashes(tmp_path):
    root = tmp_path / "b"
    shutil.copytree(BUNDLES / "seed_a100_k8s", root)
    rng = bytes(range(256)) * 64
    for rel in ("proc/meminfo", "proc/mounts", "proc/version", "proc/self/cgroup", "proc/self/environ",
                "commands/nvidia-smi-q.xml", "commands/torch.json", "etc/os-release", "meta.json",
                "sys/fs/cgroup/memory/memory.limit_in_bytes", "sys/fs/cgroup/memory/memory.oom_control",
                "proc/driver/nvidia/version", "k8s/pod.yaml", "logs/seed-traceback.txt", "dev/nvidia-nodes.txt",
                "commands/shm.json", "usr/local/cuda/version.txt"):
        (root / rel).write_bytes(rng)
    f = collect_bundle(root)
    assert set(f) == set(FACT_KEYS)
    for key in ("kernel.release", "host.mem_total_bytes", "driver.version", "torch.version", "k8s.containers",
                "cgroup.memory_limit_bytes"):
        assert not f[key].available, key


def test_tarball_with_links_and_escapes_extracts_only_plain_files(tmp_path):
    tgz = tmp_path / "evil.tar.gz"
    with tarfile.open(tgz, "w:gz") as tar:
        for name, data in (("proc/version", b"Linux version 5.4.0-1 (x)\n"), ("../escape.txt", b"x"),
                           ("/abs.txt", b"x")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("etc/os-release")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/os-release"
        tar.addfile(link)
    f = collect_bundle(tgz)
    assert f.value("kernel.release") == "5.4.0-1"
    assert not f["os.name"].available  # the symlink to the local /etc/os-release was not followed
    assert not (tmp_path.parent / "escape.txt").exists()
