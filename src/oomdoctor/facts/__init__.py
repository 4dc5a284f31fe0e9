"""Plain frozen facts: the leaf layer. Stdlib only, no I/O."""

from oomdoctor.facts.base import Fact, FactSet, Unavailable
from oomdoctor.facts.model import (
    CATEGORIES,
    LAYERS,
    Category,
    Confidence,
    Evidence,
    Finding,
    Layer,
    Severity,
    Verdict,
)

__all__ = [
    "CATEGORIES",
    "LAYERS",
    "Category",
    "Confidence",
    "Evidence",
    "Fact",
    "FactSet",
    "Finding",
    "Layer",
    "Severity",
    "Unavailable",
    "Verdict",
]
