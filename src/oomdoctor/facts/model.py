"""The vocabulary every report shares: layers, root-cause categories, findings.

Names and order come from docs/contracts.md §§1, 2 and 4; scripts match them, so keep them exact.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class Layer(str, Enum):
    """The eight layers, in the order of an outside-in investigation (and of the report)."""

    RESOURCES = "resources"
    RUNTIME = "runtime"
    GPU_SHARING = "gpu_sharing"
    CUDA = "cuda"
    DRIVER = "driver"
    STORAGE = "storage"
    FRAMEWORK = "framework"
    WORKLOAD = "workload"


LAYERS: tuple[str, ...] = tuple(layer.value for layer in Layer)


class Category(str, Enum):
    """Root-cause categories used by `explain` hypotheses and the `doctor` verdict."""

    TRUE_CAPACITY = "true_capacity"
    FRAGMENTATION = "fragmentation"
    OTHER_PROCESS = "other_process"
    LEAK_IN_CODE = "leak_in_code"
    CONTEXT_OR_DRIVER = "context_or_driver"
    SHM_EXHAUSTED = "shm_exhausted"
    HOST_OOM = "host_oom"
    GPU_SHARING_LIMIT = "gpu_sharing_limit"
    NOT_OOM = "not_oom"
    UNKNOWN = "unknown"


CATEGORIES: tuple[str, ...] = tuple(c.value for c in Category)


class Severity(str, Enum):
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        return _SEVERITY_RANK[self]


_SEVERITY_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.ERROR: 2, Severity.CRITICAL: 3}


class Confidence(str, Enum):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"

    @property
    def rank(self) -> int:
        return {"low": 0, "medium": 1, "high": 2}[self.value]


class LayerStatus(str, Enum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Evidence:
    """One fact that supports a finding, and where it was read."""

    fact: str
    value: str
    source: str

    def __str__(self) -> str:
        return f"{self.fact} = {self.value} (from {self.source})"


@dataclass(frozen=True)
class Finding:
    """A conclusion of one check. `id` is stable and has a page in docs/checks/<id>.md."""

    id: str
    layer: Layer
    severity: Severity
    confidence: Confidence
    title: str
    remedy: str
    category: Category | None = None
    evidence: tuple[Evidence, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "layer": self.layer.value,
            "severity": self.severity.value,
            "confidence": self.confidence.value,
            "category": self.category.value if self.category else None,
            "title": self.title,
            "evidence": [str(e) for e in self.evidence],
            "remedy": self.remedy,
        }


@dataclass(frozen=True)
class Verdict:
    category: Category
    summary: str
    finding_ids: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return {"category": self.category.value, "summary": self.summary, "findings": list(self.finding_ids)}
