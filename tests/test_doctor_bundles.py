"""End to end: collect_bundle over the scenario bundles, then diagnose; verdict and key finding ids.

The bundles are written by tests/fixtures/bundles/generate.py (doctor-collect); the seed case also ships
as examples/seed-a100-k8s. Skipped only while the collectors are not on this branch.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

machine = pytest.importorskip("oomdoctor.collectors.machine")

from oomdoctor.checks.engine import diagnose  # noqa: E402
from oomdoctor.cli import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BUNDLES = ROOT / "tests" / "fixtures" / "bundles"

# scenario -> (verdict, finding ids that must be present, ids that must be absent)
EXPECTED = {
    "seed_a100_k8s": ("context_or_driver", {"DRV003", "SHR004", "SHR011", "DRV008", "CUDA001", "STO001", "WRK001"}, set()),
    "old_driver_new_torch": ("context_or_driver", {"CUDA001", "FWK002"}, set()),
    "docker_shm_64m": ("shm_exhausted", {"STO001", "STO003"}, {"SHR011"}),
    "hami_slice": ("gpu_sharing_limit", {"SHR003", "WRK001"}, {"SHR010"}),
    "other_processes": ("other_process", {"SHR010"}, {"SHR011"}),
    "cgroup_oom_137": ("host_oom", {"RES001", "RES004"}, {"SHR011"}),
    "mig_slice": ("gpu_sharing_limit", {"SHR001"}, set()),
    "healthy_node": ("unknown", set(), {"SHR011"}),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_scenario_bundle(name):
    verdict, present, absent = EXPECTED[name]
    report = diagnose(machine.collect_bundle(BUNDLES / name), {"source": "bundle"})
    found = {f.id for f in report.findings}
    assert report.verdict.category.value == verdict, report.verdict.summary
    assert present <= found, present - found
    assert not (absent & found)


def test_every_scenario_bundle_is_covered():
    on_disk = {p.name for p in BUNDLES.iterdir() if p.is_dir()}
    assert on_disk == set(EXPECTED)


def test_seed_key_findings_say_what_the_issue_asks():
    report = diagnose(machine.collect_bundle(BUNDLES / "seed_a100_k8s"), {})
    by = {f.id: f for f in report.findings}
    assert "3.10" in by["DRV003"].title and "535" in by["DRV003"].title and by["DRV003"].confidence.value == "high"
    assert "vcuda" in by["SHR004"].title
    assert "4.00 MiB" in by["DRV008"].title and "abnormal" in by["DRV008"].title
    assert "11.3" in by["CUDA001"].title and "fine by NVIDIA's rules" in by["CUDA001"].title
    assert "64.00 MiB" in by["STO001"].title


def test_healthy_bundle_has_nothing_at_error_or_above():
    report = diagnose(machine.collect_bundle(BUNDLES / "healthy_node"), {})
    assert [f.id for f in report.findings if f.severity.rank >= 2] == []


def test_cli_on_the_shipped_example(capsys):
    example = ROOT / "examples" / "seed-a100-k8s"
    if not example.is_dir():
        pytest.skip("examples/seed-a100-k8s not on this branch")
    assert main(["doctor", "--bundle", str(example), "--format", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"]["category"] == "context_or_driver"
    assert [layer["name"] for layer in doc["layers"]][0] == "resources" and len(doc["layers"]) == 8


def test_nvml_error_in_a_bundle_names_the_bundle_as_its_source(tmp_path):
    """Walkthrough (session 26): in `doctor --bundle`, DRV001's evidence said "(from NVML)", as if this machine's
    NVML had answered; the error was read from the bundle's meta.json (NVML on the machine that made it)."""
    import shutil

    bundle = tmp_path / "b"
    shutil.copytree(BUNDLES / "healthy_node", bundle)
    meta = json.loads((bundle / "meta.json").read_text())
    meta["nvml_error"] = "NVML library not found (libnvidia-ml.so.1)"
    (bundle / "meta.json").write_text(json.dumps(meta))
    facts = machine.collect_bundle(bundle)
    assert facts.source("driver.nvml_error").startswith("bundle:meta.json")
    drv = [f for f in diagnose(facts, {"source": "bundle"}).findings if f.id == "DRV001"]
    assert drv and all("bundle:meta.json" in e.source and e.source != "NVML" for e in drv[0].evidence)
