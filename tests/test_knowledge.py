"""The documented tables, spot-checked against environment-facts.md, and the rules built on them."""

from __future__ import annotations

import pytest

from oomdoctor.knowledge import kernels, torch_arch
from oomdoctor.knowledge.cuda_driver import (
    BRANCH_MAX_CUDA,
    TOOLKIT_MIN_DRIVER,
    branch_max_cuda,
    runtime_on_driver,
)
from oomdoctor.knowledge.versions import cuda_mm, kernel_mm, vtuple
from oomdoctor.knowledge.xid import XIDS


def test_table_1a_minima():
    assert TOOLKIT_MIN_DRIVER[(12, 2)] == "535.54.03"
    assert TOOLKIT_MIN_DRIVER[(11, 3)] == "465.19.01"
    assert TOOLKIT_MIN_DRIVER[(13, 0)] == "580.65.06"
    assert TOOLKIT_MIN_DRIVER[(12, 8)] == "570.26"
    assert (12, 7) not in TOOLKIT_MIN_DRIVER  # there is no 12.7 toolkit


def test_table_1c_branch_max():
    assert BRANCH_MAX_CUDA[535] == (12, 2) and BRANCH_MAX_CUDA[580] == (13, 0) and BRANCH_MAX_CUDA[470] == (11, 4)
    assert branch_max_cuda("535.129.03") == (12, 2)
    assert branch_max_cuda("535.54.02") == (12, 1)  # just below 12.2's GA minimum


@pytest.mark.parametrize("runtime,driver,dmax,status", [
    ("11.3", "535.129.03", "12.2", "native"),       # the seed: fine
    ("12.8", "535.129.03", None, "mvc"),            # same major, >= 525.60.13
    ("13.0", "570.124.06", "12.8", "too_old"),      # torch 2.12 default wheels on a 570 host
    ("12.0", "470.82.01", None, "too_old"),         # other major, no MVC across majors
    ("11.8", "450.80.02", None, "mvc"),             # 11.1-11.8 family minimum
    ("10.2", "418.39", None, "too_old"),            # 10.x has no MVC
    ("12.4", None, "12.4", "native"),
    (None, "535.1", None, "unknown"),
])
def test_runtime_on_driver(runtime, driver, dmax, status):
    assert runtime_on_driver(runtime, driver, dmax).status == status


def test_versions():
    assert vtuple("535.129.03") == (535, 129, 3) and vtuple("n/a") is None
    assert cuda_mm(12020) == (12, 2) and cuda_mm("cu118") == (11, 8) and cuda_mm("11.3.109") == (11, 3)
    assert kernel_mm("Linux version 3.10.0-1062.9.1.el7.x86_64 (mockbuild@)") == (3, 10, 0)


def test_kernel_tables():
    assert kernels.floor_for_branch(570).floor == (4, 15, 0)
    assert kernels.floor_for_branch(535).floor == (3, 10, 0)
    assert kernels.floor_for_branch(470).floor == (2, 6, 32)
    assert {d.distro for d in kernels.validated_for_cuda((12, 5))} >= {"RHEL/CentOS 8", "Ubuntu 22.04"}
    assert "RHEL/CentOS 7" not in {d.distro for d in kernels.validated_for_cuda((12, 5))}
    assert kernels.el7_minor("3.10.0-1062.9.1.el7.x86_64") == "7.7"
    assert kernels.el7_minor("3.10.0-1160.119.1.el7.x86_64") == "7.9"
    assert kernels.is_el7("3.10.0-1062.9.1.el7.x86_64") and not kernels.is_el7("5.4.0-150-generic")


def test_arch_coverage_rules():
    cu126 = torch_arch.arch_list_from_spec("5.0;6.0;7.0;7.5;8.0;8.6;9.0")
    assert torch_arch.covers(cu126, (8, 9))       # sm_86 SASS runs on 8.9 (same major)
    assert not torch_arch.covers(cu126, (12, 0))  # Blackwell consumer needs cu128+
    cu130 = torch_arch.variant_arch_list("2.9.0+cu130", None)
    assert not torch_arch.covers(cu130, (7, 0))   # Volta lost in CUDA-13 builds
    assert torch_arch.covers(cu130, (12, 1))      # compute_120 PTX JITs forward
    assert torch_arch.parse_capability([8, 0]) == (8, 0) and torch_arch.parse_capability("sm_90") == (9, 0)


def test_xid_kinds():
    assert XIDS[31].kind == "app" and XIDS[79].kind == "hardware" and XIDS[92].kind == "info"
