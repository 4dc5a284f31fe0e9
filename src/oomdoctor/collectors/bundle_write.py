"""Write a bundle of this machine (docs/contracts.md §5): the files the collectors read, redacted, as .tar.gz.

The bundle mirrors the filesystem so that `collect_bundle` runs the very collectors that read a
live machine. What leaves the machine is limited to what the collectors need: the environment is
redacted (oomdoctor.redact), the kernel log is cut to NVRM/Xid/OOM lines, manifests are parsed and their
Secrets blanked, and existence-only signals (libvgpu.so, the vcuda socket, the service-account directory)
become empty marker files, never the real content.

Every file's text is redacted once, by the writer (`BundleWriter.add`, `BundleWriter.add_cut_log`): producers hand
it their raw text. A log redacted by its producer and again by the writer cost a 32 MiB log two passes.
"""

from __future__ import annotations

import io
import json
import os
import socket
import tarfile
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from oomdoctor._version import __version__
from oomdoctor.collectors.container import SA_DIR, list_dev_nodes
from oomdoctor.collectors.context import CollectContext
from oomdoctor.collectors.kernel_log import read_kernel_log
from oomdoctor.collectors.log_cut import read_head_and_tail
from oomdoctor.collectors.machine import live_context
from oomdoctor.collectors.nvml import SMI_TIMEOUT_S
from oomdoctor.collectors.probe import run_probes
from oomdoctor.collectors.sharing import HAMI_FILES, MPS_GONE_MARKER, VCUDA_FILES, mps_daemon, mps_pipe_dir
from oomdoctor.collectors.storage import count_torch_segments, shm_usage_live
from oomdoctor.collectors.torch_child import run_torch_child
from oomdoctor.errors import InputError
from oomdoctor.parsers.k8s_manifest import ManifestError, load_documents
from oomdoctor.parsers.kernlog import relevant_lines
from oomdoctor.parsers.procfs import cgroup_path_for, parse_proc_cgroup
from oomdoctor.parsers.yamldocs import find_unrendered_template
from oomdoctor.redact import redact_env, redact_manifest, redact_rendered, redact_text

COPIED_FILES = ("proc/version", "proc/meminfo", "proc/mounts", "proc/self/cgroup", "proc/driver/nvidia/version",
                "etc/os-release", "etc/host-os-release", "etc/ld.so.preload", "sys/class/dmi/id/sys_vendor", "sys/class/dmi/id/product_name",
                "usr/local/cuda/version.json", "usr/local/cuda/version.txt", "etc/vcuda/vcuda.config",
                "etc/vcuda/pids.config")
MARKERS = (".dockerenv", "run/.containerenv", *HAMI_FILES, *VCUDA_FILES[2:])
CGROUP_V2 = ("memory.max", "memory.high", "memory.current", "memory.peak", "memory.events", "cpu.max",
             "cgroup.controllers")
CGROUP_V1 = (("memory", "memory.limit_in_bytes"), ("memory", "memory.usage_in_bytes"),
             ("memory", "memory.max_usage_in_bytes"), ("memory", "memory.oom_control"),
             ("cpu,cpuacct", "cpu.cfs_quota_us"), ("cpu,cpuacct", "cpu.cfs_period_us"),
             ("cpu", "cpu.cfs_quota_us"), ("cpu", "cpu.cfs_period_us"))
MAX_LOG_BYTES = 32 * 1024 * 1024  # kept of one log: its head and its tail
LOG_HEAD_BYTES = 8 * 1024 * 1024  # of which the head (how the job started); the rest is the tail (how it ended)
MAX_MANIFEST_BYTES = 4 * 1024 * 1024


