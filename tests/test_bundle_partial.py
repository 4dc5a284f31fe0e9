"""A bundle that lacks a source file gives Unavailable facts, never "none" facts.

`oomdoctor bundle` always writes proc/self/environ (and meta.json's nvml_error, and the cgroup files)
next to the marker files of the sharing layers; a bundle without them proves nothing absent. With the
source present and showing nothing, the facts stay definite ("no MPS", "no LD_PRELOAD").
"""

from __future__ import annotations

import json
from pathlib import Path

from oomdoctor.checks.engine import diagnose
from oomdoctor.cli import main
from oomdoctor.collectors.machine import collect_bundle
from oomdoctor.facts.keys import FACT_KEYS

META = {"format": "oomdoctor-bundle", "version": 1, "created": "2026-11-22T05:00:00+00:00"}
ENV_KEYS = ("sharing.mps", "sharing.hami", "sharing.vcuda", "sharing.cgpu", "sharing.runai", "sharing.ld_preload",
            "runtime.container", "runtime.kubernetes", "runtime.cuda_visible_devices", "runtime.nvidia_visible_devices",
            "runtime.env_redacted", "cuda.image_toolkit", "cuda.compat_libs", "cuda.module_loading",
            "torch.alloc_conf", "torch.no_caching")


def _bundle(root: Path, files: dict[str, str | bytes] | None = None, meta: dict | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "meta.json").write_text(json.dumps(meta or META))
    for rel, data in (files or {}).items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data.encode() if isinstance(data, str) else data)
    return root


def test_meta_only_bundle_has_no_definite_fact_but_its_time(tmp_path):
    f = collect_bundle(_bundle(tmp_path / "b"))
    definite = sorted(k for k in FACT_KEYS if f[k].available)
    assert definite == ["bundle.created"], definite
    for key in ENV_KEYS:
        assert "bundle:proc/self/environ not present" in f[key].reason, (key, f[key].reason)
    assert "meta.json" in f["driver.nvml_error"].reason
    # every gap names what the bundle lacks (workload.gpu_processes_self is derived from sharing.processes)
    vague = [k for k in FACT_KEYS if not f[k].available and "bundle" not in f[k].reason
             and "meta.json" not in f[k].reason and k != "workload.gpu_processes_self"]
    assert vague == [], {k: f[k].reason for k in vague}
    assert "nvidia-smi-q.xml" in f["sharing.mig"].reason and "nvidia-smi-q.xml" in f["sharing.processes"].reason


def test_meta_only_bundle_verdict_reads_no_layer(tmp_path, capsys):
    root = _bundle(tmp_path / "b")
    report = diagnose(collect_bundle(root), {"source": "bundle"})
    assert {s.value for s in report.layer_status.values()} == {"unknown"}
    assert report.verdict.category.value == "unknown"
    assert "no layer could be read" in report.verdict.summary
    assert main(["doctor", "--bundle", str(root)]) == 0
    out = capsys.readouterr().out
    assert "layers read" not in out and "none/empty: sharing" not in out


def test_environment_present_and_silent_keeps_none_facts(tmp_path):
    f = collect_bundle(_bundle(tmp_path / "b", {"proc/self/environ": b"HOME=/root\0PATH=/usr/bin\0"},
                               {**META, "nvml_error": None}))
    for key in ("sharing.mps", "sharing.hami", "sharing.vcuda", "sharing.cgpu", "sharing.runai",
                "runtime.cuda_visible_devices", "cuda.image_toolkit", "cuda.module_loading", "torch.alloc_conf",
                "driver.nvml_error"):
        assert f[key].available and f.value(key) is None, key
    assert f.value("sharing.ld_preload") == [] and f.value("cuda.compat_libs") == []
    assert f.value("runtime.kubernetes") is False and f.value("runtime.container") == "none"


def test_positive_signs_count_without_the_environment(tmp_path):
    f = collect_bundle(_bundle(tmp_path / "b", {"usr/local/vgpu/libvgpu.so": "", "etc/vcuda/vcuda.sock": "",
                                                "etc/ld.so.preload": "/usr/local/vgpu/libvgpu.so\n", ".dockerenv": ""}))
    assert f.value("sharing.hami")["libvgpu"] is True
    assert f.value("sharing.vcuda")["socket"] is True
    assert f.value("sharing.ld_preload") == ["/usr/local/vgpu/libvgpu.so"]
    assert "LD_PRELOAD unknown" in f.source("sharing.ld_preload")
    assert f.value("runtime.container") == "docker"


def test_cgroup_files_missing_is_unknown_not_unlimited(tmp_path):
    mounts = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime 0 0\n"
    f = collect_bundle(_bundle(tmp_path / "none", {"proc/mounts": mounts, "proc/self/cgroup": "0::/\n"}))
    assert f.value("cgroup.version") == 2
    assert not f["cgroup.memory_limit_bytes"].available
    assert "sys/fs/cgroup/memory.max" in f["cgroup.memory_limit_bytes"].reason
    # a host's root cgroup, as `oomdoctor bundle` records it: cgroup.controllers and no memory.max
    f = collect_bundle(_bundle(tmp_path / "root", {"proc/mounts": mounts, "proc/self/cgroup": "0::/\n",
                                                   "sys/fs/cgroup/cgroup.controllers": "cpu memory\n"}))
    assert f["cgroup.memory_limit_bytes"].available and f.value("cgroup.memory_limit_bytes") is None
