"""GIVEN unreadable bundles or inputs WHEN read THEN one clear InputError naming the input (exit 2)."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from oomdoctor.cli import main
from oomdoctor.collectors.bundle_read import open_bundle
from oomdoctor.collectors.machine import collect_bundle
from oomdoctor.errors import InputError

BUNDLES = Path(__file__).parent / "fixtures" / "bundles"
SRC = Path(__file__).parents[1] / "src"


def make_tgz(path: Path, source: Path = BUNDLES / "seed_a100_k8s") -> bytes:
    with tarfile.open(path, "w:gz") as tar:
        tar.add(source, arcname="oomdoctor-bundle")
    return path.read_bytes()


def test_truncated_tarball(tmp_path):
    data = make_tgz(tmp_path / "ok.tar.gz")
    bad = tmp_path / "cut.tar.gz"
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError) as err:
        collect_bundle(bad)
    assert str(err.value).startswith(f"bundle {bad}: ") and "truncated" in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("content", [b"", b"\x1f\x8b\x08garbage-not-gzip" * 10, b"plain text, not a tarball\n",
                                     bytes(range(256)) * 40])
def test_corrupt_tarballs(tmp_path, content):
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(content)
    with pytest.raises(InputError) as err:
        collect_bundle(bad)
    assert str(err.value).startswith(f"bundle {bad}: ")


def test_gzip_of_garbage_is_not_a_tar(tmp_path):
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(gzip.compress(b"\x00\x01garbage" * 1000))
    with pytest.raises(InputError):
        collect_bundle(bad)


def test_missing_path(tmp_path):
    with pytest.raises(InputError) as err:
        collect_bundle(tmp_path / "nope")
    assert "no such file or directory" in str(err.value)


def test_member_size_limit(tmp_path, monkeypatch):
    monkeypatch.setattr("oomdoctor.collectors.bundle_safe.MAX_MEMBER_BYTES", 10)
    path = tmp_path / "big.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("logs/big.txt")
        info.size = 100
        tar.addfile(info, io.BytesIO(b"x" * 100))
    with pytest.raises(InputError) as err:
        collect_bundle(path)
    assert "larger than" in str(err.value)


def test_extraction_is_removed_afterwards(tmp_path):
    path = tmp_path / "b.tar.gz"
    make_tgz(path)
    with open_bundle(path) as root:
        extracted = root
        assert (root / "meta.json").exists()
    assert not extracted.exists()


def test_bundle_cli_bad_inputs_exit_2_with_one_line(tmp_path):
    env = {"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"}
    cases = [
        ["bundle", "-o", str(tmp_path / "x.tar.gz"), "--log", str(tmp_path / "missing.log")],
        ["bundle", "-o", str(tmp_path / "x.zip")],
    ]
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("kind: Pod\nspec: [unclosed\n")
    cases.append(["bundle", "-o", str(tmp_path / "x.tar.gz"), "--manifest", str(bad_yaml)])
    for argv in cases:
        out = subprocess.run([sys.executable, "-m", "oomdoctor", *argv], capture_output=True, text=True, env=env,
                             timeout=120)
        assert out.returncode == 2, (argv, out.stderr)
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert not (tmp_path / "x.tar.gz").exists()


def test_bundle_written_here_reads_back(tmp_path):
    log = tmp_path / "oom.log"
    log.write_text("RuntimeError: CUDA error: out of memory\n")
    pod = tmp_path / "pod.yaml"
    pod.write_text((BUNDLES / "cgroup_oom_137" / "k8s" / "pod.yaml").read_text())
    out = tmp_path / "node.tar.gz"
    assert main(["bundle", "-o", str(out), "--log", str(log), "--manifest", str(pod)]) == 0
    with tarfile.open(out) as tar:
        names = set(tar.getnames())
        meta = json.loads(tar.extractfile("oomdoctor-bundle/meta.json").read())
    assert {"oomdoctor-bundle/meta.json", "oomdoctor-bundle/proc/self/environ", "oomdoctor-bundle/commands/torch.json",
            "oomdoctor-bundle/logs/oom.log", "oomdoctor-bundle/k8s/pod.yaml"} <= names
    assert meta["format"] == "oomdoctor-bundle" and meta["version"] == 1 and meta["created"]
    facts = collect_bundle(out)
    assert facts.value("k8s.terminations")[0]["reason"] == "OOMKilled"
    assert facts.value("workload.oom_events")[0]["kind"] == "cuda_driver_oom"
    assert facts.has("kernel.release") and facts.has("host.mem_total_bytes")


@pytest.mark.parametrize("kind", ["truncated", "garbage", "binary_files"])
def test_doctor_cli_on_bad_bundles(tmp_path, kind):
    """The acceptance list: corrupt/truncated tarballs exit 2 with one line; garbage inside files does not."""
    good = make_tgz(tmp_path / "ok.tar.gz")
    target = tmp_path / "b.tar.gz"
    if kind == "truncated":
        target.write_bytes(good[: len(good) - 200])
    elif kind == "garbage":
        target.write_bytes(bytes(range(256)) * 100)
    else:
        root = tmp_path / "bin"
        root.mkdir()
        for rel in ("meta.json", "proc/version", "proc/mounts", "commands/nvidia-smi-q.xml", "commands/torch.json",
                    "proc/self/environ", "k8s/pod.yaml", "logs/x.log"):
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(b"\xff\xfe\x00\x01" * 500 + bytes(range(256)))
        target = root
    out = subprocess.run([sys.executable, "-m", "oomdoctor", "doctor", "--bundle", str(target), "--format", "json"],
                         capture_output=True, text=True, env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"},
                         timeout=120)
    assert "Traceback" not in out.stderr
    if kind == "binary_files":
        assert out.returncode in (0, 1), out.stderr
        assert json.loads(out.stdout)["schema_version"] == 1
    else:
        assert out.returncode == 2
        assert out.stderr.count("\n") == 1 and f"bundle {target}" in out.stderr
