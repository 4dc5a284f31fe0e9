"""Hostile bundles and a measured runner for the attack tests (tests/test_attack_*.py).

Each builder writes one bundle an attacker could send to support, small on disk. `run_measured`
runs `oomdoctor ARGS` in a fresh interpreter with TMPDIR, HOME and the working directory inside
the test's temporary directory, and reports exit code, output, wall time, and the child's CPU time
and peak RSS (getrusage and /proc/self/status VmHWM inside that child, so other processes and a
busy machine do not count; a hang is caught by the wall-clock timeout).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).parents[1]
SEED = ROOT / "tests" / "fixtures" / "bundles" / "seed_a100_k8s"
CANARY = "oomdoctor-canary-7f3a9c"  # put in the reader's environment and files: must never show up

_RUNNER = """
import json, os, resource, sys
caps = json.loads(os.environ.pop("HOSTILE_CAPS", "{}"))
import importlib
for k, v in caps.items():  # "NAME" (collectors.bundle_safe) or "module.path.NAME"
    mod, _, name = k.rpartition(".")
    setattr(importlib.import_module(mod or "oomdoctor.collectors.bundle_safe"), name, v)
from oomdoctor.cli import main
rc = main(sys.argv[1:])
sys.stdout.flush()
with open(os.environ["HOSTILE_STATS"], "w") as fh:
    use = resource.getrusage(resource.RUSAGE_SELF)
    peak = use.ru_maxrss  # kept across execve from the forking parent (a big pytest worker): prefer VmHWM
    try:
        with open("/proc/self/status") as st:
            peak = next(int(l.split()[1]) for l in st if l.startswith("VmHWM:"))
    except (OSError, StopIteration, ValueError):
        pass
    json.dump({"rc": rc, "maxrss_kib": peak, "cpu_s": use.ru_utime + use.ru_stime}, fh)
sys.exit(rc)
"""


@dataclass
class Result:
    rc: int
    stdout: str
    stderr: str
    seconds: float  # wall time, inflated when the machine is busy
    maxrss_mib: float
    cpu_seconds: float  # the child's own CPU time: what the limits judge

    @property
    def one_line_error(self) -> bool:
        lines = self.stderr.strip().splitlines()
        return self.rc == 2 and len(lines) == 1 and "Traceback" not in self.stderr and len(lines[0]) < 1200


def run_measured(args: list[str], work: Path, *, caps: dict | None = None, timeout: float = 300,
                 stdin: bytes | None = None) -> Result:
    tmpdir = work / "tmpdir"
    tmpdir.mkdir(exist_ok=True)
    stats = work / "stats.json"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(ROOT / "src"),
           "TMPDIR": str(tmpdir), "HOME": str(work), "NO_COLOR": "1", "HOSTILE_STATS": str(stats),
           "HOSTILE_CAPS": json.dumps(caps or {}), "CANARY_SECRET": CANARY}
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", _RUNNER, *args], cwd=work, env=env, capture_output=True,
                          timeout=timeout, input=stdin)
    seconds = time.monotonic() - start
    measured = json.loads(stats.read_text()) if stats.exists() else {}
    stats.unlink(missing_ok=True)
    left = os.listdir(tmpdir)
    assert not left, f"temporary files left behind: {left}"
    return Result(proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace"),
                  seconds, measured.get("maxrss_kib", 0) / 1024, measured.get("cpu_s", 0.0))


# --- archive builders ---------------------------------------------------------------------------


def _add(tar: tarfile.TarFile, name: str, data: bytes = b"", **attrs) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    for k, v in attrs.items():
        setattr(info, k, v)
    tar.addfile(info, io.BytesIO(data) if data else None)


def seed_members(tar: tarfile.TarFile, top: str = "oomdoctor-bundle") -> None:
    tar.add(SEED, arcname=top)


def tgz(path: Path, build, fmt: int = tarfile.PAX_FORMAT, seed: bool = True) -> Path:
    with tarfile.open(path, "w:gz", format=fmt) as tar:
        if seed:
            seed_members(tar)
        build(tar)
    return path


def pax_header_bomb(path: Path, size: int = 8 << 20) -> Path:
    def build(tar):
        info = tarfile.TarInfo("oomdoctor-bundle/logs/a.log")
        info.pax_headers = {"comment": "x" * size}
        tar.addfile(info)
    return tgz(path, build)


def pax_global_bomb(path: Path, size: int = 8 << 20) -> Path:
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT, pax_headers={"comment": "y" * size}) as tar:
        seed_members(tar)
    return path


def gnu_longname_bomb(path: Path, size: int = 8 << 20, link: bool = False) -> Path:
    def build(tar):
        info = tarfile.TarInfo("oomdoctor-bundle/" + "n" * size)
        if link:
            info.name = "oomdoctor-bundle/l"
            info.type, info.linkname = tarfile.SYMTYPE, "t" * size
        tar.addfile(info)
    return tgz(path, build, fmt=tarfile.GNU_FORMAT)


def many_small_pax_headers(path: Path, count: int, each: int = 60 << 10) -> Path:
    """Headers under the per-header cap, but many: the decompressed-stream cap (headers count) stops it."""
    def build(tar):
        for i in range(count):
            info = tarfile.TarInfo(f"oomdoctor-bundle/l{i}")
            info.type, info.linkname = tarfile.SYMTYPE, "x"
            info.pax_headers = {"comment": "z" * each}
            tar.addfile(info)
    return tgz(path, build, seed=False)


def gzip_bomb(path: Path, members: int, member_bytes: int) -> Path:
    """A tar of `members` files of zeros, gzip-compressed a thousandfold, written without holding it."""
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    zero = bytes(1 << 20)
    with open(path, "wb") as out:
        for i in range(members):
            info = tarfile.TarInfo(f"oomdoctor-bundle/logs/z{i}.log")
            info.size = member_bytes
            out.write(comp.compress(info.tobuf(tarfile.GNU_FORMAT)))
            left = member_bytes
            while left:
                n = min(left, len(zero))
                out.write(comp.compress(zero[:n]))
                left -= n
            pad = (-member_bytes) % 512
            out.write(comp.compress(bytes(pad)))
        out.write(comp.compress(bytes(1024)))
        out.write(comp.flush())
    return path


def dir_bundle(path: Path) -> Path:
    """A copy of the seed directory bundle to plant things in."""
    import shutil

    shutil.copytree(SEED, path)
    return path


def json_bundle(path: Path, files: dict[str, bytes]) -> Path:
    root = dir_bundle(path)
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def deep_json(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def wide_json(mib: int) -> bytes:
    return json.dumps({"k": ["v" * 1000] * (mib * 1024)}).encode()


def yaml_alias_bomb(levels: int = 9) -> str:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    prev = "a"
    for i in range(levels):
        name = f"l{i}"
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
        prev = name
    return "\n".join(lines) + "\n"