class BundleWriter:
    """Collects bytes by bundle path, then writes one .tar.gz."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.dirs: set[str] = set()
        self.log_cuts: dict[str, dict[str, Any]] = {}  # bundle path -> what of the log was left out (meta.json)
        self.notes: list[str] = []  # what the user should know about the bundle (the CLI prints them)

    def add(self, rel: str, data: bytes | str) -> None:
        """Every file of a bundle passes here or through `add_cut_log`, and is redacted here: hand it raw text."""
        self.files[rel] = redact_file(rel, data.encode("utf-8") if isinstance(data, str) else data)

    def add_cut_log(self, rel: str, head: str, tail: str, marker: Callable[[int], str]) -> int:
        """A log cut in its middle, redacted here as `add` redacts a file: its head and its tail each on its own (a
        private key whose BEGIN line is in the head is hidden to the head's end, never on through the marker), then
        joined by the marker line, numbered in the redacted head (hiding a key takes its lines). Returns that line."""
        head = redact_text(head)
        head = head if head.endswith("\n") or not head else head + "\n"
        line = head.count("\n") + 1
        text = head + redact_text(marker(line)) + "\n" + redact_text(tail).rstrip("\n") + "\n"
        self.files[rel] = text.encode("utf-8")
        return line

    def write(self, out: Path) -> None:
        now = time.time()
        top = "oomdoctor-bundle"
        with tarfile.open(out, "w:gz") as tar:
            for rel in sorted(self.dirs):
                info = tarfile.TarInfo(f"{top}/{rel}")
                info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, now
                tar.addfile(info)
            for rel, data in sorted(self.files.items()):
                info = tarfile.TarInfo(f"{top}/{rel}")
                info.size, info.mode, info.mtime = len(data), 0o644, now
                tar.addfile(info, io.BytesIO(data))


def redact_file(rel: str, data: bytes) -> bytes:
    """A bundle file as it may leave the machine: JSON has its strings redacted, text its secrets."""
    if not data:
        return data
    text = data.decode("utf-8", errors="surrogateescape")
    fmt = "json" if rel.endswith(".json") and not rel.startswith("logs/") else "text"  # a log is text, `x.json` too
    red = redact_rendered(text, fmt)
    return data if red == text else red.encode("utf-8", errors="surrogateescape")


def _copy(ctx: CollectContext, w: BundleWriter, rel: str, target: str | None = None, limit: int = 1 << 20) -> None:
    data, _ = ctx.read_bytes(rel, limit=limit)
    if data is not None:
        w.add(target or rel, data)


def _cgroup_files(ctx: CollectContext, w: BundleWriter) -> None:
    """The job's effective cgroup files, stored at the top of sys/fs/cgroup as a container sees them."""
    text, _ = ctx.read_text("proc/self/cgroup")
    entries = parse_proc_cgroup(text or "")
    v2_path = (cgroup_path_for(entries, None) or "/").strip("/")
    for name in CGROUP_V2:
        for rel in (f"sys/fs/cgroup/{v2_path}/{name}", f"sys/fs/cgroup/{name}"):
            data, _ = ctx.read_bytes(rel.replace("//", "/"), limit=1 << 16)
            if data is not None:
                w.add(f"sys/fs/cgroup/{name}", data)
                break
    for sub, name in CGROUP_V1:
        controller = "cpu" if sub.startswith("cpu") else sub
        path = (cgroup_path_for(entries, controller) or "/").strip("/")
        for rel in (f"sys/fs/cgroup/{sub}/{path}/{name}", f"sys/fs/cgroup/{sub}/{name}"):
            data, _ = ctx.read_bytes(rel.replace("//", "/"), limit=1 << 16)
            if data is not None:
                w.add(f"sys/fs/cgroup/{sub}/{name}", data)
                break


def _environ(env: dict[str, str]) -> bytes:
    red = redact_env(env)
    return b"".join(f"{k}={v}".encode("utf-8", errors="replace") + b"\0" for k, v in sorted(red.items()))


def _read_capped(path: str, limit: int, what: str) -> bytes:
    """At most `limit` + 1 bytes: a 1 GiB log or /dev/zero is never read whole."""
    if os.path.isdir(path):
        raise InputError(f"{what} {path}: is a directory")
    try:
        with open(path, "rb") as fh:
            return fh.read(limit + 1)
    except OSError as exc:
        raise InputError(f"{what} {path}: {exc.strerror or exc}") from None


def add_log(w: BundleWriter, path: str) -> None:
    """A log under logs/, redacted. A log over MAX_LOG_BYTES keeps its head and its tail (where a crash is),
    cut at line ends, with a marker line between them; the cut is noted on the writer and in meta.json."""
    p = Path(path)
    if os.path.isdir(path):
        raise InputError(f"log {path}: is a directory")
    try:
        with open(path, "rb") as fh:
            cut = read_head_and_tail(fh, MAX_LOG_BYTES, LOG_HEAD_BYTES)
    except OSError as exc:
        raise InputError(f"log {path}: {exc.strerror or exc}") from None
    rel = f"logs/{_unique(w, 'logs', p.name)}"
    # Each part whole at once, by the writer: a PEM private key spans lines, and line by line only its BEGIN line
    # matched.
    head = cut.head.decode("utf-8", errors="replace")
    if cut.omitted_bytes == 0 and not cut.tail:
        w.add(rel, head.rstrip("\n") + "\n")
        return
    marker_line = w.add_cut_log(rel, head, cut.tail.decode("utf-8", errors="replace"), cut.marker)
    w.log_cuts[rel] = cut.note(marker_line)
    w.notes.append(f"{path}: {cut.summary()}; the first {_mib(len(cut.head))} and the last {_mib(len(cut.tail))} "
                   f"are in {rel}, a marker line between them (line {marker_line})")


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def add_manifest(w: BundleWriter, path: str) -> None:
    p = Path(path)
    data = _read_capped(path, MAX_MANIFEST_BYTES, "manifest")
    if len(data) > MAX_MANIFEST_BYTES:
        raise InputError(f"manifest {path}: larger than {MAX_MANIFEST_BYTES >> 20} MiB, not a manifest")
    text = data.decode("utf-8", errors="replace")
    tpl = find_unrendered_template(text)
    if tpl is not None:  # say what audit says, not the YAML parser's 'while constructing a mapping'
        raise InputError(f"manifest {path}: line {tpl}: unrendered template ({{{{ ... }}}}); render it first, "
                         "e.g. `helm template RELEASE CHART > out.yaml`, or use `kubectl get pod NAME -o yaml`")
    try:
        docs = load_documents(text)
    except ManifestError as exc:
        raise InputError(f"manifest {path}: {exc}") from None
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    buf = io.StringIO()
    yaml.dump_all([redact_manifest(d) for d in docs], buf)
    name = p.stem + ".yaml"
    w.add(f"k8s/{_unique(w, 'k8s', name)}", buf.getvalue())


def _unique(w: BundleWriter, folder: str, name: str) -> str:
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name) or "file"
    candidate, n = safe, 1
    while f"{folder}/{candidate}" in w.files:
        n += 1
        candidate = f"{n}-{safe}"
    return candidate


