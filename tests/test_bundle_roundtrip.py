"""GIVEN a fake machine WHEN read live and WHEN bundled then read back THEN both give the same facts.

This is the "one code path" promise: `oomdoctor bundle` writes exactly what the collectors need.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from oomdoctor.collectors.bundle_write import build_bundle
from oomdoctor.collectors.context import CollectContext, CommandResult
from oomdoctor.collectors.machine import collect_bundle, gather
from oomdoctor.collectors.nvml import LiveBackend, PynvmlBackend, SmiCommandBackend
from oomdoctor.collectors.torch_child import MARKER
from oomdoctor.redact import redact_env
from test_collectors_live import SMI_XML, FakeNvml, FakeRunner  # noqa: E402

CG = "machine.slice/libpod-3f2a9c.scope"
FILES = {
    "proc/meminfo": "MemTotal:       65536000 kB\nMemAvailable:   32768000 kB\nSwapTotal:     0 kB\n",
    "proc/version": "Linux version 5.15.0-105-generic (buildd@lcy02) (gcc 11.4.0) #115-Ubuntu SMP\n",
    "proc/mounts": "cgroup2 /sys/fs/cgroup cgroup2 rw 0 0\nshm /dev/shm tmpfs rw,nosuid,size=65536k 0 0\n",
    "proc/self/cgroup": f"0::/{CG}\n",
    "proc/driver/nvidia/version": "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.90.07  Fri May 31 2024\n",
    f"sys/fs/cgroup/{CG}/memory.max": "17179869184\n",
    f"sys/fs/cgroup/{CG}/memory.current": "1073741824\n",
    f"sys/fs/cgroup/{CG}/memory.events": "low 0\nhigh 0\nmax 7\noom 2\noom_kill 1\n",
    f"sys/fs/cgroup/{CG}/cpu.max": "400000 100000\n",
    "etc/os-release": 'PRETTY_NAME="Ubuntu 22.04.4 LTS"\nID=ubuntu\nVERSION_ID="22.04"\n',
    "etc/ld.so.preload": "/usr/local/vgpu/libvgpu.so\n",
    "usr/local/vgpu/libvgpu.so": "\x7fELF binary that must not travel",
    "etc/vcuda/vcuda.sock": "",
    "usr/local/cuda/version.json": '{"cuda": {"version": "12.4.1"}}',
    "usr/local/cuda-12.4/compat/libcuda.so.550.54.15": "ELF",
    "run/.containerenv": 'engine="podman-4.9"\n',
    "dev/nvidia0": "", "dev/nvidiactl": "",
}
TORCH = {"version": "2.4.1+cu124", "cuda": "12.4", "cudnn": 90100, "arch_list": ["sm_80", "sm_90"],
         "cuda_available": True, "device_count": 1, "devices": [{"name": "NVIDIA H100 80GB HBM3",
                                                                "total_memory": 85 * 10**9, "capability": "9.0"}],
         "error": None, "python": "3.11.9"}
KEYS = ("host.mem_total_bytes", "kernel.release", "os.name", "cgroup.version", "cgroup.memory_limit_bytes",
        "cgroup.memory_usage_bytes", "cgroup.oom_kill", "cgroup.oom_events", "cgroup.cpu_limit_cores",
        "runtime.container", "runtime.dev_nodes", "runtime.env_redacted", "runtime.cuda_visible_devices",
        "sharing.hami", "sharing.vcuda", "sharing.ld_preload", "sharing.processes", "driver.version",
        "driver.flavour", "driver.gpu_names", "cuda.driver_max", "cuda.image_toolkit", "cuda.compat_libs",
        "cuda.torch_runtime", "cuda.arch_list", "torch.version", "torch.cudnn", "shm.size_bytes",
        "driver.xid_events", "kernel.oom_kills", "torch.alloc_conf")


def fake_machine(tmp_path: Path) -> CollectContext:
    root = tmp_path / "machine"
    for rel, text in FILES.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    dmesg = ("[9.1] NVRM: Xid (PCI:0000:18:00): 48, pid=77, name=python, An uncorrectable double bit error\n"
             "[9.2] Memory cgroup out of memory: Killed process 77 (python) total-vm:1kB, anon-rss:2kB, shmem-rss:3kB\n"
             "[9.3] usb 1-1: new device\n")
    runner = FakeRunner({
        "nvidia-smi": CommandResult(("nvidia-smi",), 0, SMI_XML, ""),
        "dmesg": CommandResult(("dmesg",), 0, dmesg, ""),
        "python": CommandResult(("python",), 0, MARKER + json.dumps(TORCH) + "\n", ""),
    })
    env = redact_env({"CUDA_DEVICE_MEMORY_LIMIT": "8g", "CUDA_VISIBLE_DEVICES": "0", "HF_TOKEN": "hf_secret",
                      "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    gpu = LiveBackend(PynvmlBackend(FakeNvml(init_error=18)), SmiCommandBackend(runner))
    return CollectContext(root=root, env=env, gpu=gpu, runner=runner, self_pids=frozenset({os.getpid()}))


def test_live_and_bundle_agree(tmp_path):
    live, _ = gather(fake_machine(tmp_path), import_torch=True)
    writer = build_bundle(ctx=fake_machine(tmp_path))
    out = tmp_path / "b.tar.gz"
    writer.write(out)
    back = collect_bundle(out)
    for key in KEYS:
        assert live[key].available, (key, live[key])
        assert back.value(key) == live.value(key), key
    assert live.value("cgroup.memory_limit_bytes") == 16 * 1024**3 and live.value("cgroup.oom_kill") == 1
    assert live.value("runtime.container") == "podman"
    assert "Driver/library version mismatch" in live.value("driver.nvml_error")
    assert "Driver/library version mismatch" in back.value("driver.nvml_error")  # kept in meta.json
    # existence-only signals travel as empty markers; the kernel log only as relevant lines
    assert writer.files["usr/local/vgpu/libvgpu.so"] == b""
    assert b"usb 1-1" not in writer.files["commands/dmesg.txt"]
    assert b"hf_secret" not in writer.files["proc/self/environ"]
