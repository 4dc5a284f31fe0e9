"""Bench: `oomdoctor fleet` over N synthetic node reports (default 10,000; findings from the real
checks engine), from a directory and from a
kubectl-logs-style stream on stdin, against the peer approach (json.load + report_from_json per report,
i.e. the full DoctorReport model) in the same run. Prints a table.

    PYTHONPATH=src python bench/fleet_scale.py [--nodes 10000]
"""

from __future__ import annotations

import argparse
import io
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from oomdoctor.checks.engine import diagnose
from oomdoctor.facts import Fact, FactSet
from oomdoctor.facts.report import report_from_json
from oomdoctor.render.doctor_json import render_json

POOLS = [  # (weight, gpu name, count, kernel, driver, cuda, os)
    (0.7, "NVIDIA H100 80GB HBM3", 8, "5.15.0-105-generic", "550.54.15", "12.4", "ubuntu 22.04"),
    (0.3, "NVIDIA A100-SXM4-80GB", 8, "5.4.0-182-generic", "535.161.08", "12.2", "ubuntu 20.04"),
]


def gpu(i: int, name: str, rng: random.Random, sick: bool) -> dict:
    total = 85899345920
    used = rng.choice((0, 4194304, 566231040))
    return {"index": i, "name": name, "uuid": f"GPU-{rng.getrandbits(64):016x}", "pci_bus_id": f"00000000:{16 + i:02X}:00.0",
            "memory_total_bytes": total, "memory_used_bytes": used, "memory_free_bytes": total - used,
            "memory_reserved_bytes": 566231040, "persistence_mode": True, "compute_mode": "Default",
            "ecc_uncorrected": 0, "retired_pages": 0, "retired_pending": False,
            "remapped_pending": sick, "remapped_failure": False, "reset_required": sick}


def node_report(n: int, rng: random.Random) -> dict:
    pool = POOLS[0] if rng.random() < POOLS[0][0] else POOLS[1]
    _, name, count, kernel, driver, cuda, os_id = pool
    if rng.random() < 0.002:
        kernel = "3.10.0-1160.el7.x86_64"  # the node someone forgot to upgrade
    sick = rng.random() < 0.003
    xid = [{"code": 79, "pci": "0000:17:00", "pid": None, "text": "GPU has fallen off the bus", "line": 1}] \
        if rng.random() < 0.002 else []
    host = f"gpu-{n:05d}"
    facts = FactSet([
        Fact("host.name", host, "hostname"), Fact("host.mem_total_bytes", 2164000000000 + rng.randrange(0, 50_000_000), "/proc/meminfo"),
        Fact("host.mem_available_bytes", rng.randrange(10**12, 2 * 10**12), "/proc/meminfo"),
        Fact("host.cpu_count", 224, "os"), Fact("cgroup.version", 2, "/proc/mounts"),
        Fact("cgroup.memory_limit_bytes", 536870912, "memory.max"), Fact("runtime.container", "kubernetes", "env"),
        Fact("runtime.kubernetes", True, "env"), Fact("cuda.driver_max", cuda, "nvml"), Fact("driver.version", driver, "/proc"),
        Fact("driver.flavour", "open", "/proc"), Fact("driver.gpu_count", count, "nvml"), Fact("driver.gpu_names", [name], "nvml"),
        Fact("driver.gpus", [gpu(i, name, rng, sick and i == 3) for i in range(count)], "nvml"),
        Fact("driver.xid_events", xid, "dmesg"), Fact("kernel.release", kernel, "/proc/version"),
        Fact("os.id", os_id, "/etc/host-os-release"), Fact("shm.size_bytes", 67108864, "/proc/mounts"),
        Fact("python.version", "3.11.9", "sys"),
    ])
    return json.loads(render_json(diagnose(facts, {"source": "live"})))


def in_process(paths: list[str], stdin: bytes | None = None) -> dict:
    from oomdoctor.analysis.fleet import aggregate, summarize
    from oomdoctor.collectors.reports import iter_report_sources
    from oomdoctor.render.fleet import to_json

    if stdin is not None:
        sys.stdin = io.TextIOWrapper(io.BytesIO(stdin))
    try:
        result = aggregate(summarize(doc, src) for src, doc, err in iter_report_sources(paths) if not err)
    finally:
        sys.stdin = sys.__stdin__
    return {"stdout": to_json(result)}


def peer(files: list[Path]) -> int:
    groups: dict[tuple, int] = {}
    for f in files:
        r = report_from_json(json.loads(f.read_text()))
        key = tuple(json.dumps(r.facts.value(k), sort_keys=True) for k in sorted(r.facts) if k.startswith(("kernel", "driver.version")))
        groups[key] = groups.get(key, 0) + 1
    return len(groups)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=10_000)
    args = ap.parse_args()
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "reports"
        d.mkdir()
        stream = io.StringIO()
        t0 = time.perf_counter()
        for n in range(args.nodes):
            doc = node_report(n, rng)
            text = json.dumps(doc, indent=2)
            (d / f"gpu-{n:05d}.json").write_text(text)
            prefix = f"[pod/oomdoctor-{n:05x}/oomdoctor] "
            stream.write("".join(prefix + line + "\n" for line in text.splitlines()))
        gen = time.perf_counter() - t0
        (Path(tmp) / "stream.log").write_text(stream.getvalue())
        size = sum(f.stat().st_size for f in d.iterdir())
        cmd = [sys.executable, "-m", "oomdoctor", "fleet", "--format", "json"]
        rows = []
        t0 = time.perf_counter()
        res = in_process([str(d)])
        rows.append(("fleet library: DIR (read+parse+aggregate+JSON)", time.perf_counter() - t0, res))
        t0 = time.perf_counter()
        res = in_process(["-"], (Path(tmp) / "stream.log").read_bytes())
        rows.append(("fleet library: kubectl --prefix stream", time.perf_counter() - t0, res))
        t0 = time.perf_counter()
        out = subprocess.run([*cmd, str(d)], capture_output=True, text=True)
        rows.append(("oomdoctor fleet DIR (CLI process, end to end)", time.perf_counter() - t0, out))
        t0 = time.perf_counter()
        with open(Path(tmp) / "stream.log", "rb") as fh:
            out2 = subprocess.run([*cmd, "-"], stdin=fh, capture_output=True, text=True)
        rows.append(("oomdoctor fleet - (CLI process, stdin stream)", time.perf_counter() - t0, out2))
        t0 = time.perf_counter()
        ngroups = peer(sorted(d.iterdir()))
        rows.append(("peer: json.load + report_from_json each", time.perf_counter() - t0, None))
        print(f"{args.nodes} reports, {size / 2**20:.0f} MiB on disk (generated in {gen:.1f} s)\n")
        print(f"{'method':<46} {'seconds':>8} {'vs peer':>8}  result")
        base = rows[-1][1]
        for label, secs, res in rows:
            if res is not None:
                if not isinstance(res, dict) and res.returncode not in (0, 1):
                    raise SystemExit(res.stderr)
                doc = json.loads(res["stdout"] if isinstance(res, dict) else res.stdout)
                info = f"{doc['nodes']} nodes, {len(doc['groups'])} groups, {len(doc['outliers'])} outliers"
            else:
                info = f"{ngroups} kernel/driver groups (no outliers, no findings)"
            print(f"{label:<46} {secs:8.2f} {secs / base:7.2f}x  {info}")


if __name__ == "__main__":
    main()
