"""Check registration: a stable id, its layer, and a doc string that becomes docs/checks/<id>.md.

A check is a pure function `(FactSet) -> Iterable[Finding]`. Its docstring explains *why* the rule
holds and cites the documented behaviour it follows (a URL or a source key of environment-facts.md).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from oomdoctor.facts import FactSet, Finding, Layer

CheckFn = Callable[[FactSet], Iterable[Finding]]


@dataclass(frozen=True)
class CheckSpec:
    id: str
    layer: Layer
    title: str
    fn: CheckFn

    @property
    def doc(self) -> str:
        return inspect.cleandoc(self.fn.__doc__ or "")


CHECKS: dict[str, CheckSpec] = {}


def check(check_id: str, layer: Layer, title: str) -> Callable[[CheckFn], CheckFn]:
    """Register a check. Ids are unique and never reused for a different rule."""

    def register(fn: CheckFn) -> CheckFn:
        if check_id in CHECKS:
            raise ValueError(f"duplicate check id {check_id}")
        CHECKS[check_id] = CheckSpec(check_id, layer, title, fn)
        return fn

    return register


# --- audit-fleet: rules over job configs (manifests, compose, docker run) -------------------------
# Same id/layer/title/doc contract as CHECKS, but a rule takes a `Workload` and the file's path and
# yields `AuditFinding`s (oomdoctor.checks.audit.base). Pages: docs/checks/AUDxxx.md.
AUDIT_CHECKS: dict[str, CheckSpec] = {}


def audit_check(check_id: str, layer: Layer, title: str) -> Callable[[Callable], Callable]:
    def register(fn: Callable) -> Callable:
        if check_id in AUDIT_CHECKS or check_id in CHECKS:
            raise ValueError(f"duplicate check id {check_id}")
        AUDIT_CHECKS[check_id] = CheckSpec(check_id, layer, title, fn)
        return fn

    return register
