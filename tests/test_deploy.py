"""GIVEN deploy/ WHEN validated against the Kubernetes schemas (kubernetes-validate, strict) and audited
THEN every manifest is valid, least-privilege, and clean under `oomdoctor audit`."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
from kubernetes_validate import utils
from ruamel.yaml import YAML

from oomdoctor.checks.audit import audit
from oomdoctor.collectors.configs import load_config

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
MANIFESTS = sorted(DEPLOY.glob("*.yaml"))


def test_there_are_a_daemonset_and_a_job():
    kinds = {d["kind"] for p in MANIFESTS for d in YAML(typ="safe").load_all(p.read_text())}
    assert {"DaemonSet", "Job", "Namespace"} <= kinds


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_manifests_pass_kubernetes_validate(path):
    for doc in YAML(typ="safe").load_all(path.read_text()):
        kubernetes_validate.validate(doc, utils.latest_version(), strict=True)


@pytest.mark.parametrize("path", [p for p in MANIFESTS if p.name != "namespace.yaml"], ids=lambda p: p.name)
def test_least_privilege_and_clean_audit(path):
    doc = YAML(typ="safe").load(path.read_text())
    pod = doc["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False and pod["securityContext"]["runAsNonRoot"] is True
    for c in pod["containers"]:
        sc = c["securityContext"]
        assert sc["readOnlyRootFilesystem"] and not sc["privileged"] and not sc["allowPrivilegeEscalation"]
        assert sc["capabilities"]["drop"] == ["ALL"] and "add" not in sc["capabilities"]
        assert c["resources"]["requests"] and c["resources"]["limits"]
        assert "nvidia.com/gpu" not in c["resources"]["limits"]  # never takes a GPU away from jobs
        assert all(m.get("readOnly") for m in c["volumeMounts"] if m["name"].startswith("host-"))
    assert all("hostPath" not in v or v["name"].startswith("host-") for v in pod["volumes"])
    assert audit(load_config(str(path))) == []
