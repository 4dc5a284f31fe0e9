"""Audit rules over job configs (Kubernetes manifests, compose files, `docker run` lines).

Importing this package registers every rule in `checks.registry.AUDIT_CHECKS`.
"""

from __future__ import annotations

from oomdoctor.checks.audit import gpu, resources, sharing, storage  # noqa: F401  (registration)
from oomdoctor.checks.audit.base import AuditFinding
from oomdoctor.checks.registry import AUDIT_CHECKS
from oomdoctor.parsers.config_file import ConfigFile


def audit(cfg: ConfigFile) -> list[AuditFinding]:
    """Every finding of every rule for every workload of a file, worst first, then in file order."""
    out: list[AuditFinding] = []
    for w in cfg.workloads:
        for spec in AUDIT_CHECKS.values():
            out.extend(spec.fn(w, cfg.path))
    out.sort(key=lambda a: (-a.finding.severity.rank, a.line or 0, a.finding.id))
    return out


__all__ = ["AUDIT_CHECKS", "AuditFinding", "audit"]
