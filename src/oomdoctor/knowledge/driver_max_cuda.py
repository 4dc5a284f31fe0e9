"""Driver branch -> highest CUDA it supports, from the toolkit/driver table (environment-facts §1c, [RN132]).

Only used when nothing better is available (no NVML, no nvidia-smi XML): the integer from
`nvmlSystemGetCudaDriverVersion_v2` or `<cuda_version>` always wins. Facts derived from this table
carry the source "derived".
"""

from __future__ import annotations

import re

BRANCH_MAX_CUDA: dict[int, str] = {
    410: "10.0", 418: "10.1", 440: "10.2", 450: "11.0", 455: "11.1", 460: "11.2", 465: "11.3",
    470: "11.4", 495: "11.5", 510: "11.6", 515: "11.7", 520: "11.8", 525: "12.0", 530: "12.1",
    535: "12.2", 545: "12.3", 550: "12.4", 555: "12.5", 560: "12.6", 570: "12.8", 575: "12.9",
    580: "13.0", 590: "13.1", 595: "13.2",
}


def max_cuda_for_driver(version: str | None) -> str | None:
    """'12.2' for '535.129.03'; the closest lower known branch for unlisted ones (e.g. 565 -> 12.6)."""
    if not version:
        return None
    m = re.match(r"(\d{3})\.", version)
    if not m:
        return None
    branch = int(m.group(1))
    known = [b for b in BRANCH_MAX_CUDA if b <= branch]
    return BRANCH_MAX_CUDA[max(known)] if known else None
