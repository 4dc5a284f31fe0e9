"""`/proc/driver/nvidia/version`: driver version and kernel-module flavour.

Proprietary: `NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Wed Jul 26 ...`
Open:        `NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.195.03  Release Build ...`
The pitfall (environment-facts §5c): a regex like `Kernel Module\\s+(\\d+)` misses the open flavour,
because "for x86_64" sits between. We take the first dotted number after the word "Module".
"""

from __future__ import annotations

import re

_AFTER_MODULE = re.compile(r"Module\b.*?\b(\d{2,4}\.\d{1,4}(?:\.\d{1,4})?)\b")
_SYS_MODULE = re.compile(r"^\s*(\d{2,4}\.\d{1,4}(?:\.\d{1,4})?)\s*$")


def parse_driver_version_file(text: str) -> tuple[str | None, str | None]:
    """(version, flavour) where flavour is 'open', 'proprietary' or None when unknown."""
    for line in text.splitlines():
        if "NVRM version" not in line:
            continue
        m = _AFTER_MODULE.search(line)
        version = m.group(1) if m else None
        flavour = "open" if "Open Kernel Module" in line else ("proprietary" if "Kernel Module" in line else None)
        return version, flavour
    return None, None


def parse_sys_module_version(text: str) -> str | None:
    """`/sys/module/nvidia/version`: just the version."""
    m = _SYS_MODULE.match(text)
    return m.group(1) if m else None


def driver_branch(version: str | None) -> int | None:
    """535 for '535.129.03'."""
    if not version:
        return None
    m = re.match(r"(\d{2,4})\.", version)
    return int(m.group(1)) if m else None
