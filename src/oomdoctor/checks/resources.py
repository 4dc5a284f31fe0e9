"""Resources layer: cgroup limits and OOM counters, kernel OOM-killer lines, Kubernetes OOMKilled / 137."""

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
    mib,
)
from oomdoctor.checks.registry import check

L = Layer.RESOURCES
CGV2 = "https://docs.kernel.org/admin-guide/cgroup-v2.html [CGV2]"
RAISE = ("raise the container's memory limit (k8s: resources.limits.memory; docker: --memory) or cut host RAM use: "
         "fewer DataLoader workers, smaller prefetch_factor, pin_memory=False, load datasets lazily")


@check("RES001", L, "Processes were OOM-killed in this cgroup")
def cgroup_oom_kill(facts: FactSet) -> Iterator[Finding]:
    """memory.events `oom_kill` (v2) / memory.oom_control `oom_kill` (v1) count processes the kernel
    killed because the cgroup hit its limit; `oom` counts limit hits. A non-zero count means host RAM,
    not GPU memory, ended a process (exit 137, a DataLoader worker "killed by signal: Killed").
    Missing counters mean unknown, never "no OOM". Source: environment-facts.md 5b, 7 [CGV2][OCPOOM][CGNOTE].
    """
    kills = as_int(facts.value("cgroup.oom_kill"))
    events = as_int(facts.value("cgroup.oom_events"))
    if kills:
        yield finding("RES001", L, Severity.ERROR, Confidence.HIGH,
                      f"The kernel OOM-killed {kills} process(es) in this cgroup (memory limit "
                      f"{mib(facts.value('cgroup.memory_limit_bytes'))})", RAISE, Category.HOST_OOM,
                      [ev(facts, "cgroup.oom_kill")] + ([ev(facts, "cgroup.memory_limit_bytes")]
                                                        if facts.has("cgroup.memory_limit_bytes") else []))
    elif events:
        yield finding("RES001", L, Severity.WARNING, Confidence.MEDIUM,
                      f"The cgroup hit its memory limit {events} time(s) (reclaim, no kill recorded)", RAISE,
                      Category.HOST_OOM, [ev(facts, "cgroup.oom_events")])


@check("RES002", L, "Memory usage close to the cgroup limit")
def near_limit(facts: FactSet) -> Iterator[Finding]:
    """When usage (or the recorded peak) reaches ~90% of memory.max / memory.limit_in_bytes the next
    burst (a DataLoader batch, pinned-memory buffers, /dev/shm pages, which are charged to the cgroup)
    triggers the cgroup OOM killer. Source: environment-facts.md 5b, 6 [CGV2][K8SVOL].
    """
    limit = as_int(facts.value("cgroup.memory_limit_bytes"))
    peak = as_int(facts.value("cgroup.memory_peak_bytes")) or as_int(facts.value("cgroup.memory_usage_bytes"))
    if not limit or not peak:
        return
    ratio = peak / limit
    if ratio >= 0.9:
        key = "cgroup.memory_peak_bytes" if facts.has("cgroup.memory_peak_bytes") else "cgroup.memory_usage_bytes"
        yield finding("RES002", L, Severity.WARNING, Confidence.MEDIUM,
                      f"Memory use reached {100 * ratio:.0f}% of the cgroup limit ({mib(peak)} of {mib(limit)})",
                      RAISE, Category.HOST_OOM, [ev(facts, key), ev(facts, "cgroup.memory_limit_bytes")])


