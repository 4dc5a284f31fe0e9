"""Active CUDA probes (`doctor --probe`, `bundle --probe`), each attempt in a fresh child process.

Why several fresh processes: the seed case failed *intermittently* at context creation, so one
success proves little; N attempts give a failure rate and the distinct error texts. Each child
creates a context on device 0, measures what the context itself costs (NVML per-process memory
minus what torch reserved, or the device's used-memory delta when the PID is not visible, e.g. in
a container), makes a small allocation, and (once) compares `torch.cuda.mem_get_info()` with
NVML on every device: a different total means a slicing layer is in the way.
Nothing stays on the GPU: each child exits before the next starts.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import Counter
from typing import Any

from oomdoctor.collectors.context import CollectContext
from oomdoctor.facts import Fact, Unavailable
from oomdoctor.facts.base import Entry
from oomdoctor.parsers.gpu_snapshot import GpuSnapshot

PROBE_TIMEOUT_S = 90.0
ALLOC_BYTES = 64 * 1024 * 1024
MARKER = "OOMDOCTOR_PROBE_JSON "
PROBE_KEYS = ("probe.context", "probe.context_bytes", "probe.mem_get_info", "probe.alloc")

CHILD_SCRIPT = r"""
import json, os, sys, time
cfg = json.loads(sys.argv[1])
res = {"ok": False, "error": None, "seconds": None, "pid": os.getpid(), "no_device": False,
       "context_bytes": None, "context_method": None, "alloc": None, "mem_get_info": [], "torch_reserved": None}
nv = handle = None
before = None
try:
    import pynvml as nv
    nv.nvmlInit()
except Exception:
    nv = None

def nvml_handle(uuid):
    if nv is None:
        return None
    try:
        if uuid:
            return nv.nvmlDeviceGetHandleByUUID(uuid)
        if not os.environ.get("CUDA_VISIBLE_DEVICES"):
            return nv.nvmlDeviceGetHandleByIndex(0)
    except Exception:
        return None
    return None

try:
    import torch
except Exception as exc:
    res["error"] = "torch not importable: " + str(exc)[:500]
    print("OOMDOCTOR_PROBE_JSON " + json.dumps(res), flush=True)
    sys.exit(0)
try:
    if torch.cuda.device_count() == 0:
        res["no_device"] = True
        raise RuntimeError("torch sees no CUDA device")
    props = torch.cuda.get_device_properties(0)
    uuid = ("GPU-" + str(props.uuid)) if getattr(props, "uuid", None) else None
    handle = nvml_handle(uuid)
    if handle is not None:
        try:
            before = nv.nvmlDeviceGetMemoryInfo(handle).used
        except Exception:
            before = None
    t0 = time.monotonic()
    torch.zeros(1, device="cuda:0")
    torch.cuda.synchronize(0)
    res["seconds"] = round(time.monotonic() - t0, 4)
    res["ok"] = True
except Exception as exc:
    res["error"] = (type(exc).__name__ + ": " + str(exc).strip())[:1000]
if res["ok"]:
    reserved = torch.cuda.memory_reserved(0)
    res["torch_reserved"] = reserved
    if handle is not None:
        try:
            mine = [p for p in nv.nvmlDeviceGetComputeRunningProcesses(handle) if p.pid == os.getpid()]
            if mine and isinstance(mine[0].usedGpuMemory, int):
                res["context_bytes"] = mine[0].usedGpuMemory - reserved
                res["context_method"] = "nvml_process_used_minus_torch_reserved"
            elif before is not None:
                res["context_bytes"] = nv.nvmlDeviceGetMemoryInfo(handle).used - before - reserved
                res["context_method"] = "nvml_device_used_delta_minus_torch_reserved"
        except Exception:
            pass
    try:
        x = torch.empty(cfg["alloc_bytes"], dtype=torch.uint8, device="cuda:0")
        torch.cuda.synchronize(0)
        del x
        res["alloc"] = {"ok": True, "bytes": cfg["alloc_bytes"], "error": None}
    except Exception as exc:
        res["alloc"] = {"ok": False, "bytes": cfg["alloc_bytes"], "error": (type(exc).__name__ + ": " + str(exc).strip())[:1000]}
    if cfg.get("measure"):
        for i in range(torch.cuda.device_count()):
            entry = {"gpu": i, "uuid": None, "free_bytes": None, "total_bytes": None, "error": None}
            try:
                p = torch.cuda.get_device_properties(i)
                entry["uuid"] = ("GPU-" + str(p.uuid)) if getattr(p, "uuid", None) else None
                entry["name"] = p.name
                free, total = torch.cuda.mem_get_info(i)
                entry["free_bytes"], entry["total_bytes"] = int(free), int(total)
            except Exception as exc:
                entry["error"] = (type(exc).__name__ + ": " + str(exc).strip())[:500]
            res["mem_get_info"].append(entry)
