"""GIVEN a machine (or a bundle) where no NVIDIA driver answered WHEN doctor gives each layer its status THEN the
layers about the GPU (gpu_sharing, cuda, driver) are `unknown` with a reason a user understands, not `ok` from
empty readings; a finding at warning or above still sets the status, and the exit code stays that of the findings.

Session 26: on a machine without a driver, `doctor` showed gpu_sharing and cuda "OK" while every fact there was
"none/empty" or "unavailable (NVML library not found ...)" (session 25 had fixed the driver layer the same way).
"""

from __future__ import annotations

import json
from pathlib import Path

from oomdoctor.checks.engine import diagnose, layer_statuses
from oomdoctor.cli import main
from oomdoctor.collectors.context import CollectContext, NoCommands
from oomdoctor.collectors.machine import gather
from oomdoctor.facts import Fact, FactSet, Unavailable
from oomdoctor.facts.model import LayerStatus
from oomdoctor.facts.report import report_from_json
from oomdoctor.parsers.gpu_snapshot import GpuSnapshot

NO_NVML = "NVML library not found (libnvidia-ml.so.1): no NVIDIA driver libraries here"
GPU_LAYERS = ("gpu_sharing", "cuda", "driver")
ROOT = Path(__file__).resolve().parents[1]


class NoDriver:
    """The GPU backend of a machine without an NVIDIA driver, as NVML answers there."""

    def snapshot(self) -> GpuSnapshot:
        return GpuSnapshot("NVML", error=NO_NVML, nvml_error=NO_NVML)


def _no_gpu_machine(tmp_path: Path, env: dict[str, str] | None = None) -> FactSet:
    """A live collection of a machine without a driver: its own root, its environment, no commands."""
    ctx = CollectContext(root=tmp_path, env=env or {"HOME": "/root"}, gpu=NoDriver(), runner=NoCommands())
    facts, _ = gather(ctx, import_torch=False, torch_devices=False)
    return facts


def _status(report, name: str) -> str:
    return report.layer_status[name].value


def test_no_driver_makes_the_gpu_layers_unknown_with_a_reason(tmp_path):
    facts = _no_gpu_machine(tmp_path)
    # the layers were not empty: the sharing variables were read ("not set") and so was the image's CUDA
    assert facts["sharing.hami"].available and facts.value("sharing.hami") is None
    assert not facts["sharing.mig"].available and not facts["cuda.driver_max"].available
    report = diagnose(facts, {"source": "live"})
    assert [_status(report, n) for n in GPU_LAYERS] == ["unknown"] * 3
    reasons = report.layer_reason
    assert reasons["gpu_sharing"].startswith("no NVIDIA driver answered:")
    assert "MIG" in reasons["gpu_sharing"] and "processes on the GPU" in reasons["gpu_sharing"]
    assert "CUDA" in reasons["cuda"] and "compute capability" in reasons["cuda"]
    assert reasons["driver"].startswith("no NVIDIA driver answered:")
    # layers that were read keep no reason, and the verdict does not count the GPU layers as read
    assert "runtime" not in reasons and _status(report, "runtime") == "ok"
    assert "gpu_sharing" not in report.verdict.summary.split("layers read:")[1]
    assert "cuda" not in report.verdict.summary.split("layers read:")[1]


def test_a_sharing_variable_at_warning_still_sets_the_status_without_a_gpu(tmp_path):
    # HAMi's preload and limit, MPS's pinned limit: real findings from the environment alone
    hami = diagnose(_no_gpu_machine(tmp_path, {"LD_PRELOAD": "/usr/local/vgpu/libvgpu.so",
                                               "CUDA_DEVICE_MEMORY_LIMIT": "4g"}), {})
    assert _status(hami, "gpu_sharing") == "warn" and "gpu_sharing" not in hami.layer_reason
    assert "SHR003" in {f.id for f in hami.findings}
    mps = diagnose(_no_gpu_machine(tmp_path, {"CUDA_MPS_PIPE_DIRECTORY": "/tmp/mps",
                                              "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=1G"}), {})
    assert _status(mps, "gpu_sharing") == "warn"
    # MPS without a limit is an info finding: it still shows, the layer stays unknown
    info = diagnose(_no_gpu_machine(tmp_path, {"CUDA_MPS_PIPE_DIRECTORY": "/tmp/mps"}), {})
    assert "SHR002" in {f.id for f in info.findings}
    assert _status(info, "gpu_sharing") == "unknown"


