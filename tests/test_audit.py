"""GIVEN realistic manifests, compose files and docker run scripts WHEN audited THEN each OOM risk is
found where it is (and clean configs stay clean); bad input is one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oomdoctor.checks.audit import AUDIT_CHECKS, audit
from oomdoctor.cli import main
from oomdoctor.collectors.configs import load_config
from oomdoctor.errors import InputError
from oomdoctor.parsers.config_file import parse_config

FIX = Path(__file__).parent / "fixtures" / "configs"

EXPECTED = {
    "aliyun-gpushare.yaml": {"AUD012"},
    "clean-helm-inference.yaml": set(),
    "clean-pytorchjob.yaml": set(),
    "compose-bad-devices.yml": {"AUD001", "AUD002", "AUD014"},
    "compose-clean.yml": set(),
    "compose-training.yml": {"AUD001"},
    "cronjob-nightly-finetune.yaml": {"AUD003"},
    "daemonset-low-memory.yaml": {"AUD005", "AUD006"},
    "deployment-timeslicing.yaml": {"AUD008"},
    "gpu-manager-vcuda.yaml": {"AUD011"},
    "hami-inference.yaml": {"AUD009"},
    "helm-trainer-deployment.yaml": {"AUD001"},
    "job-gpu-requests-mismatch.yaml": {"AUD007"},
    "list-kubectl-get.yaml": {"AUD001", "AUD006"},
    "mig-job.yaml": {"AUD010"},
    "pod-gpu-init-container.yaml": {"AUD001", "AUD005", "AUD007"},  # init containers are audited (session 27)
    "pod-nvidia-visible-all.yaml": {"AUD013"},
    "pod-request-over-limit.yaml": {"AUD015"},  # the API server rejects it; not an AUD006 QoS note
    "pytorchjob-ddp.yaml": {"AUD001"},
    "run-clean.sh": set(),
    "statefulset-4space-indent.yaml": {"AUD001", "AUD007"},
    "statefulset-shm-over-limit.yaml": {"AUD004"},
    "train-docker.sh": {"AUD001", "AUD013"},
}


def test_every_fixture_is_listed_and_there_are_enough():
    files = {p.name for p in FIX.iterdir() if p.is_file()}
    assert files == set(EXPECTED)
    assert len(files) >= 15


def test_every_rule_is_exercised_by_a_fixture():
    covered = set().union(*EXPECTED.values())
    assert covered == set(AUDIT_CHECKS)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_findings(name):
    findings = audit(load_config(str(FIX / name)))
    assert {a.finding.id for a in findings} == EXPECTED[name]
    for a in findings:
        assert a.finding.evidence and a.finding.remedy and a.line


def test_locations_point_at_the_container_and_helm_template():
    [a] = audit(load_config(str(FIX / "helm-trainer-deployment.yaml")))
    assert (a.object, a.container, a.line) == ("Deployment/vision-trainer", "trainer", 57)
    assert a.origin == "vision-trainer/templates/deployment.yaml"
    assert a.finding.severity.value == "error" and a.finding.category.value == "shm_exhausted"
    assert any("8 (--num-workers=8)" in e.value for e in a.finding.evidence)


def test_pytorchjob_roles_are_audited_separately():
    objs = sorted(a.object for a in audit(load_config(str(FIX / "pytorchjob-ddp.yaml"))))
    assert objs == ["PyTorchJob/llama-sft [Master]", "PyTorchJob/llama-sft [Worker]"]


@pytest.mark.parametrize("yaml_text,expected", [
    # hostIPC, a hostPath /dev/shm and a disk emptyDir all lift the 64 MiB limit
    ("hostIPC: true\n  containers: [{name: t, image: x, args: [--num-workers=4]}]", set()),
    ("containers: [{name: t, image: x, args: [--num-workers=4], volumeMounts: [{name: s, mountPath: /dev/shm}]}]\n"
     "  volumes: [{name: s, hostPath: {path: /dev/shm}}]", set()),
    ("containers: [{name: t, image: x, args: [--num-workers=0]}]", set()),
    ("containers: [{name: t, image: x, args: [--num-workers=2]}]", {"AUD001"}),
    ("containers: [{name: t, image: x, command: [torchrun, --nproc_per_node=8, t.py]}]", {"AUD001"}),
    ("containers: [{name: t, image: x, env: [{name: NVIDIA_VISIBLE_DEVICES, value: all},"
     " {name: NVIDIA_DRIVER_CAPABILITIES, value: utility}]}]", set()),
    ("containers: [{name: t, image: x, resources: {limits: {nvidia.com/gpu: '0.5'}}, "
     "volumeMounts: [{name: s, mountPath: /dev/shm}]}]\n  volumes: [{name: s, emptyDir: {medium: Memory, sizeLimit: 1Gi}}]",
     {"AUD006", "AUD007"}),
])
def test_rule_edges(yaml_text, expected):
    text = f"apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec:\n  {yaml_text}\n"
    assert {a.finding.id for a in audit(parse_config(text, "p.yaml"))} == expected


def test_docker_run_parsing_handles_quotes_continuations_and_comments():
    cfg = load_config(str(FIX / "train-docker.sh"))
    assert len(cfg.workloads) == 2  # the commented-out `docker run` is ignored
    first, second = (w.containers[0] for w in cfg.workloads)
    assert first.gpus == "all" and first.gpu_count is None and ("NUM_WORKERS", "8") in first.env
    assert first.args[:2] == ("python", "train.py")
    assert second.gpu_count == 2 and second.shm_size == 8 * 2**30


def test_compose_merge_keys_and_device_problems():
    cfg = load_config(str(FIX / "compose-bad-devices.yml"))
    trainer = next(w for w in cfg.workloads if w.name == "trainer").containers[0]
    assert len(trainer.problems) == 2  # count+device_ids, missing capabilities
    assert trainer.shm_size == 64 * 2**20


@pytest.mark.parametrize("name,message", [
    ("bad/malformed.yaml", "malformed YAML at line 9"),
    ("bad/unknown-kind.yaml", "unknown kind 'TrainingRecipe'"),
    ("bad/unrendered.yaml", "line 4: unrendered template"),
])
def test_bad_inputs_one_line_exit_2(name, message, capsys):
    assert main(["audit", str(FIX / name)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("content,message", [
    (b"\x00\x01binary", "binary file"),
    (b"\xff\xfe\xfa bad", "not valid UTF-8"),
    (b"", "empty file"),
    (b"# only a comment\n", "no YAML documents"),
    (b"just some words\n", "not a Kubernetes manifest"),
    (b"#!/bin/sh\necho hi\n", "no `docker run`"),
    (b"docker run --gpus all 'unterminated\n", "cannot parse"),
])
def test_unreadable_inputs(tmp_path, content, message, capsys):
    p = tmp_path / ("x.sh" if b"docker" in content else "x.yaml")
    p.write_bytes(content)
    assert main(["audit", str(p)]) == 2
    assert message in capsys.readouterr().err


def test_missing_file(capsys):
    assert main(["audit", "/nonexistent/pod.yaml"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_prometheus_templates_in_rendered_output_are_not_unrendered_helm():
    cfg = load_config(str(FIX / "clean-helm-inference.yaml"))
    assert [w.kind for w in cfg.workloads] == ["Deployment"]


def test_json_contract_and_exit_codes(capsys):
    assert main(["audit", "--format", "json", str(FIX / "compose-clean.yml"), str(FIX / "mig-job.yaml")]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema_version"] == 1 and doc["tool_version"]
    assert [f["path"] for f in doc["files"]] == [str(FIX / "compose-clean.yml"), str(FIX / "mig-job.yaml")]
    f = doc["files"][1]["findings"][0]
    assert set(f) >= {"id", "layer", "severity", "confidence", "category", "title", "evidence", "remedy"}
    assert f["layer"] == "gpu_sharing"
    assert main(["audit", str(FIX / "compose-clean.yml"), str(FIX / "run-clean.sh")]) == 0


def test_html_report(capsys):
    assert main(["audit", "--format", "html", str(FIX / "hami-inference.yaml")]) == 1
    html = capsys.readouterr().out
    assert html.startswith("<!doctype html>") and "AUD009" in html and "<script" not in html


def test_planted_secrets_never_echoed(capsys):
    files = [str(FIX / n) for n in ("pod-nvidia-visible-all.yaml", "pytorchjob-ddp.yaml", "train-docker.sh")]
    for fmt in ("text", "json", "html"):
        main(["audit", "--format", fmt, *files])
        out = capsys.readouterr().out
        assert "hf_AbCdEfGh" not in out and "0123456789abcdef0123" not in out


def test_unknown_kind_next_to_workloads_is_not_an_error():
    text = (FIX / "helm-trainer-deployment.yaml").read_text() + "---\napiVersion: x/v1\nkind: Whatever\nspec: {}\n"
    cfg = parse_config(text, "x.yaml")
    assert [w.kind for w in cfg.workloads] == ["Deployment"]


def test_generic_pod_template_search_for_unknown_crd():
    text = ("apiVersion: ray.io/v1\nkind: RayJob\nmetadata: {name: r}\nspec:\n  rayClusterSpec:\n    workerGroupSpecs:\n"
            "    - groupName: gpu\n      template:\n        spec:\n          containers:\n"
            "          - {name: w, image: rayproject/ray-ml:2.9.0-gpu, resources: {limits: {nvidia.com/gpu: 1}}}\n")
    [w] = parse_config(text, "ray.yaml").workloads
    assert w.kind == "RayJob" and w.containers[0].name == "w"
    with pytest.raises(InputError):
        parse_config("apiVersion: v1\nkind: Foo\nmetadata: {name: f}\n", "f.yaml")


def test_stdin_is_recognised_by_content(monkeypatch, capsys):
    import io
    import sys

    manifest = ("apiVersion: v1\nkind: Pod\nmetadata: {name: ci}\nspec:\n  containers:\n  - name: c\n    image: docker:27\n"
                "    command: [sh, -c, 'docker run --gpus all trainer python train.py']\n")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(manifest.encode())))
    assert main(["audit", "--format", "json", "-"]) == 0  # a Pod (no GPU), not a script
    assert json.loads(capsys.readouterr().out)["files"][0]["type"] == "kubernetes"
    script = b"docker run --gpus all trainer python train.py --num-workers 8\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(script)))
    assert main(["audit", "--format", "json", "-"]) == 1
    assert json.loads(capsys.readouterr().out)["files"][0]["type"] == "docker-run"