@check("RES003", L, "OOM-killer lines in the kernel log")
def kernel_oom(facts: FactSet) -> Iterator[Finding]:
    """`Killed process <pid> (<comm>) total-vm… anon-rss… shmem-rss…` is the kernel OOM killer (global
    or "Memory cgroup out of memory"). A large shmem-rss means /dev/shm (DataLoader) pages were charged
    to the victim: the shared-memory traffic, not the model, exhausted RAM. Source: environment-facts.md
    section 7 [OOMKILLC].
    """
    kills = [k for k in as_list(facts.value("kernel.oom_kills")) if isinstance(k, dict)]
    if not kills:
        return
    shm_heavy = [k for k in kills if (as_int(k.get("shmem_rss_kb")) or 0) > max(
        256 * 1024, 0.3 * ((as_int(k.get("anon_rss_kb")) or 0) + (as_int(k.get("shmem_rss_kb")) or 0)))]
    first = shm_heavy[0] if shm_heavy else kills[0]
    evidence = [ev_value("kernel.oom_kills", first.get("line") or first, facts.source("kernel.oom_kills"))]
    memcg = any(k.get("memcg") for k in kills)
    if shm_heavy:
        yield finding("RES003", L, Severity.ERROR, Confidence.HIGH,
                      f"The OOM killer killed {first.get('comm')} (pid {first.get('pid')}) with "
                      f"{mib((as_int(first.get('shmem_rss_kb')) or 0) * 1024)} of shared memory (shmem-rss): /dev/shm use",
                      "reduce shared-memory traffic (fewer workers, smaller batches / prefetch_factor) or raise the "
                      "memory limit; a memory-backed /dev/shm counts toward the pod's limit", Category.SHM_EXHAUSTED,
                      evidence)
    else:
        yield finding("RES003", L, Severity.ERROR, Confidence.HIGH,
                      f"The kernel OOM killer killed {len(kills)} process(es)"
                      + (" at the cgroup limit" if memcg else "") + f", e.g. {first.get('comm')} (pid {first.get('pid')})",
                      RAISE, Category.HOST_OOM, evidence)


@check("RES004", L, "Kubernetes container OOMKilled / exit 137")
def k8s_terminations(facts: FactSet) -> Iterator[Finding]:
    """`state.terminated.reason: OOMKilled` (exit 137) means the container's main process hit the memory
    limit. Exit 137 without OOMKilled is SIGKILL from someone (OOM of a child, eviction, `kill -9`): a
    hint, not proof. Source: environment-facts.md section 7 [OCPOOM][CGNOTE].
    """
    for t in as_list(facts.value("k8s.terminations")):
        if not isinstance(t, dict):
            continue
        reason, code = str(t.get("reason") or ""), as_int(t.get("exit_code"))
        who = f"{t.get('pod') or '?'}/{t.get('container') or '?'}"
        evidence = [ev_value("k8s.terminations", t, facts.source("k8s.terminations"))]
        if reason == "OOMKilled":
            yield finding("RES004", L, Severity.ERROR, Confidence.HIGH,
                          f"Container {who} was OOMKilled (exit {code if code is not None else 137})",
                          "raise resources.limits.memory for the container (and requests with it), or reduce host RAM "
                          "use: DataLoader workers, prefetch_factor, pin_memory, a memory emptyDir at /dev/shm counts too",
                          Category.HOST_OOM, evidence)
        elif code == 137:
            yield finding("RES004", L, Severity.WARNING, Confidence.MEDIUM,
                          f"Container {who} exited 137 (SIGKILL, reason {reason or 'unknown'})",
                          "check `kubectl describe pod` events and the node's kernel log for an OOM kill; 137 is also "
                          "eviction or a deadline kill", Category.HOST_OOM, evidence)


@check("RES005", L, "GPU containers without a memory limit")
def k8s_limits(facts: FactSet) -> Iterator[Finding]:
    """A GPU container without resources.limits.memory can take the node's RAM until the node-level OOM
    killer picks a victim (maybe another pod); with requests far below real use the pod is the first to
    be evicted. Source: environment-facts.md section 7 [OCPOOM]; k8s resource management docs.
    """
    for c in as_list(facts.value("k8s.containers")):
        if not isinstance(c, dict) or not c.get("gpu"):
            continue
        limits = c.get("limits") if isinstance(c.get("limits"), dict) else {}
        if not limits.get("memory"):
            yield finding("RES005", L, Severity.INFO, Confidence.MEDIUM,
                          f"GPU container {c.get('pod') or '?'}/{c.get('name') or '?'} has no memory limit",
                          "set resources.requests.memory and resources.limits.memory to the job's measured peak RAM plus "
                          "headroom", None, [ev_value("k8s.containers", c, facts.source("k8s.containers"))])