def test_the_layers_are_read_where_the_gpu_facts_were():
    def statuses(*entries):
        return layer_statuses(FactSet(entries), [])

    env_only = [Fact("sharing.hami", None, "environment"), Fact("cuda.image_toolkit", None, "environment"),
                Unavailable("sharing.processes", NO_NVML, "NVML"), Unavailable("cuda.driver_max", NO_NVML, "NVML")]
    s = statuses(*env_only)
    assert (s["gpu_sharing"], s["cuda"]) == (LayerStatus.UNKNOWN, LayerStatus.UNKNOWN)
    s = statuses(*env_only, Fact("sharing.processes", [], "NVML"), Fact("cuda.driver_max", "12.8", "NVML"))
    assert (s["gpu_sharing"], s["cuda"]) == (LayerStatus.OK, LayerStatus.OK)
    # torch's device list gives the compute capability (a bundle without nvidia-smi): the cuda layer is read
    s = statuses(*env_only, Fact("cuda.device_capabilities", ["8.0"], "bundle:commands/torch.json"))
    assert s["cuda"] is LayerStatus.OK


def test_the_reason_says_whose_answer_is_missing():
    from oomdoctor.checks.engine import layer_reasons

    bundle = FactSet([Fact("sharing.hami", None, "bundle:proc/self/environ"),
                      Unavailable("sharing.mig", "commands/nvidia-smi-q.xml not in the bundle",
                                  "bundle:commands/nvidia-smi-q.xml")])
    why = layer_reasons(bundle, layer_statuses(bundle, []))
    assert why["gpu_sharing"].startswith("the bundle holds no usable reading of an NVIDIA driver")
    # the driver's version from /proc/driver/nvidia/version, NVML failing: the GPUs were not listed
    half = FactSet([Fact("driver.version", "550.54.15", "/proc/driver/nvidia/version"),
                    Fact("sharing.hami", None, "environment"),
                    Unavailable("sharing.processes", "Driver/library version mismatch", "NVML")])
    why = layer_reasons(half, layer_statuses(half, []))
    assert "driver" not in why and why["gpu_sharing"].startswith("the NVIDIA driver's version was read, but not its GPUs")
    # a layer with nothing read at all
    assert layer_reasons(FactSet(), layer_statuses(FactSet(), []))["workload"] == "none of this layer's facts could be read"


def _no_gpu_bundle(root: Path, env: bytes = b"HOME=/root\0PATH=/usr/bin\0") -> Path:
    """A bundle of a healthy machine without a driver: environment, memory, /dev/shm; no nvidia-smi."""
    files = {"meta.json": json.dumps({"format": "oomdoctor-bundle", "version": 1, "created": "2026-11-28T10:00:00Z",
                                      "nvml_error": NO_NVML}),
             "proc/self/environ": env,
             "proc/meminfo": "MemTotal:       16384000 kB\nMemAvailable:   12000000 kB\nSwapTotal: 0 kB\n",
             "proc/mounts": "shm /dev/shm tmpfs rw,nosuid,nodev,size=8388608k 0 0\n",
             "proc/version": "Linux version 6.8.0-45-generic (buildd@lcy02) (gcc 13.2.0) #45-Ubuntu SMP\n"}
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data if isinstance(data, bytes) else data.encode())
    return root


