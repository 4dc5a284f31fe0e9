"""`doctor --torch`: torch's build facts (arch list, CUDA, cuDNN) from a child process, with no CUDA call.

The venv's torch is a CPU build, so the CUDA case runs the real child script against a fake CUDA
`torch` package whose device functions fail loudly when called (`torch.cuda.init`, `is_available`,
device properties, `torch.backends.cudnn.version`, which checks every device's capability).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from oomdoctor.checks.engine import diagnose
from oomdoctor.collectors.context import CollectContext, CommandResult, CommandRunner
from oomdoctor.collectors.machine import gather
from oomdoctor.collectors.torch_child import MARKER, NOT_ASKED, run_torch_child, torch_version_file
from oomdoctor.parsers.gpu_snapshot import GpuSnapshot

SRC = str(Path(__file__).parents[1] / "src")

FAKE_TORCH = '''
import sys, types
__version__ = "2.13.0+cu130"

def _forbidden(name):
    def call(*args, **kwargs):
        sys.stderr.write("FORBIDDEN " + name + "\\n")
        raise AssertionError(name + " was called")
    return call

version = types.SimpleNamespace(cuda="13.0")
_C = types.SimpleNamespace(_cuda_getArchFlags=lambda: "sm_75 sm_80 sm_86 sm_90 sm_100 sm_120",
                           _cudnn=types.SimpleNamespace(getVersionInt=lambda: 91300))
cuda = types.SimpleNamespace(**{n: _forbidden("torch.cuda." + n) for n in (
    "init", "is_available", "device_count", "get_device_properties", "get_device_capability", "get_arch_list",
    "mem_get_info", "current_device", "set_device")})
backends = types.SimpleNamespace(cudnn=types.SimpleNamespace(version=_forbidden("torch.backends.cudnn.version")))
'''


class OneGpu:
    """A GPU backend with one GPU of the given compute capability."""

    def __init__(self, capability: str):
        self.capability = capability

    def snapshot(self) -> GpuSnapshot:
        gpu = {"index": 0, "name": "Tesla V100-SXM2-32GB", "uuid": "GPU-1", "capability": self.capability,
               "memory_total_bytes": 32 << 30, "memory_used_bytes": 4 << 20, "memory_free_bytes": (32 << 30) - (4 << 20)}
        return GpuSnapshot("NVML", driver_version="580.95.05", cuda_driver_version="13.0", gpus=[gpu])


class ChildOutput(CommandRunner):
    """The torch child's output, as given; records the argv."""

    def __init__(self, doc: dict):
        self.doc, self.calls = doc, []

    def run(self, argv, timeout=10.0, env=None):
        self.calls.append(tuple(argv))
        assert timeout and timeout > 0
        if argv[0] != sys.executable:
            return CommandResult(tuple(argv), None, "", "", f"{argv[0]}: not found")
        return CommandResult(tuple(argv), 0, MARKER + json.dumps(self.doc) + "\n", "")


@pytest.fixture()
def fake_cuda_torch(tmp_path, monkeypatch):
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(FAKE_TORCH)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    return CollectContext(root=tmp_path, env={}, gpu=None, runner=CommandRunner())


def test_build_child_reads_arch_list_and_cudnn_without_cuda_calls(fake_cuda_torch):
    data, why = run_torch_child(fake_cuda_torch, devices=False)
    assert why == "" and data["error"] is None, data
    assert data["version"] == "2.13.0+cu130" and data["cuda"] == "13.0" and data["cudnn"] == 91300
    assert data["arch_list"] == ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]
    assert data["cuda_available"] is None and data["devices"] == []


def test_the_fake_catches_device_queries(fake_cuda_torch):
    """The control: the child that asks for devices (probe, bundle) does hit the forbidden calls."""
    data, _ = run_torch_child(fake_cuda_torch, devices=True)
    assert "torch.cuda.is_available was called" in data["error"]


@pytest.mark.parametrize("arch,flagged", [(["sm_80", "sm_90", "sm_100", "sm_120"], True),
                                          (["sm_70", "sm_80", "sm_90"], False)])
def test_torch_facts_feed_the_arch_check(tmp_path, arch, flagged):
    doc = {"version": "2.13.0+cu130", "cuda": "13.0", "cudnn": 91300, "arch_list": arch, "cuda_available": None,
           "device_count": None, "devices": [], "error": None, "python": "3.11.7"}
    runner = ChildOutput(doc)
    ctx = CollectContext(root=tmp_path, env={}, gpu=OneGpu("7.0"), runner=runner)
    facts, _ = gather(ctx, import_torch=True, torch_devices=False)
    assert any(c[-1] == "build" for c in runner.calls)
    assert facts.value("cuda.arch_list") == arch and facts.value("torch.cudnn") == 91300
    assert facts.value("cuda.torch_runtime") == "13.0" and "child process" in facts.source("cuda.arch_list")
    for key in ("torch.cuda_available", "torch.device_count", "torch.devices"):
        assert facts[key].reason == NOT_ASKED
    report = diagnose(facts, {})
    cuda003 = [f for f in report.findings if f.id == "CUDA003"]
    assert bool(cuda003) is flagged
    if flagged:
        assert "7.0" in cuda003[0].title and cuda003[0].confidence.value == "high"


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs the venv's torch")
def test_doctor_torch_on_this_machine_with_a_cpu_build():
    """Real child, real torch: a CPU build answers 'no CUDA, no arch list, no cuDNN', and this process
    never imports torch."""
    code = ("import json, sys; from oomdoctor.collectors.machine import collect_live; "
            "f = collect_live(import_torch=True); "
            "print(json.dumps({k: [f[k].available, f.value(k), f.source(k)] for k in "
            "('torch.version', 'cuda.torch_runtime', 'cuda.arch_list', 'torch.cudnn', 'torch.devices')}));"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180,
                         env={**os.environ, "PYTHONPATH": SRC})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    facts, imported = json.loads(lines[-2]), lines[-1]
    assert imported == "False"
    version, _, _ = torch_version_file()  # torch/version.py as text
    assert facts["torch.version"][:2] == [True, version["version"]]
    if version.get("cuda") is None:  # CPU build: definite answers from the child, not gaps
        for key in ("cuda.torch_runtime", "cuda.arch_list", "torch.cudnn"):
            assert facts[key][:2] == [True, None] and "child process" in facts[key][2], key
    assert facts["torch.devices"][0] is False
