"""torch facts, read in a child process with a time limit.

CUDA must never be initialised in the oomdoctor process (it may be the user's job). The child
imports torch, asks the build (version, CUDA, cuDNN, arch list) and, unless told `build`, the
driver (is_available, device properties: no context is created for these), prints one JSON line
(the torch.json shape of docs/contracts.md §5) and exits. A missing torch, an import error or a hang
become facts.

The build is read without touching CUDA: `torch._C._cuda_getArchFlags()` is the compile-time string
that `torch.cuda.get_arch_list()` splits (older releases call `is_available()` first and answer []
when CUDA is unusable), and `torch._C._cudnn.getVersionInt()` is cudnnGetVersion(), the value
`torch.backends.cudnn.version()` returns; that function is not called, because on first use it
checks cuDNN against every device's capability, i.e. runs `torch.cuda.init()` (torch 2.13).
"""

from __future__ import annotations

import importlib.util
import json
import platform
import sys
from pathlib import Path
from typing import Any

from oomdoctor.collectors.container import env_fact
from oomdoctor.collectors.context import CollectContext
from oomdoctor.facts import Fact, Unavailable
from oomdoctor.facts.base import Entry
from oomdoctor.parsers.torch_json import TorchJsonError, normalise, parse_torch_json, parse_torch_version_py

TORCH_TIMEOUT_S = 60.0
MARKER = "OOMDOCTOR_TORCH_JSON "

CHILD_SCRIPT = r"""
import json, sys, warnings
out = {"version": None, "cuda": None, "cudnn": None, "arch_list": None, "cuda_available": None,
       "device_count": None, "devices": [], "error": None, "python": sys.version.split()[0]}
build_only = sys.argv[1:] == ["build"]
try:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import torch
        out["version"] = torch.__version__
        out["cuda"] = torch.version.cuda
        try:
            cudnn = getattr(torch._C, "_cudnn", None)
            out["cudnn"] = int(cudnn.getVersionInt()) if cudnn is not None else None
        except Exception:
            pass
        if torch.version.cuda:
            try:
                flags = torch._C._cuda_getArchFlags()
                out["arch_list"] = flags.split() if flags else []
            except Exception:
                pass
        if not build_only:
            out["cuda_available"] = bool(torch.cuda.is_available())
            out["device_count"] = torch.cuda.device_count() if out["cuda_available"] else 0
            for i in range(out["device_count"]):
                p = torch.cuda.get_device_properties(i)
                out["devices"].append({"name": p.name, "total_memory": int(p.total_memory),
                                       "capability": f"{p.major}.{p.minor}",
                                       "uuid": (("GPU-" + str(p.uuid)) if getattr(p, "uuid", None) else None)})
    msgs = [str(w.message) for w in caught if "CUDA" in str(w.message)]
    if msgs and not build_only and not out["cuda_available"]:
        out["error"] = msgs[0][:2000]
except ImportError as exc:
    out["error"] = "torch not importable: " + str(exc)[:1000]
except Exception as exc:
    out["error"] = type(exc).__name__ + ": " + str(exc)[:2000]
print("OOMDOCTOR_TORCH_JSON " + json.dumps(out), flush=True)
"""


def run_torch_child(ctx: CollectContext, python: str | None = None,
                    devices: bool = True) -> tuple[dict[str, Any] | None, str]:
    """(torch.json dict, "") or (None, why). Live only. devices=False: the build only, no CUDA call."""
    argv = [python or sys.executable, "-c", CHILD_SCRIPT, *(() if devices else ("build",))]
    res = ctx.runner.run(argv, timeout=TORCH_TIMEOUT_S)
    if res.error:
        return None, f"torch child: {res.error}"
    for line in res.stdout.splitlines():
        if line.startswith(MARKER):
            try:
                data = json.loads(line[len(MARKER):])
            except ValueError:
                break
            if isinstance(data, dict):
                return normalise(data), ""
            break
    tail = (res.stderr.strip().splitlines() or [f"exit {res.returncode}"])[-1]
    return None, f"torch child failed: {tail[:300]}"


_TORCH_KEYS = ("torch.version", "cuda.torch_runtime", "torch.cudnn", "cuda.arch_list", "torch.cuda_available",
               "torch.device_count", "torch.devices", "torch.error")
