"""PyTorch wheel variants and their compiled GPU architectures (environment-facts.md section 3b).

A cubin for sm_XY runs on sm_XZ with Z >= Y (same major); PTX (compute_XY) JIT-compiles for any newer
GPU. So a GPU is covered when the arch list holds sm_<major><m> with m <= its minor, or compute_XY <= it.
"""

from __future__ import annotations

import re

SOURCE = "pytorch/pytorch .ci/manywheel/build_cuda.sh and RELEASE.md [PTCI][PTBUILDER][PTTESTFIX][PTREL]"

# (variant, torch versions (from, to) inclusive as (major, minor), TORCH_CUDA_ARCH_LIST x86_64)
VARIANT_ARCHS: tuple[tuple[str, tuple[int, int], tuple[int, int], str], ...] = (
    ("cu102", (1, 10), (1, 12), "3.7;5.0;6.0;7.0"),
    ("cu116", (1, 12), (2, 0), "3.7;5.0;6.0;7.0;7.5;8.0;8.6"),
    ("cu117", (1, 12), (2, 0), "3.7;5.0;6.0;7.0;7.5;8.0;8.6"),
    ("cu118", (2, 0), (2, 7), "3.7;5.0;6.0;7.0;7.5;8.0;8.6;9.0"),
    ("cu121", (2, 1), (2, 5), "5.0;6.0;7.0;7.5;8.0;8.6;9.0"),
    ("cu124", (2, 4), (2, 6), "5.0;6.0;7.0;7.5;8.0;8.6;9.0+PTX"),
    ("cu126", (2, 6), (2, 14), "5.0;6.0;7.0;7.5;8.0;8.6;9.0"),
    ("cu128", (2, 7), (2, 7), "7.5;8.0;8.6;9.0;10.0;12.0+PTX"),
    ("cu128", (2, 8), (2, 10), "7.0;7.5;8.0;8.6;9.0;10.0;12.0"),
    ("cu129", (2, 8), (2, 8), "7.0;7.5;8.0;8.6;9.0;10.0;12.0+PTX"),
    ("cu130", (2, 9), (2, 14), "7.5;8.0;8.6;9.0;10.0;12.0+PTX"),
    ("cu132", (2, 12), (2, 14), "7.5;8.0;8.6;9.0;10.0;12.0+PTX"),
)


def arch_list_from_spec(spec: str) -> list[str]:
    """'7.5;8.0;9.0+PTX' -> ['sm_75', 'sm_80', 'sm_90', 'compute_90'] (torch.cuda.get_arch_list() form)."""
    out: list[str] = []
    for part in spec.split(";"):
        part = part.strip()
        ptx = part.endswith("+PTX")
        num = part.replace("+PTX", "").replace(".", "")
        if not (num.isascii() and num.isdigit()):
            continue
        out.append(f"sm_{num}")
        if ptx:
            out.append(f"compute_{num}")
    return out


def variant_arch_list(torch_version: str, cuda: tuple[int, int] | None) -> list[str] | None:
    """The documented arch list of a release wheel, from '2.8.0+cu128' or torch version + CUDA."""
    m = re.match(r"\s*(\d+)\.(\d+)", str(torch_version))
    if not m:
        return None
    tv = (int(m.group(1)), int(m.group(2)))
    tag = re.search(r"\+(cu\d+)", str(torch_version))
    variant = tag.group(1) if tag else (f"cu{cuda[0]}{cuda[1]}" if cuda else None)
    if not variant:
        return None
    for v, lo, hi, spec in VARIANT_ARCHS:
        if v == variant and lo <= tv <= hi:
            return arch_list_from_spec(spec)
    return None


def _cc(text: str) -> tuple[int, int] | None:
    m = re.fullmatch(r"(?:sm_|compute_)?(\d+)(?:\.(\d))?([a-z]?)", str(text).strip())
    if not m:
        return None
    if m.group(2) is not None:
        return (int(m.group(1)), int(m.group(2)))
    digits = m.group(1)
    return (int(digits[:-1]), int(digits[-1])) if len(digits) >= 2 else None


def parse_capability(value: object) -> tuple[int, int] | None:
    """(8, 0) from '8.0', [8, 0], (8, 0), 'sm_80' or 80."""
    if isinstance(value, (list, tuple)) and len(value) == 2:
        try:
            return (int(value[0]), int(value[1]))
        except (TypeError, ValueError):
            return None
    return _cc(str(value))


def covers(arch_list: list[str], capability: tuple[int, int]) -> bool:
    """Does a build with this arch list run kernels on a GPU of this compute capability?"""
    for arch in arch_list:
        a = str(arch).strip()
        cc = _cc(a)
        if cc is None:
            continue
        if a.startswith("compute_") and cc <= capability:
            return True
        if not a.startswith("compute_") and cc[0] == capability[0] and cc[1] <= capability[1]:
            return True
    return False
