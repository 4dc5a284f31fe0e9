"""Driver layer: driver vs kernel, NVML health, Xid, ECC / retired pages / remapped rows, idle memory."""

from __future__ import annotations

from collections.abc import Iterator

from oomdoctor.checks._util import (
    Category,
    Confidence,
    FactSet,
    Finding,
    Layer,
    Severity,
    as_int,
    as_list,
    ev,
    ev_value,
    finding,
    gpus,
    truthy,
)
from oomdoctor.checks.registry import check
from oomdoctor.knowledge import kernels
from oomdoctor.knowledge.cuda_driver import RN132, branch_max_cuda
from oomdoctor.knowledge.versions import driver_branch, fmt, kernel_mm
from oomdoctor.knowledge.xid import SOURCE as XID_SOURCE
from oomdoctor.knowledge.xid import XIDS

L = Layer.DRIVER
RELOAD = ("reload the driver so user space and kernel module match: stop GPU jobs, then "
          "`sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && sudo modprobe nvidia nvidia_uvm` "
          "(or reboot the node); in a container, restart it after the host is fixed")


@check("DRV001", L, "NVML cannot talk to the driver")
def nvml_error(facts: FactSet) -> Iterator[Finding]:
    """NVML (libnvidia-ml) failed to initialise.

    "Driver/library version mismatch" means the user-space driver libraries were upgraded while the old
    kernel module is still loaded (or a container mounted libraries of another version): CUDA context
    creation fails the same way, so every GPU job on the node fails at start-up. Other NVML errors
    (library not found) usually mean the container was started without the `utility` driver capability
    or without a GPU at all. Source: environment-facts.md section 5c [MISMATCH], [NCT].
    """
    err = facts.value("driver.nvml_error")
    if not err:
        return
    text = str(err)
    if "mismatch" in text.lower():
        yield finding("DRV001", L, Severity.CRITICAL, Confidence.HIGH,
                      "NVML reports 'Driver/library version mismatch': the loaded kernel module and the user-space "
                      "driver differ", RELOAD, Category.CONTEXT_OR_DRIVER, [ev(facts, "driver.nvml_error")])
    else:
        yield finding("DRV001", L, Severity.INFO, Confidence.MEDIUM, f"NVML is not usable here: {text}",
                      "if this machine has NVIDIA GPUs, run with the driver's utility capability "
                      "(NVIDIA_DRIVER_CAPABILITIES=compute,utility) and check `nvidia-smi`",
                      None, [ev(facts, "driver.nvml_error")])


@check("DRV002", L, "Kernel below the driver branch's compile-time floor")
def kernel_floor(facts: FactSet) -> Iterator[Finding]:
    """Each driver branch has a minimum Linux kernel it builds on.

    Up to 505 the README says 2.6.32; 510 raised it to 3.10; from 560 the module's `nv-linux.h` refuses
    kernels older than 4.15 ("This driver does not support kernels older than Linux 4.15!"). Below the
    floor the driver is at best an unsupported build. Source: environment-facts.md 2b [SGFXI62][NVLINUXH][SYNO].
    """
    branch = driver_branch(facts.value("driver.version"))
    kv = kernel_mm(facts.value("kernel.release"))
    if branch is None or kv is None:
        return
    floor = kernels.floor_for_branch(branch)
    if floor and kv < floor.floor:
        yield finding("DRV002", L, Severity.CRITICAL, Confidence.HIGH,
                      f"Kernel {fmt(kv)} is below driver {branch}'s floor {fmt(floor.floor)}",
                      f"upgrade the host kernel to >= {fmt(floor.floor)} (a distro kernel NVIDIA validates), "
                      "or install a driver branch that supports this kernel",
                      Category.CONTEXT_OR_DRIVER,
                      [ev(facts, "kernel.release"), ev(facts, "driver.version"),
                       ev_value("kernel floor", fmt(floor.floor), floor.source)])


