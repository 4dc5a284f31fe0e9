"""GIVEN fake roots, a fake pynvml and fake commands WHEN the live collectors run THEN facts are right
and nothing raises: no GPU, no driver, a driver/library mismatch and denied dmesg are normal states.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from oomdoctor.collectors.context import CollectContext, CommandResult, CommandRunner
from oomdoctor.collectors.machine import gather, live_context
from oomdoctor.collectors.nvml import LiveBackend, PynvmlBackend, SmiCommandBackend
from oomdoctor.collectors.probe import probe_facts, summarise
from oomdoctor.facts.keys import FACT_KEYS
from oomdoctor.parsers.gpu_snapshot import GpuSnapshot
from oomdoctor.redact import redact_env

MiB = 1024 * 1024
BUNDLES = Path(__file__).parent / "fixtures" / "bundles"


class FakeNVMLError(Exception):
    def __init__(self, value):
        super().__init__(value)
        self.value = value

    def __str__(self):
        return {9: "Driver Not Loaded", 12: "NVML Shared Library Not Found",
                18: "RM has detected an NVML/RM version mismatch.", 3: "Not Supported"}.get(self.value, "Unknown")


class FakeNvml:
    """A pynvml stand-in: one A100 with a foreign process; MIG and retired pages not supported."""

    NVML_ERROR_LIBRARY_NOT_FOUND = 12
    NVML_ERROR_DRIVER_NOT_LOADED = 9
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
    NVML_ERROR_NO_PERMISSION = 4
    nvmlMemory_v2 = 0x02000028

    def __init__(self, init_error=None, processes=((4242, 70000 * MiB),)):
        self.init_error = init_error
        self.processes = processes
        self.shutdown_called = False

    def nvmlInit(self):
        if self.init_error:
            raise FakeNVMLError(self.init_error)

    def nvmlShutdown(self):
        self.shutdown_called = True

    def nvmlSystemGetDriverVersion(self):
        return "535.129.03"

    def nvmlSystemGetCudaDriverVersion_v2(self):
        return 12020

    def nvmlSystemGetCudaDriverVersion(self):
        return 12020

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlDeviceGetHandleByIndex(self, i):
        return f"h{i}"

    def nvmlDeviceGetName(self, h):
        return b"NVIDIA A100-SXM4-80GB"

    def nvmlDeviceGetUUID(self, h):
        return "GPU-1111"

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=b"00000000:07:00.0")

    def nvmlDeviceGetMemoryInfo(self, h, version=None):
        if version:
            return SimpleNamespace(total=81920 * MiB, reserved=591 * MiB, used=70004 * MiB, free=11325 * MiB)
        return SimpleNamespace(total=81920 * MiB, used=70595 * MiB, free=11325 * MiB)

    def nvmlDeviceGetPersistenceMode(self, h):
        return 0

    def nvmlDeviceGetComputeMode(self, h):
        return 3

    def nvmlDeviceGetEccMode(self, h):
        return (1, 1)

    def nvmlDeviceGetTotalEccErrors(self, h, kind, counter):
        return 0

    def nvmlDeviceGetRetiredPages(self, h, cause):
        raise FakeNVMLError(3)

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h):
        raise FakeNVMLError(3)

    def nvmlDeviceGetRemappedRows(self, h):
        return (0, 0, 1, 0)

    def nvmlDeviceGetCudaComputeCapability(self, h):
        return (8, 0)

    def nvmlDeviceGetMigMode(self, h):
        return (0, 0)

    def nvmlDeviceGetVirtualizationMode(self, h):
        return 0

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [SimpleNamespace(pid=pid, usedGpuMemory=used, gpuInstanceId=0xFFFFFFFF) for pid, used in self.processes]


class FakeRunner(CommandRunner):
    def __init__(self, outputs=None):
        self.outputs = outputs or {}
        self.calls: list[tuple[str, ...]] = []

    def run(self, argv, timeout=10.0, env=None):
        self.calls.append(tuple(argv))
        assert timeout and timeout > 0  # every command has a time limit
        key = argv[0] if argv[0] != os.sys.executable else "python"
        out = self.outputs.get(key)
        if out is None:
            return CommandResult(tuple(argv), None, "", "", f"{argv[0]}: not found")
        return out


def test_pynvml_backend_reads_everything_and_guards_unsupported_calls():
    nv = FakeNvml()
    snap = PynvmlBackend(nv).snapshot()
    assert snap.ok and nv.shutdown_called
    assert snap.driver_version == "535.129.03" and snap.cuda_driver_version == "12.2"
    gpu = snap.gpus[0]
    assert gpu["name"] == "NVIDIA A100-SXM4-80GB" and gpu["pci_bus_id"] == "00000000:07:00.0"
    assert gpu["memory_reserved_bytes"] == 591 * MiB and gpu["memory_used_bytes"] == 70004 * MiB
    assert gpu["persistence_mode"] == "Disabled" and gpu["compute_mode"] == "Exclusive_Process"
    assert gpu["retired_pages"] is None and gpu["remapped_pending"] is True
    assert gpu["capability"] == "8.0" and gpu["mig_current"] == "Disabled"
    assert snap.processes == [{"gpu": 0, "pid": 4242, "used_bytes": 70000 * MiB, "name": None, "type": "C",
                               "gpu_instance_id": None}]


@pytest.mark.parametrize("code,expected", [
    (12, "NVML library not found"), (9, "kernel driver not loaded"), (18, "Driver/library version mismatch"),
])
def test_nvml_failures_become_facts(code, expected):
    snap = PynvmlBackend(FakeNvml(init_error=code)).snapshot()
    assert not snap.ok and expected in snap.error


SMI_XML = (BUNDLES / "other_processes" / "commands" / "nvidia-smi-q.xml").read_text()


def test_fallback_to_nvidia_smi_xml_keeps_the_nvml_reason():
    runner = FakeRunner({"nvidia-smi": CommandResult(("nvidia-smi",), 0, SMI_XML, "")})
    backend = LiveBackend(PynvmlBackend(FakeNvml(init_error=18)), SmiCommandBackend(runner))
    snap = backend.snapshot()
    assert snap.ok and snap.source == "nvidia-smi -q -x"
    assert "Driver/library version mismatch" in snap.nvml_error
    assert snap.driver_version == "550.90.07" and len(snap.processes) == 2
    assert runner.calls == [("nvidia-smi", "-q", "-x")]


def fake_root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    files = {
        "proc/meminfo": "MemTotal:       16384000 kB\nMemAvailable:    8192000 kB\nSwapTotal: 0 kB\n",
        "proc/version": "Linux version 5.4.0-150-generic (buildd@x) (gcc 9.4.0) #167-Ubuntu SMP\n",
        "proc/mounts": "cgroup2 /sys/fs/cgroup cgroup2 rw 0 0\nshm /dev/shm tmpfs rw,size=65536k 0 0\n",
        "proc/self/cgroup": "0::/\n",
        "sys/fs/cgroup/memory.max": "8589934592\n",
        "sys/fs/cgroup/memory.events": "low 0\nhigh 0\nmax 2\noom 1\noom_kill 1\n",
        "sys/fs/cgroup/cpu.max": "max 100000\n",
        "etc/os-release": 'PRETTY_NAME="Ubuntu 20.04.6 LTS"\nID=ubuntu\nVERSION_ID="20.04"\n',
        "etc/ld.so.preload": "/usr/local/vgpu/libvgpu.so\n",
        "usr/local/vgpu/libvgpu.so": "",
        ".dockerenv": "",
        "dev/nvidia0": "", "dev/nvidiactl": "", "dev/nvidia-uvm": "", "dev/null": "",
        "usr/local/cuda-12.2/compat/libcuda.so.535.104.05": "",
    }
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def test_live_collectors_on_a_fake_root(tmp_path):
    root = fake_root(tmp_path)
    dmesg = CommandResult(("dmesg",), 0, "[1.0] NVRM: Xid (PCI:0000:07:00): 79, GPU has fallen off the bus.\n", "")
    runner = FakeRunner({"dmesg": dmesg})
    env = redact_env({"CUDA_DEVICE_MEMORY_LIMIT": "4g", "HF_TOKEN": "hf_x", "PATH": "/bin"})  # as live_context does
    ctx = CollectContext(root=root, env=env,
                         gpu=PynvmlBackend(FakeNvml()), runner=runner, self_pids=frozenset({4242}))
    facts, doc = gather(ctx, import_torch=False)
    assert doc is None and set(facts) == set(FACT_KEYS)
    assert facts.value("host.mem_total_bytes") == 16384000 * 1024
    assert facts.value("kernel.release") == "5.4.0-150-generic"
    assert facts.value("cgroup.memory_limit_bytes") == 8 * 1024**3 and facts.value("cgroup.oom_kill") == 1
    assert facts.value("runtime.container") == "docker"
    assert facts.value("runtime.dev_nodes") == ["nvidia-uvm", "nvidia0", "nvidiactl"]
    assert facts.value("runtime.env_redacted") == ["HF_TOKEN"]
    assert facts.value("sharing.hami")["memory_limit"] == 4 * 1024**3
    assert facts.value("sharing.processes") == [{"gpu": 0, "pid": 4242, "used_bytes": 70000 * MiB,
                                                 "name": facts.value("sharing.processes")[0]["name"], "self": True}]
    assert facts.value("workload.gpu_processes_self") == 70000 * MiB
    assert facts.value("cuda.compat_libs") == ["/usr/local/cuda-12.2/compat/libcuda.so.535.104.05"]
    assert facts.value("cuda.driver_max") == "12.2" and facts.source("cuda.driver_max") == "NVML"
    assert [e["code"] for e in facts.value("driver.xid_events")] == [79]
    assert facts.value("shm.mount")["options"].endswith("size=65536k")
    assert facts.value("cuda.device_capabilities") == ["8.0"]
    assert not facts["probe.context"].available


def test_no_gpu_no_driver_no_torch_is_normal(tmp_path):
    runner = FakeRunner({"dmesg": CommandResult(("dmesg",), 1, "", "dmesg: read kernel buffer failed: "
                                                "Operation not permitted\n")})
    ctx = CollectContext(root=tmp_path, env={}, runner=runner,
                         gpu=LiveBackend(PynvmlBackend(FakeNvml(init_error=12)), SmiCommandBackend(runner)))
    facts, _ = gather(ctx, probe=True, import_torch=True)
    assert set(facts) == set(FACT_KEYS)
    assert "NVML library not found" in facts.value("driver.nvml_error")
    assert not facts["driver.version"].available
    assert "denied" in facts["driver.xid_events"].reason
    assert not facts["torch.version"].available  # the torch child could not run (runner says not found)
    assert not facts["probe.context"].available


def test_driver_max_is_derived_from_the_branch_table_when_nothing_better(tmp_path):
    (tmp_path / "proc/driver/nvidia").mkdir(parents=True)
    (tmp_path / "proc/driver/nvidia/version").write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.195.03  Release Build  (dvs-builder@U22)  x\n")
    runner = FakeRunner()
    ctx = CollectContext(root=tmp_path, env={}, runner=runner,
                         gpu=LiveBackend(PynvmlBackend(FakeNvml(init_error=9)), SmiCommandBackend(runner)))
    facts, _ = gather(ctx, import_torch=False)
    assert facts.value("driver.version") == "570.195.03" and facts.value("driver.flavour") == "open"
    assert facts.value("cuda.driver_max") == "12.8" and "derived" in facts.source("cuda.driver_max")


def test_a_collector_bug_costs_its_facts_not_the_report(tmp_path, monkeypatch):
    import oomdoctor.collectors.machine as machine

    def boom(ctx):
        raise RuntimeError("kaboom")

    monkeypatch.setattr(machine, "COLLECTORS", (boom, *machine.COLLECTORS[1:]))
    ctx = CollectContext(root=tmp_path, env={}, gpu=PynvmlBackend(FakeNvml(init_error=12)), runner=FakeRunner())
    facts, _ = gather(ctx, import_torch=False)
    assert "kaboom" in facts["host.mem_total_bytes"].reason


def test_probe_summary_counts_intermittent_failures_and_matches_nvml_by_uuid():
    snap = GpuSnapshot("NVML", gpus=[{"index": 0, "uuid": "GPU-1111", "memory_total_bytes": 80 * 1024**3,
                                      "memory_free_bytes": 79 * 1024**3}])
    ok = {"ok": True, "seconds": 0.4, "context_bytes": 520 * MiB, "context_method": "nvml_process_used_minus_torch_reserved",
          "alloc": {"ok": True, "bytes": 64 * MiB, "error": None},
          "mem_get_info": [{"gpu": 0, "uuid": "GPU-1111", "free_bytes": 8 * 1024**3, "total_bytes": 8 * 1024**3}]}
    bad = {"ok": False, "error": "RuntimeError: CUDA error: out of memory", "seconds": None}
    doc = summarise([ok, bad, dict(ok, mem_get_info=[]), bad, dict(ok, mem_get_info=[])], snap)
    assert doc["context"]["attempts"] == 5 and doc["context"]["failures"] == 2
    assert doc["context"]["errors"] == ["RuntimeError: CUDA error: out of memory"]
    assert doc["context"]["error_counts"] == [{"error": "RuntimeError: CUDA error: out of memory", "count": 2}]
    assert doc["context_bytes"] == 520 * MiB
    assert doc["mem_get_info"][0]["nvml_total_bytes"] == 80 * 1024**3  # slicing: torch sees 8 GiB
    facts = {e.key: e for e in probe_facts(doc, "", "probe", snap)}
    assert facts["probe.context"].value["failures"] == 2 and facts["probe.alloc"].value["ok"] is True


def test_probe_without_torch_is_unavailable_not_a_failure():
    doc = summarise([{"ok": False, "error": "torch not importable: No module named 'torch'"}], GpuSnapshot("NVML"))
    facts = probe_facts(doc, "", "probe", GpuSnapshot("NVML"))
    assert all(not f.available and "torch" in f.reason for f in facts)


def test_live_context_uses_real_environment_and_root():
    ctx = live_context(runner=FakeRunner())
    assert ctx.root == Path("/") and not ctx.bundle and os.getpid() in ctx.self_pids


def test_collect_live_does_not_import_torch_or_init_cuda_here():
    import subprocess
    import sys

    code = ("import sys; from oomdoctor.collectors.machine import collect_live; collect_live(); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "False"


def test_reports_made_with_planted_secrets_hold_none(monkeypatch, tmp_path):
    """doctor live, in every format, with secrets in the environment: none appears in the output."""
    import subprocess
    import sys

    secrets = {"HF_TOKEN": "hf_aBcDeFgHiJkLmNoPqRsTuVwXyZ012345", "AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE",
               "DB_PASSWORD": "s3cr3t-P4ssw0rd!", "LD_PRELOAD": "/x/ghp_16C7e42F292c6912E7710c838347Ae178B4a.so",
               "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,token=eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3In0.abcdefghij",
               "CUDA_MPS_PIPE_DIRECTORY": "https://bob:hunter2pw@example.com/pipe"}
    env = {**os.environ, **secrets, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    for fmt in ("json", "text", "html"):
        out = subprocess.run([sys.executable, "-m", "oomdoctor", "doctor", "--format", fmt], capture_output=True,
                             text=True, env=env, timeout=120)
        assert out.returncode in (0, 1), out.stderr
        for value in ("hf_aBcDeFgHiJkLmNoPqRsTuVwXyZ012345", "AKIAIOSFODNN7EXAMPLE", "s3cr3t-P4ssw0rd!",
                      "ghp_16C7e42F292c6912E7710c838347Ae178B4a", "eyJhbGciOiJIUzI1NiJ9", "hunter2pw"):
            assert value not in out.stdout, (fmt, value)


def test_daemonset_names_the_node_and_reads_the_hosts_os_release(tmp_path):
    """GIVEN deploy/'s NODE_NAME and /etc/host-os-release mount WHEN collected THEN the node, not the pod, is named."""
    from oomdoctor.collectors.system import collect_system

    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/os-release").write_text('PRETTY_NAME="Ubuntu 22.04.4 LTS"\nID=ubuntu\nVERSION_ID="22.04"\n')
    (tmp_path / "etc/host-os-release").write_text('PRETTY_NAME="Rocky Linux 8.9"\nID=rocky\nVERSION_ID="8.9"\n')
    ctx = CollectContext(root=tmp_path, env={"NODE_NAME": "gpu-node-17"}, gpu=PynvmlBackend(FakeNvml(init_error=12)),
                         runner=FakeRunner())
    facts = {e.key: e for e in collect_system(ctx)}
    assert facts["host.name"].value == "gpu-node-17" and facts["host.name"].source == "env:NODE_NAME"
    assert facts["os.id"].value == "rocky 8.9"


def test_an_emptied_hami_variable_is_no_hami(tmp_path):
    # a shell that blanks CUDA_DEVICE_MEMORY_LIMIT / LD_PRELOAD has no HAMi limit (session 19: the H200 run's
    # "outside the container" reading still saw HAMi from the empty variable)
    from oomdoctor.collectors.sharing import collect_sharing

    def hami(env):
        ctx = CollectContext(root=tmp_path, env=env, runner=FakeRunner(),
                             gpu=LiveBackend(PynvmlBackend(FakeNvml(init_error=12)), SmiCommandBackend(FakeRunner())))
        return next(e for e in collect_sharing(ctx) if e.key == "sharing.hami").value

    assert hami({"CUDA_DEVICE_MEMORY_LIMIT": "", "LD_PRELOAD": ""}) is None
    assert hami({"CUDA_DEVICE_MEMORY_LIMIT": "4g"})["memory_limit"] == 4 * 1024**3
