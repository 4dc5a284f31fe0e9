"""Run directories for report tests: synthetic ones in the recorder's own format, and the device's
recorded archives unpacked."""

from __future__ import annotations

import json
import random
import tarfile
from pathlib import Path

MiB = 1 << 20


def write_run(path: Path, *, steps: int = 60, leak_per_step: int = 0, noise: int = 40 * MiB, label: str = "rank0",
              rank: int | None = 0, base: int = 2 << 30, oom: dict | None = None, meta: dict | None = None,
              seed: int = 1) -> Path:
    rnd = random.Random(seed)
    path.mkdir(parents=True, exist_ok=True)
    t0 = 1_700_000_000.0
    lines = [{"kind": "header", "schema_version": 1, "format": "oomdoctor-record", "t": t0, "pid": 100,
              "rank": rank, "label": label}]
    for s in range(1, steps + 1):
        t = t0 + s * 0.5
        alloc = base + leak_per_step * s + rnd.randint(0, noise)
        lines.append({"kind": "step", "t": t, "step": s, "allocated": alloc, "reserved": alloc + 512 * MiB,
                      "inactive_split": 64 * MiB, "peak_allocated": alloc + 1024 * MiB, "alloc_retries": 0,
                      "ooms": 0, "rss": 3 << 30})
        lines.append({"kind": "sample", "t": t + 0.25, "step": s, "allocated": alloc + 900 * MiB,
                      "reserved": alloc + 1200 * MiB, "rss": 3 << 30, "gpu_proc_used": alloc + 1500 * MiB})
    with open(path / f"timeline-{label}.jsonl", "w") as f:
        for rec in lines:
            f.write(json.dumps(rec) + "\n")
    (path / "run.json").write_text(json.dumps({"schema_version": 1, "start": t0, "argv": ["python", "train.py"],
                                               "returncode": 0, **(meta or {})}))
    if oom is not None:
        (path / f"oom-{label}-1.json").write_text(json.dumps({"kind": "oom", "label": label, "rank": rank,
                                                               "t": t0 + steps * 0.5, "step": steps, **oom}))
    return path


def unpack_runs(archive: Path, out: Path) -> Path:
    """A device archive unpacked: regular files under record_runs/ only (no absolute or .. paths)."""
    with tarfile.open(archive) as tar:
        for m in tar.getmembers():
            parts = Path(m.name).parts
            if not m.isfile() or m.name.startswith("/") or ".." in parts or parts[0] != "record_runs":
                continue
            dest = out.joinpath(*parts)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(tar.extractfile(m).read())
    return out / "record_runs"


def fake_dmesg(tmp_path, monkeypatch, lines: list[str]) -> None:
    """A `dmesg` first on PATH that prints `lines` (the kernel log a test gives the recorder)."""
    import sys

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    exe = bin_dir / "dmesg"
    exe.write_text(f"#!{sys.executable}\nfor line in {lines!r}:\n    print(line)\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