@check("DRV003", L, "Kernel older than the kernels the driver's CUDA release is validated on")
def kernel_validated(facts: FactSet) -> Iterator[Finding]:
    """The CUDA Installation Guide lists the distro kernels each release is qualified on (table 2a).

    Driver branch B supports CUDA up to X.Y (table 1c); the guide for X.Y validates RHEL 8 (4.18), Ubuntu
    20.04 (5.4) / 22.04 (5.15), SLES 15 (4.12.14), Debian 10 (4.19) and, until CUDA 12.4 only, RHEL/CentOS 7
    with kernel 3.10. Drivers from 560 no longer build below 4.15. So a 3.10 kernel under a CUDA 12 driver
    is the end-of-life tail of support, and on anything but an EL7 kernel it was never validated. The seed
    case (000: kernel 3.10.0-1062.el7, driver 535, intermittent "CUDA error: out of memory" while the GPU
    was empty) was fixed by moving the host to kernel 4.19. Sources: environment-facts.md 2a/2b
    [IG112][IG1201][IG124][GCPOPS1719][NVLINUXH].
    """
    drv = facts.value("driver.version")
    rel = facts.value("kernel.release")
    kv = kernel_mm(rel)
    cuda = branch_max_cuda(drv)
    if cuda is None or kv is None:
        return
    rows = kernels.validated_for_cuda(cuda)
    if not rows:
        return
    non_el7 = [r for r in rows if not r.distro.startswith("RHEL/CentOS 7")]
    lowest = min(r.kernel for r in non_el7) if non_el7 else None
    el7_row = next((r for r in rows if r.distro.startswith("RHEL/CentOS 7")), None)
    if lowest is None or kv >= lowest:
        return
    evidence = [ev(facts, "kernel.release"), ev(facts, "driver.version"),
                ev_value("driver branch max CUDA", fmt(cuda), RN132),
                ev_value("lowest validated non-EL7 kernel", fmt(lowest),
                         ", ".join(f"{r.distro} {fmt(r.kernel)}" for r in non_el7) + " " + kernels.IG)]
    branch = driver_branch(drv)
    remedy = (f"move the host to a kernel >= {fmt(lowest)} that NVIDIA validates for CUDA {fmt(cuda)} "
              "(e.g. RHEL/Rocky 8 4.18, Ubuntu 20.04 5.4, Debian 10 4.19; a kernel 3.10 host with driver 535 stopped failing on 4.19), "
              "then reinstall the driver for that kernel")
    if kernels.is_el7(str(rel)) and el7_row is not None:
        minor = kernels.el7_minor(str(rel))
        if cuda >= (12, 0):
            yield finding(
                "DRV003", L, Severity.ERROR, Confidence.HIGH,
                f"Kernel {rel} (RHEL/CentOS {minor or '7'}) is below what driver {branch} (CUDA {fmt(cuda)}) is "
                f"validated on: every validated kernel is >= {fmt(lowest)} except EL7's end-of-life 3.10 entry",
                remedy + "; or stay on EL7 with a driver branch whose CUDA is 11.x (<= 520)",
                Category.CONTEXT_OR_DRIVER, evidence)
        else:
            yield finding(
                "DRV003", L, Severity.INFO, Confidence.MEDIUM,
                f"Kernel {rel} is the RHEL/CentOS 7 kernel, validated for CUDA {fmt(cuda)} (driver {branch})",
                "no action needed now; RHEL/CentOS 7 support ends with CUDA 12.4 and drivers >= 560 need kernel 4.15",
                None, evidence)
        return
    yield finding(
        "DRV003", L, Severity.ERROR, Confidence.HIGH,
        f"Kernel {fmt(kv)} is older than every {'non-EL7 ' if el7_row else ''}kernel CUDA {fmt(cuda)} "
        f"(driver {branch}) is validated on (lowest: {fmt(lowest)})", remedy, Category.CONTEXT_OR_DRIVER, evidence)


@check("DRV004", L, "Xid errors in the kernel log")
def xid_events(facts: FactSet) -> Iterator[Finding]:
    """Xid lines say why the GPU stopped a program, and they separate bugs, hardware and capacity.

    Xid 13/31/43 are program errors (illegal address, faulted channel): the "OOM" was not capacity.
    48/63/64/79/94/95/119/120 are GPU health: ECC, retired pages, fallen off the bus, GSP. A genuine
    capacity OOM produces no Xid at all. Source: environment-facts.md section 9 [NVERR][XIDCAT][XIDLEGACY].
    """
    events = [e for e in as_list(facts.value("driver.xid_events")) if isinstance(e, dict)]
    by_code: dict[int, list[dict]] = {}
    for e in events:
        code = as_int(e.get("code"))
        if code is not None:
            by_code.setdefault(code, []).append(e)
    for code, items in sorted(by_code.items()):
        x = XIDS.get(code)
        example = str(items[0].get("text") or items[0].get("line") or "")
        evidence = [ev_value("driver.xid_events", f"Xid {code} x{len(items)}: {example}", facts.source("driver.xid_events"))]
        if x is None:
            yield finding("DRV004", L, Severity.WARNING, Confidence.LOW, f"Xid {code} seen {len(items)} time(s)",
                          f"look Xid {code} up in NVIDIA's catalog ({XID_SOURCE}) and follow its action",
                          None, evidence)
        elif x.kind == "app":
            yield finding("DRV004", L, Severity.WARNING, Confidence.MEDIUM,
                          f"Xid {code} ({x.mnemonic}) seen {len(items)} time(s): {x.meaning}", x.action,
                          Category.NOT_OOM, evidence)
        elif x.kind == "info":
            yield finding("DRV004", L, Severity.INFO, Confidence.MEDIUM,
                          f"Xid {code} ({x.mnemonic}) seen {len(items)} time(s): {x.meaning}", x.action, None, evidence)
        else:
            sev = Severity.CRITICAL if code in (79, 95, 64) else Severity.ERROR
            cat = Category.CONTEXT_OR_DRIVER if code in (79, 119, 120) else Category.NOT_OOM
            yield finding("DRV004", L, sev, Confidence.HIGH,
                          f"Xid {code} ({x.mnemonic}) seen {len(items)} time(s): {x.meaning}", x.action, cat, evidence)