def build_bundle(*, logs: Sequence[str] = (), manifests: Sequence[str] = (), probe: bool = False,
                 probe_attempts: int = 5, ctx: CollectContext | None = None) -> BundleWriter:
    ctx = ctx or live_context()
    w = BundleWriter()
    for path in logs:  # user inputs first: a bad path fails before any slow command runs
        add_log(w, path)
    for path in manifests:
        add_manifest(w, path)
    for rel in COPIED_FILES:
        _copy(ctx, w, rel)
    for rel in MARKERS:
        if ctx.exists(rel):
            w.add(rel, b"")
    if ctx.exists(SA_DIR):
        w.dirs.add(SA_DIR)  # the directory only: the token never leaves the machine
    pipe, daemon = mps_pipe_dir(ctx.env), mps_daemon(ctx)  # the collector's own reading (sharing.mps_daemon)
    if daemon == "gone":
        w.add(f"{pipe}/{MPS_GONE_MARKER}", b"")
    elif daemon == "running":
        w.add(f"{pipe}/nvidia-cuda-mps-control.pid", b"")
        if ctx.exists(f"{pipe}/control"):
            w.add(f"{pipe}/control", b"")
    for d in ctx.listdir("usr/local") or []:
        if d.startswith("cuda"):
            for name in ctx.listdir(f"usr/local/{d}/compat") or []:
                if name.startswith("libcuda.so."):
                    w.add(f"usr/local/{d}/compat/{name}", b"")
    _cgroup_files(ctx, w)
    w.add("proc/self/environ", _environ(dict(ctx.env)))
    w.add("dev/nvidia-nodes.txt", "".join(f"{n}\n" for n in list_dev_nodes(ctx)))
    shm = shm_usage_live(ctx) or {}
    w.add("commands/shm.json", json.dumps({**shm, "torch_segments": count_torch_segments(ctx.listdir("dev/shm"))}))
    smi = ctx.runner.run(["nvidia-smi", "-q", "-x"], timeout=SMI_TIMEOUT_S)
    if smi.ok:
        w.add("commands/nvidia-smi-q.xml", smi.stdout)
    smi_txt = ctx.runner.run(["nvidia-smi"], timeout=SMI_TIMEOUT_S)
    if smi_txt.error is None and (smi_txt.stdout or smi_txt.stderr):
        w.add("commands/nvidia-smi.txt", smi_txt.stdout or smi_txt.stderr)
    lines, _, _ = read_kernel_log(ctx)
    if lines is not None:
        w.add("commands/dmesg.txt", "".join(line + "\n" for line in relevant_lines(lines)))
    torch_json, why = run_torch_child(ctx)
    w.add("commands/torch.json", json.dumps(torch_json if torch_json is not None
                                            else {"version": None, "error": why}, indent=1))
    if probe:
        w.add("commands/probe.json", json.dumps(run_probes(ctx, probe_attempts), indent=1, default=str))
    snap = ctx.gpu_snapshot()
    meta: dict[str, Any] = {
        "format": "oomdoctor-bundle", "version": 1,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "tool_version": __version__, "hostname": ctx.env.get("NODE_NAME", "").strip() or socket.gethostname(),
        "cpu_count": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "pid": os.getpid(), "nvml_error": snap.nvml_error or (snap.error if snap.source == "NVML" else None),
    }
    if w.log_cuts:
        meta["log_cuts"] = w.log_cuts
    w.add("meta.json", json.dumps(meta, indent=1))
    return w


def write_bundle(out: str | Path, **kwargs: Any) -> BundleWriter:
    w = build_bundle(**kwargs)
    out = Path(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        w.write(out)
    except OSError as exc:
        raise InputError(f"cannot write {out}: {exc.strerror or exc}") from None
    return w