DEVICE_KEYS = ("torch.cuda_available", "torch.device_count", "torch.devices")
NOT_ASKED = "not asked: `doctor --torch` reads the build only; `--probe` asks torch for the devices"


def torch_facts_from(data: dict[str, Any] | None, why: str, src: str, devices: bool = True) -> list[Entry]:
    """Facts from a torch.json dict (live child or bundle file); devices=False: a build-only child."""
    keys = {"torch.version": "version", "cuda.torch_runtime": "cuda", "torch.cudnn": "cudnn",
            "cuda.arch_list": "arch_list", "torch.cuda_available": "cuda_available",
            "torch.device_count": "device_count", "torch.devices": "devices", "torch.error": "error"}
    if data is None:
        return [Unavailable(k, why, src) for k in (*keys, "python.version")]
    out: list[Entry] = []
    not_installed = data.get("version") is None and (data.get("error") or "").startswith("torch not importable")
    for key, field in keys.items():
        value = data.get(field)
        if key in DEVICE_KEYS and not devices and not not_installed:
            out.append(Unavailable(key, NOT_ASKED, src))
        elif key == "torch.error":
            out.append(Fact(key, value, src))
        elif value is None and not_installed:
            out.append(Unavailable(key, "torch is not installed", src))
        elif value is None and field in ("cuda", "cudnn", "arch_list"):
            out.append(Fact(key, None, src))  # a CPU build: a fact, not a gap
        elif value is None:
            out.append(Unavailable(key, data.get("error") or "not reported", src))
        else:
            out.append(Fact(key, value, src))
    py = data.get("python")
    out.append(Fact("python.version", py, src) if py else Unavailable("python.version", "not reported", src))
    return out


def torch_version_file() -> tuple[dict[str, Any] | None, str, str]:
    """Fast path: torch/version.py located without importing torch (a few ms instead of seconds)."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.origin:
        return None, "torch is not installed", f"{sys.executable}: import path"
    path = Path(spec.origin).parent / "version.py"
    try:
        fields = parse_torch_version_py(path.read_text(encoding="utf-8", errors="replace")[:65536])
    except OSError as exc:
        return None, f"cannot read {path}: {exc.strerror or exc}", str(path)
    if not fields.get("version"):
        return None, f"no __version__ in {path}", str(path)
    return fields, "", str(path)


def _fast_facts() -> list[Entry]:
    fields, why, src = torch_version_file()
    if fields is None:
        unavailable = "torch is not installed" if why == "torch is not installed" else why
        return [Unavailable(k, unavailable, src) for k in (*_TORCH_KEYS, "python.version")]
    not_imported = "torch not imported (fast path); `--torch`, `--probe` or a bundle imports it in a child process"
    out: list[Entry] = [Fact("torch.version", fields["version"], src), Fact("cuda.torch_runtime", fields.get("cuda"), src),
                        Fact("python.version", platform.python_version(), sys.executable)]
    out += [Unavailable(k, not_imported, src) for k in _TORCH_KEYS if k not in ("torch.version", "cuda.torch_runtime")]
    return out


def collect_framework(ctx: CollectContext, import_torch: bool = True, devices: bool = True) -> list[Entry]:
    if ctx.bundle:
        text, why = ctx.read_text("commands/torch.json", limit=1 << 20)
        src = ctx.label("commands/torch.json")
        data = None
        if text is not None:
            try:
                data = parse_torch_json(text)
            except TorchJsonError as exc:
                why = f"unparsable: {exc}"
        out = torch_facts_from(data, why, src)
    elif not import_torch:
        out = _fast_facts()
    else:
        data, why = run_torch_child(ctx, devices=devices)
        out = torch_facts_from(data, why, f"child process {sys.executable} -c 'import torch'", devices=devices)
    conf = ctx.env.get("PYTORCH_CUDA_ALLOC_CONF") or ctx.env.get("PYTORCH_ALLOC_CONF")
    out.append(env_fact(ctx, "torch.alloc_conf", conf))
    out.append(env_fact(ctx, "torch.no_caching", ctx.env.get("PYTORCH_NO_CUDA_MEMORY_CACHING")))
    return out