@check("DRV005", L, "Retired pages or remapped rows pending / failed")
def memory_health(facts: FactSet) -> Iterator[Finding]:
    """Retired pages (pre-Ampere) and remapped rows (Ampere+) take bad memory out of service.

    A pending retirement or remap activates only after a GPU reset; until then the bad row stays in use.
    A remap failure means the GPU ran out of spare rows: an RMA candidate. A GPU that needs a reset
    (reset_required) fails new work. Source: environment-facts.md section 8 [NVMLRET][NVMLREMAP][DPR].
    """
    for g in gpus(facts):
        idx = g.get("index")
        gev = [ev_value(f"driver.gpus[{idx}]", {k: g.get(k) for k in ("name", "retired_pages", "retired_pending",
               "remapped_pending", "remapped_failure", "reset_required") if k in g}, facts.source("driver.gpus"))]
        if truthy(g.get("remapped_failure")):
            yield finding("DRV005", L, Severity.CRITICAL, Confidence.HIGH,
                          f"GPU {idx}: row remapping failed (no spare rows left)",
                          "drain the GPU and open an RMA with the vendor; run `nvidia-smi -q -d ROW_REMAPPER`",
                          Category.NOT_OOM, gev)
        if truthy(g.get("remapped_pending")) or truthy(g.get("retired_pending")) or truthy(g.get("reset_required")):
            yield finding("DRV005", L, Severity.ERROR, Confidence.HIGH,
                          f"GPU {idx}: memory repair pending until a GPU reset",
                          f"drain GPU {idx} and reset it (`sudo nvidia-smi -r -i {idx}`) or reboot the node",
                          Category.CONTEXT_OR_DRIVER, gev)
        retired = as_int(g.get("retired_pages"))
        if retired and retired >= 60:
            yield finding("DRV005", L, Severity.WARNING, Confidence.MEDIUM,
                          f"GPU {idx}: {retired} retired pages", "plan a GPU replacement; NVIDIA suggests RMA "
                          "when retirements keep growing (`nvidia-smi -q -d PAGE_RETIREMENT`)", None, gev)


@check("DRV006", L, "Uncorrectable ECC errors")
def ecc_errors(facts: FactSet) -> Iterator[Finding]:
    """Uncorrectable (double-bit) ECC errors kill the program that touched the memory
    (cudaErrorECCUncorrectable = 214, Xid 48): the crash is hardware, not capacity.
    Source: environment-facts.md sections 8 and 9 [NVMLECC][DPR][CUDAERR].
    """
    for g in gpus(facts):
        n = as_int(g.get("ecc_uncorrected"))
        if n:
            idx = g.get("index")
            yield finding("DRV006", L, Severity.ERROR, Confidence.HIGH, f"GPU {idx}: {n} uncorrectable ECC error(s)",
                          f"drain GPU {idx}, reset it (`sudo nvidia-smi -r -i {idx}`), check `nvidia-smi -q -d ECC,ROW_REMAPPER`; "
                          "RMA if errors recur", Category.NOT_OOM,
                          [ev_value(f"driver.gpus[{idx}].ecc_uncorrected", n, facts.source("driver.gpus"))])


@check("DRV007", L, "Persistence mode off")
def persistence(facts: FactSet) -> Iterator[Finding]:
    """Without persistence mode (or nvidia-persistenced) the driver tears the GPU state down when the last
    client exits and re-initialises it for the next one: slow first CUDA init, and a window where a new
    job's context creation races the teardown. Source: environment-facts.md section 8 [SMIXML]
    (effect on init time: unverified in the reference; treat as hygiene).
    """
    off = [g for g in gpus(facts) if str(g.get("persistence_mode", "")).lower() in ("disabled", "false", "0", "off")]
    if off:
        idx = ",".join(str(g.get("index")) for g in off)
        yield finding("DRV007", L, Severity.INFO, Confidence.MEDIUM, f"Persistence mode is off on GPU {idx}",
                      "enable it on the host: `sudo systemctl enable --now nvidia-persistenced` (or `sudo nvidia-smi -pm 1`)",
                      None, [ev_value("driver.gpus[].persistence_mode", "Disabled", facts.source("driver.gpus"))])