print("OOMDOCTOR_PROBE_JSON " + json.dumps(res), flush=True)
"""


def run_attempt(ctx: CollectContext, measure: bool) -> dict[str, Any]:
    cfg = json.dumps({"measure": measure, "alloc_bytes": ALLOC_BYTES})
    res = ctx.runner.run([sys.executable, "-c", CHILD_SCRIPT, cfg], timeout=PROBE_TIMEOUT_S)
    if res.error:
        # a hang is a result (context creation that never returns); failing to start is not
        return {"ok": False, "error": res.error, "seconds": None, "launch_failed": "timed out" not in res.error}
    for line in res.stdout.splitlines():
        if line.startswith(MARKER):
            try:
                data = json.loads(line[len(MARKER):])
                if isinstance(data, dict):
                    return data
            except ValueError:
                pass
    tail = (res.stderr.strip().splitlines() or [f"exit code {res.returncode}"])[-1]
    return {"ok": False, "error": f"probe process died: {tail[:500]}", "seconds": None}


def run_probes(ctx: CollectContext, attempts: int = 5) -> dict[str, Any]:
    """The probe.json document: every attempt plus the summary."""
    results: list[dict[str, Any]] = []
    measured = False
    for _ in range(max(1, attempts)):
        r = run_attempt(ctx, measure=not measured)
        results.append(r)
        measured = measured or bool(r.get("ok"))
        if str(r.get("error") or "").startswith("torch not importable") or r.get("launch_failed"):
            break
        snap = ctx.gpu_snapshot()
        if r.get("no_device") and (not snap.ok or not snap.gpus):
            break  # no GPU at all: repeating proves nothing
    return summarise(results, ctx.gpu_snapshot())


def summarise(results: list[dict[str, Any]], snap: GpuSnapshot) -> dict[str, Any]:
    # group by the first line: CUDA appends the same boilerplate ("Search for ...", "CUDA kernel errors
    # might be asynchronously reported ...") to every message; the full text stays in `attempts`
    errors = Counter(str(r["error"]).strip().splitlines()[0] for r in results if not r.get("ok") and r.get("error"))
    seconds = [r["seconds"] for r in results if isinstance(r.get("seconds"), (int, float))]
    ctx_bytes = [r["context_bytes"] for r in results if isinstance(r.get("context_bytes"), int)]
    methods = {r.get("context_method") for r in results if r.get("context_method")}
    first_ok = next((r for r in results if r.get("ok")), None)
    mem = next((r["mem_get_info"] for r in results if r.get("mem_get_info")), [])
    by_uuid = {g.get("uuid"): g for g in snap.gpus} if snap.ok else {}
    for entry in mem:
        gpu = by_uuid.get(entry.get("uuid"))
        entry["nvml_total_bytes"] = gpu.get("memory_total_bytes") if gpu else None
        entry["nvml_free_bytes"] = gpu.get("memory_free_bytes") if gpu else None
        # cudaMemGetInfo's total excludes the driver-reserved memory that NVML v2 lists apart
        # (validated on an H100: torch total == NVML total - reserved), so compare against that
        entry["nvml_reserved_bytes"] = gpu.get("memory_reserved_bytes") if gpu else None
        entry["nvml_index"] = gpu.get("index") if gpu else None
    return {
        "attempts": results,
        "context": {"attempts": len(results), "failures": sum(1 for r in results if not r.get("ok")),
                    "errors": [e for e, _ in errors.most_common()],
                    "error_counts": [{"error": e, "count": n} for e, n in errors.most_common()],
                    "seconds": round(statistics.median(seconds), 4) if seconds else None,
                    "no_device": all(r.get("no_device") for r in results)},
        "context_bytes": int(statistics.median(ctx_bytes)) if ctx_bytes else None,
        "context_bytes_method": sorted(methods)[0] if methods else None,
        "alloc": (first_ok or {}).get("alloc"),
        "mem_get_info": mem,
        "launch_failed": bool(results) and all(r.get("launch_failed") for r in results),
        "torch_missing": any(str(r.get("error") or "").startswith("torch not importable") for r in results),
    }


def probe_facts(doc: dict[str, Any] | None, why: str, src: str, snap: GpuSnapshot | None = None) -> list[Entry]:
    if not isinstance(doc, dict):
        return [Unavailable(k, why, src) for k in PROBE_KEYS]
    if doc.get("torch_missing"):
        return [Unavailable(k, "the probe needs torch, which is not installed", src) for k in PROBE_KEYS]
    if doc.get("launch_failed"):
        first = (doc.get("attempts") or [{}])[0].get("error")
        return [Unavailable(k, f"the probe process could not start: {first}", src) for k in PROBE_KEYS]
    context = doc.get("context") if isinstance(doc.get("context"), dict) else {}
    no_gpu = snap is not None and (not snap.ok or not snap.gpus)
    if context.get("no_device") and no_gpu:
        return [Unavailable(k, "no CUDA device (NVML and torch see none)", src) for k in PROBE_KEYS]
    out: list[Entry] = [Fact("probe.context", context, src)]
    cb = doc.get("context_bytes")
    out.append(Fact("probe.context_bytes", cb, f"{src} ({doc.get('context_bytes_method')})") if isinstance(cb, int)
               else Unavailable("probe.context_bytes", "no context was created, or NVML could not see it", src))
    mem = doc.get("mem_get_info")
    out.append(Fact("probe.mem_get_info", mem, src) if isinstance(mem, list) and mem
               else Unavailable("probe.mem_get_info", "no context was created", src))
    alloc = doc.get("alloc")
    out.append(Fact("probe.alloc", alloc, src) if isinstance(alloc, dict)
               else Unavailable("probe.alloc", "no context was created", src))
    return out


def collect_probe_facts(ctx: CollectContext, run: bool, attempts: int) -> tuple[list[Entry], dict[str, Any] | None]:
    if ctx.bundle:
        text, why = ctx.read_text("commands/probe.json", limit=4 << 20)
        src = ctx.label("commands/probe.json")
        doc = None
        if text is not None:
            try:
                doc = json.loads(text)
            except (ValueError, RecursionError):
                why = "unparsable JSON"
        elif "not present" in why:
            why = f"not run when the bundle was made, or the bundle was cut down ({why})"
        return probe_facts(doc, why, src, ctx.gpu_snapshot()), None
    if not run:
        return probe_facts(None, "not run (use --probe)", "probe"), None
    doc = run_probes(ctx, attempts)
    return probe_facts(doc, "", f"probe: {len(doc['attempts'])} fresh processes", ctx.gpu_snapshot()), doc
