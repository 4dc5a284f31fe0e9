"""GIVEN a config with fixable risks WHEN `audit --fix` THEN only the needed lines change (comments,
order, quoting, indentation kept byte for byte), the result validates and re-audits clean for the
fixed rules, and the input is never overwritten without --in-place."""

from __future__ import annotations

import difflib
import json
import shutil
from pathlib import Path

import kubernetes_validate
import pytest
from kubernetes_validate import utils

from oomdoctor.checks.audit import audit
from oomdoctor.checks.audit.fix import fix_config
from oomdoctor.cli import main
from oomdoctor.collectors.configs import load_config
from oomdoctor.parsers.config_file import parse_config

FIX = Path(__file__).parent / "fixtures" / "configs"
FIXABLE = {
    "helm-trainer-deployment.yaml": {"AUD001"},
    "pytorchjob-ddp.yaml": {"AUD001"},
    "cronjob-nightly-finetune.yaml": {"AUD003"},
    "job-gpu-requests-mismatch.yaml": {"AUD007"},
    "list-kubectl-get.yaml": {"AUD001"},
    "statefulset-4space-indent.yaml": {"AUD001", "AUD007"},
    "compose-training.yml": {"AUD001"},
    "compose-bad-devices.yml": {"AUD001", "AUD002"},
    "train-docker.sh": {"AUD001"},
}


def _changes(before: str, after: str) -> list[tuple[str, list[str], list[str]]]:
    a, b = before.splitlines(), after.splitlines()
    ops = difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes()
    return [(tag, a[i1:i2], b[j1:j2]) for tag, i1, i2, j1, j2 in ops if tag != "equal"]


@pytest.mark.parametrize("name", sorted(FIXABLE))
def test_fix_removes_the_findings_and_changes_only_what_it_must(name):
    cfg = load_config(str(FIX / name))
    result = fix_config(cfg)
    assert result.changes and not result.skipped
    after = audit(parse_config(result.text, name))
    assert not ({a.finding.id for a in after} & FIXABLE[name])
    for tag, old, new in _changes(cfg.text, result.text):
        assert tag in ("insert", "replace"), (tag, old, new)
        # a replaced line is one value changed in place (new lines may follow it): the line keeps its
        # key and indentation, and at most a short token differs
        assert len(new) >= len(old)
        for o, n in zip(old, new):
            assert o.split(":")[0] == n.split(":")[0] or o.split()[:2] == n.split()[:2], (o, n)
            assert len(difflib.SequenceMatcher(a=o, b=n).get_matching_blocks()) <= 4, (o, n)
            assert abs(len(o) - len(n)) <= 16, (o, n)
    # every comment of the input survives, in order
    comments = [ln for ln in cfg.text.splitlines() if ln.lstrip().startswith("#")]
    assert [ln for ln in result.text.splitlines() if ln.lstrip().startswith("#")][: len(comments)] == comments \
        or all(c in result.text for c in comments)


@pytest.mark.parametrize("name", [n for n in sorted(FIXABLE) if n.endswith(".yaml")])
def test_patched_manifests_validate(name):
    cfg = load_config(str(FIX / name))
    fixed = parse_config(fix_config(cfg).text, name)
    for doc in fixed.docs:
        plain = json.loads(json.dumps(doc.data, default=str))
        for obj in plain.get("items", [plain]) if plain["kind"] == "List" else [plain]:
            try:
                kubernetes_validate.validate(obj, utils.latest_version(), strict=True)
            except utils.SchemaNotFoundError:
                assert obj["kind"] == "PyTorchJob"  # CRDs have no bundled schema


def test_fix_keeps_indentation_style_of_the_file():
    text = (FIX / "statefulset-4space-indent.yaml").read_text()
    out = fix_config(parse_config(text, "s.yaml")).text
    added = [n for _, old, new in _changes(text, out) for n in new[len(old):]]
    assert added == [
        "              volumeMounts:",
        "              - name: dshm",
        "                mountPath: /dev/shm",
        "            volumes:",
        "            - name: dshm",
        "              emptyDir:",
        "                  medium: Memory",
        "                  sizeLimit: 8Gi",
    ]
    assert "requests: {nvidia.com/gpu: 2, memory: 96Gi}" in out


def test_fix_appends_to_existing_lists_and_keeps_trailing_comment():
    text = (FIX / "cronjob-nightly-finetune.yaml").read_text()
    out = fix_config(parse_config(text, "c.yaml")).text
    assert "medium: Memory   # no sizeLimit: grows until the pod is OOMKilled\n                sizeLimit: 8Gi\n" in out


def test_shm_size_respects_a_small_memory_limit():
    text = ("apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: t\n    image: x\n"
            "    args: [--num-workers=4]\n    resources:\n      limits:\n        memory: 6Gi\n")
    out = fix_config(parse_config(text, "p.yaml")).text
    assert "sizeLimit: 1Gi" in out  # a quarter of 6 GiB, rounded down: never more than the limit can carry
    assert not {a.finding.id for a in audit(parse_config(out, "p.yaml"))} & {"AUD001", "AUD004"}


def test_docker_run_fix_inserts_flag_after_run():
    text = (FIX / "train-docker.sh").read_text()
    out = fix_config(parse_config(text, "t.sh")).text
    assert "docker run --shm-size=8g --rm -it --gpus all \\\n" in out
    assert len(out.splitlines()) == len(text.splitlines())


def test_cli_never_overwrites_without_in_place(tmp_path, capsys):
    src = tmp_path / "job.yaml"
    shutil.copy(FIX / "job-gpu-requests-mismatch.yaml", src)
    original = src.read_bytes()
    assert main(["audit", "--fix", str(src)]) == 2  # no -o, no --in-place
    assert main(["audit", "--fix", "-o", str(src), str(src)]) == 2
    assert src.read_bytes() == original
    out = tmp_path / "fixed.yaml"
    assert main(["audit", "--fix", "-o", str(out), str(src)]) == 0  # everything fixed -> exit 0
    assert src.read_bytes() == original and out.read_text() != original.decode()
    assert "[fixed]" in capsys.readouterr().out
    assert main(["audit", "--in-place", str(src)]) == 0
    assert (tmp_path / "job.yaml.bak").read_bytes() == original
    assert src.read_text() == out.read_text()


def test_cli_fix_json_reports_changes(tmp_path, capsys):
    out = tmp_path / "o.yml"
    assert main(["audit", "--fix", "-o", str(out), "--format", "json", str(FIX / "compose-training.yml")]) == 0
    doc = json.loads(capsys.readouterr().out)
    entry = doc["files"][0]
    assert entry["fix"]["output"] == str(out) and entry["fix"]["changes"]
    assert all(f["fixed"] for f in entry["findings"])
    assert 'shm_size: "8gb"' in out.read_text()


def test_clean_file_is_unchanged(tmp_path):
    out = tmp_path / "o.yaml"
    assert main(["audit", "--fix", "-o", str(out), str(FIX / "clean-helm-inference.yaml")]) == 0
    assert not out.exists()  # nothing to patch, nothing written
