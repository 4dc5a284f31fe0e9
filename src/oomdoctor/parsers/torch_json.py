"""`commands/torch.json` (docs/contracts.md §5) and the torch child's output: validated, typed, never raises."""

from __future__ import annotations

import json
from typing import Any

FIELDS = ("version", "cuda", "cudnn", "arch_list", "cuda_available", "device_count", "devices", "error", "python")


class TorchJsonError(ValueError):
    pass


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and len(value) < 4096 else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def parse_torch_json(text: str) -> dict[str, Any]:
    """The torch facts as a dict of FIELDS; raises TorchJsonError when it is not a JSON object."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise TorchJsonError(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise TorchJsonError("not a JSON object")
    return normalise(data)


def normalise(data: dict[str, Any]) -> dict[str, Any]:
    devices = []
    for dev in data.get("devices") or []:
        if isinstance(dev, dict):
            cap = dev.get("capability")
            if isinstance(cap, list) and len(cap) == 2 and all(isinstance(c, int) for c in cap):
                cap = f"{cap[0]}.{cap[1]}"
            devices.append({"name": _str(dev.get("name")), "total_memory": _int(dev.get("total_memory")),
                            "capability": _str(cap), "uuid": _str(dev.get("uuid"))})
    arch = data.get("arch_list")
    return {
        "version": _str(data.get("version")),
        "cuda": _str(data.get("cuda")),
        "cudnn": _int(data.get("cudnn")),
        "arch_list": [a for a in arch if isinstance(a, str)] if isinstance(arch, list) else None,
        "cuda_available": data.get("cuda_available") if isinstance(data.get("cuda_available"), bool) else None,
        "device_count": _int(data.get("device_count")),
        "devices": devices,
        "error": _str(data.get("error")),
        "python": _str(data.get("python")),
    }


_VERSION_PY_FIELDS = {"__version__": "version", "cuda": "cuda"}


def parse_torch_version_py(text: str) -> dict[str, Any]:
    """`torch/version.py` (generated at build time) read as text: version and CUDA without importing torch."""
    import re

    out: dict[str, Any] = {}
    for name, field in _VERSION_PY_FIELDS.items():
        m = re.search(rf"^{re.escape(name)}\s*(?::[^=\n]*)?=\s*(?:'([^'\n]*)'|\"([^\"\n]*)\"|None)\s*$", text, re.M)
        if m:
            out[field] = m.group(1) if m.group(1) is not None else m.group(2)
    return out