def test_doctor_on_a_no_gpu_bundle_shows_why_and_exits_0(tmp_path, capsys):
    root = _no_gpu_bundle(tmp_path / "b")
    assert main(["doctor", "--bundle", str(root)]) == 0  # unknown layers are no finding: the exit code is unchanged
    text = capsys.readouterr().out
    assert "| gpu_sharing | OK" not in text and "| cuda        | OK" not in text
    assert "why unknown: the bundle holds no usable reading of an NVIDIA driver" in text
    assert main(["doctor", "--bundle", str(root), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    layers = {layer["name"]: layer for layer in doc["layers"]}
    assert [layers[n]["status"] for n in GPU_LAYERS] == ["unknown"] * 3
    assert "MIG" in layers["gpu_sharing"]["status_reason"]
    assert layers["storage"]["status"] == "ok" and layers["storage"]["status_reason"] is None
    # the reason survives a round trip through JSON (diff and fleet read reports back)
    back = report_from_json(doc)
    assert back.layer_reason["gpu_sharing"] == layers["gpu_sharing"]["status_reason"]
    assert main(["doctor", "--bundle", str(root), "--format", "html"]) == 0
    assert "why unknown: the bundle holds no usable reading" in capsys.readouterr().out


def test_a_hami_bundle_without_nvidia_smi_still_warns(tmp_path, capsys):
    root = _no_gpu_bundle(tmp_path / "b", b"HOME=/root\0LD_PRELOAD=/usr/local/vgpu/libvgpu.so\0"
                                          b"CUDA_DEVICE_MEMORY_LIMIT=4096m\0")
    assert main(["doctor", "--bundle", str(root), "--format", "json"]) == 1
    layers = {layer["name"]: layer for layer in json.loads(capsys.readouterr().out)["layers"]}
    assert layers["gpu_sharing"]["status"] == "warn" and layers["gpu_sharing"]["status_reason"] is None
    assert layers["cuda"]["status"] == "unknown"


def test_the_seed_example_keeps_its_statuses():
    from oomdoctor.collectors.machine import collect_bundle

    report = diagnose(collect_bundle(ROOT / "examples" / "seed-a100-k8s"), {"source": "bundle"})
    assert {n: s.value for n, s in report.layer_status.items()} == {
        "resources": "ok", "runtime": "ok", "gpu_sharing": "warn", "cuda": "ok", "driver": "fail",
        "storage": "warn", "framework": "ok", "workload": "warn"}
    assert report.layer_reason == {}


def test_a_cpu_only_torch_is_the_cuda_layers_reason():
    """Walkthrough (session 26): on a machine with a +cpu torch the cuda layer said the generic "no NVIDIA driver
    answered"; the first thing to know is that this PyTorch cannot use a GPU at all, and how to get one that can."""
    from oomdoctor.checks.engine import layer_reasons

    def why(version: str) -> str:
        facts = FactSet([Fact("torch.version", version, "torch"), Fact("cuda.torch_runtime", None, "torch"),
                         Fact("cuda.arch_list", [], "torch"),
                         Unavailable("cuda.driver_max", NO_NVML, "NVML"),
                         Unavailable("cuda.device_capabilities", NO_NVML, "NVML")])
        return layer_reasons(facts, layer_statuses(facts, []))["cuda"]

    cpu = why("2.5.1+cpu")
    assert "CPU-only build" in cpu and "2.5.1+cpu" in cpu and "torch.version.cuda is None" in cpu
    assert "download.pytorch.org/whl/cu" in cpu
    assert "CPU-only" not in why("2.5.1+rocm6.2")  # ROCm builds have no torch.version.cuda either
    # without torch read, the reason stays the driver's
    facts = FactSet([Fact("cuda.arch_list", [], "torch"), Unavailable("cuda.driver_max", NO_NVML, "NVML")])
    assert layer_reasons(facts, layer_statuses(facts, []))["cuda"].startswith("no NVIDIA driver answered")
