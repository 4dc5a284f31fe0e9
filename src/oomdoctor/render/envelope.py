"""The JSON envelope every document carries (docs/contracts.md §4)."""

from __future__ import annotations

import json
from typing import Any

from oomdoctor._version import __version__

SCHEMA_VERSION = 1


def envelope(payload: dict[str, Any]) -> dict[str, Any]:
    return {"schema_version": SCHEMA_VERSION, "tool_version": __version__, **payload}


def dumps(payload: dict[str, Any]) -> str:
    """Stable, readable JSON with the envelope first."""
    return json.dumps(envelope(payload), indent=2, sort_keys=False, default=str) + "\n"
