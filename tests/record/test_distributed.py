"""Distributed runs on CPU (gloo, 2 processes): one timeline per rank, merged in the report."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available():
    pytest.skip("torch.distributed not available", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]

WORKER = """
import os, sys, torch, torch.distributed as dist, oomdoctor
dist.init_process_group("gloo")
model = torch.nn.Linear(32, 32)
for step in range(6):
    t = model(torch.randn(8, 32)).sum().detach()
    dist.all_reduce(t)
    oomdoctor.step()
dist.barrier()
sys.stdout.write(f"rank {dist.get_rank()} done\\n")  # one write: the ranks share the pipe
sys.stdout.flush()
dist.destroy_process_group()
"""

SPAWNED = """
import sys, torch, torch.distributed as dist, torch.multiprocessing as mp, oomdoctor

def work(rank, run_dir, port):
    with oomdoctor.watch(run_dir, every_ms=20):
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
        for _ in range(4):
            t = torch.ones(4); dist.all_reduce(t); oomdoctor.step()
        import time; time.sleep(0.2)  # let the sampler see the rank
        dist.barrier()
        dist.destroy_process_group()

if __name__ == "__main__":
    mp.spawn(work, args=(sys.argv[1], int(sys.argv[2])), nprocs=2)
"""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src")
    return env


@pytest.mark.slow
def test_record_torchrun_gloo_two_ranks(tmp_path):
    script = tmp_path / "ddp.py"
    script.write_text(WORKER)
    run = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "oomdoctor", "record", "-q", "--dir", str(run), "--every-ms", "100",
                           "--", sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                           "--master-port", str(_port()), str(script)],
                          capture_output=True, text=True, env=_env(), timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(proc.stdout.split("\n"))[-2:] == ["rank 0 done", "rank 1 done"]
    for r in (0, 1):
        lines = [json.loads(x) for x in (run / f"timeline-rank{r}.jsonl").read_text().splitlines()]
        assert lines[0]["rank"] == r
        assert [x["step"] for x in lines if x["kind"] == "step"] == [1, 2, 3, 4, 5, 6]
    report = subprocess.run([sys.executable, "-m", "oomdoctor", "report", str(run), "--format", "json"],
                            capture_output=True, text=True, env=_env(), timeout=120)
    doc = json.loads(report.stdout)
    ranks = sorted(p["rank"] for p in doc["processes"] if p["rank"] is not None)
    assert ranks == [0, 1]


@pytest.mark.slow
def test_watch_discovers_rank_from_torch_distributed(tmp_path):
    script = tmp_path / "spawned.py"
    script.write_text(SPAWNED)
    run = tmp_path / "run"
    env = _env()
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        env.pop(k, None)
    proc = subprocess.run([sys.executable, str(script), str(run), str(_port())], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    names = sorted(p.name for p in run.glob("timeline-*.jsonl"))
    assert names == ["timeline-rank0.jsonl", "timeline-rank1.jsonl"]
