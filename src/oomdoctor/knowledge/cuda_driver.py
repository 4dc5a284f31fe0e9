"""CUDA toolkit <-> NVIDIA driver tables (environment-facts.md section 1).

Rule from [MVC]: `driver >= MVC minimum of the major` is *necessary* for a minor version of that major;
`driver >= toolkit driver of that exact release` is *sufficient*. A driver branch's "max CUDA" (the
number nvidia-smi prints) is derived from table 1a's GA minima [RN132].
"""

from __future__ import annotations

from dataclasses import dataclass

from oomdoctor.knowledge.versions import cuda_mm, driver_branch, vtuple

RN132 = "https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/ (Table 3, [RN132])"
MVC = "https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html [MVC]"
FWD = "https://docs.nvidia.com/deploy/cuda-compatibility/forward-compatibility.html [FWD]"

# Table 1a: every release row, Linux x86_64 minimum driver [RN132].
TOOLKIT_DRIVER_ROWS: tuple[tuple[str, str], ...] = (
    ("13.2 U2", "595.71.05"), ("13.2 U1", "595.58.03"), ("13.2 GA", "595.45.04"),
    ("13.1 U1", "590.48.01"), ("13.1 GA", "590.44.01"),
    ("13.0 U2", "580.95.05"), ("13.0 U1", "580.82.07"), ("13.0 GA", "580.65.06"),
    ("12.9 U1", "575.57.08"), ("12.9 GA", "575.51.03"),
    ("12.8 U1", "570.124.06"), ("12.8 GA", "570.26"),
    ("12.6 U3", "560.35.05"), ("12.6 U1/U2", "560.35.03"), ("12.6 GA", "560.28.03"),
    ("12.5 U1", "555.42.06"), ("12.5 GA", "555.42.02"),
    ("12.4 U1", "550.54.15"), ("12.4 GA", "550.54.14"),
    ("12.3 U1", "545.23.08"), ("12.3 GA", "545.23.06"),
    ("12.2 U2", "535.104.05"), ("12.2 U1", "535.86.09"), ("12.2 GA", "535.54.03"),
    ("12.1 GA/U1", "530.30.02"),
    ("12.0 U1", "525.85.12"), ("12.0 GA", "525.60.13"),
    ("11.8 GA", "520.61.05"),
    ("11.7 U1", "515.48.07"), ("11.7 GA", "515.43.04"),
    ("11.6 U1/U2", "510.47.03"), ("11.6 GA", "510.39.01"),
    ("11.5 GA/U1/U2", "495.29.05"),
    ("11.4 U3/U4", "470.82.01"), ("11.4 U1/U2", "470.57.02"), ("11.4 GA", "470.42.01"),
    ("11.3 GA/U1", "465.19.01"),
    ("11.2 U1/U2", "460.32.03"), ("11.2 GA", "460.27.03"),
    ("11.1 U1", "455.32"), ("11.1 GA", "455.23"),
    ("11.0 U3", "450.51.06"), ("11.0 GA", "450.51.05"),
    ("10.2 GA", "440.33"), ("10.1 GA", "418.39"), ("10.0 GA", "410.48"),
)


def _ga_minima() -> dict[tuple[int, int], str]:
    out: dict[tuple[int, int], str] = {}
    for label, drv in TOOLKIT_DRIVER_ROWS:
        mm = cuda_mm(label.split()[0])
        assert mm is not None
        if mm not in out or vtuple(drv) < vtuple(out[mm]):  # type: ignore[operator]
            out[mm] = drv
    return out


# The lowest driver any release of a minor version needs: what "CUDA X.Y" (torch.version.cuda) requires.
TOOLKIT_MIN_DRIVER: dict[tuple[int, int], str] = _ga_minima()

# Table 1b: minor-version-compatibility minima per family [RN12x][RN132][MVC]. None: no MVC (10.x).
MVC_MIN_DRIVER: dict[str, str | None] = {"13": "580", "12": "525.60.13", "11.1+": "450.80.02", "11.0": "450.36.06",
                                         "10": None}

# Table 1c: driver branch -> max CUDA it supports (GA minima of 1a). 565 -> 12.7 is unverified, left out.
BRANCH_MAX_CUDA: dict[int, tuple[int, int]] = {
    int(drv.split(".")[0]): mm for mm, drv in sorted(TOOLKIT_MIN_DRIVER.items()) if mm >= (11, 0)
}


@dataclass(frozen=True)
class Compat:
    """How a CUDA runtime fares on a driver: 'native', 'mvc', 'too_old' or 'unknown', with the why."""

    status: str
    needed: str | None  # the toolkit driver of that minor (sufficient)
    mvc_min: str | None  # the MVC minimum of the family (necessary), if any
    driver_max: tuple[int, int] | None
    reason: str


def mvc_min_for(cuda: tuple[int, int]) -> str | None:
    major, minor = cuda
    if major >= 13:
        return MVC_MIN_DRIVER["13"]
    if major == 12:
        return MVC_MIN_DRIVER["12"]
    if major == 11:
        return MVC_MIN_DRIVER["11.0"] if minor == 0 else MVC_MIN_DRIVER["11.1+"]
    return None


def toolkit_min_driver(cuda: tuple[int, int]) -> str | None:
    return TOOLKIT_MIN_DRIVER.get(cuda)


def branch_max_cuda(driver_version: object) -> tuple[int, int] | None:
    """Max CUDA of a driver from table 1c: the highest minor whose GA minimum the driver meets."""
    dv = vtuple(driver_version)
    if not dv:
        return None
    best = None
    for mm, drv in TOOLKIT_MIN_DRIVER.items():
        if dv >= vtuple(drv) and (best is None or mm > best):  # type: ignore[operator]
            best = mm
    return best


def runtime_on_driver(runtime: object, driver_version: object, driver_max: object = None) -> Compat:
    """Can a CUDA runtime `runtime` run on this driver? Uses the driver's reported max CUDA when given."""
    rt = cuda_mm(runtime)
    dv = vtuple(driver_version)
    dmax = cuda_mm(driver_max) if driver_max else (branch_max_cuda(driver_version) if dv else None)
    if rt is None or (dv is None and dmax is None):
        return Compat("unknown", None, None, dmax, "not enough version information")
    needed = toolkit_min_driver(rt)
    mvc = mvc_min_for(rt)
    if dmax is not None and rt <= dmax:
        return Compat("native", needed, mvc, dmax, f"the driver supports CUDA up to {dmax[0]}.{dmax[1]}")
    if dv is not None and needed and dv >= vtuple(needed):  # type: ignore[operator]
        return Compat("native", needed, mvc, dmax, f"driver >= {needed}, the CUDA {rt[0]}.{rt[1]} toolkit driver")
    if dv is not None and mvc and dmax is not None and dmax[0] == rt[0] and dv >= vtuple(mvc):  # type: ignore[operator]
        return Compat("mvc", needed, mvc, dmax, f"same major {rt[0]}, driver >= the MVC minimum {mvc}")
    if dv is None and dmax is not None and dmax[0] == rt[0] and rt[0] >= 11:
        return Compat("mvc", needed, mvc, dmax, f"same major {rt[0]} (minor version compatibility)")
    return Compat("too_old", needed, mvc, dmax, "the driver is older than the runtime needs")


def branch_of(driver_version: object) -> int | None:
    return driver_branch(driver_version)
