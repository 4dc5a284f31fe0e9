"""Lightning's default multi-device strategy on one machine: the ranks of one fit() are one run, in one directory.

strategy="ddp" runs rank 0 in the user's script and starts ranks 1..N-1 as its children, with MASTER_ADDR=127.0.0.1.
Keyed on their parent processes, rank 0 (parent: the shell) and rank 1 (parent: rank 0) were two jobs: runs/oom held
rank 1, runs/oom-2 rank 0, each saying world size 2 with one block ended. The port of a loopback rendezvous is held
on that machine while the job runs, so it names the job there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

FIT = """
import sys
import torch
import lightning.pytorch as pl
from oomdoctor.integrations.lightning import OomDoctorCallback

class Tiny(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

if __name__ == "__main__":
    torch.set_num_threads(1)
    data = torch.utils.data.TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
    trainer = pl.Trainer(max_epochs=1, limit_train_batches=2, accelerator="cpu", devices=2, strategy="ddp",
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[OomDoctorCallback(sys.argv[1], every_ms=50)])
    trainer.fit(Tiny(), torch.utils.data.DataLoader(data, batch_size=4))
    print("fitted", trainer.global_rank)
"""

LAUNCH_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK", "TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT",
               "SLURM_JOB_ID", "SLURM_NTASKS", "LSB_JOBID", "PBS_JOBID", "PMIX_NAMESPACE", "JOB_COMPLETION_INDEX")


@pytest.mark.slow
def test_the_ranks_of_a_lightning_ddp_fit_on_one_machine_share_one_run(tmp_path):
    pytest.importorskip("lightning.pytorch")
    script = tmp_path / "fit.py"
    script.write_text(FIT)
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS and not k.startswith("OOMDOCTOR")}
    env["PYTHONPATH"] = str(ROOT / "src")
    run = tmp_path / "runs" / "oom"
    job = subprocess.run([sys.executable, str(script), str(run)], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=300)
    assert job.returncode == 0 and job.stdout.count("fitted") == 2, job.stderr[-3000:]
    assert "already holds" not in job.stderr, job.stderr[-3000:]
    assert sorted(p.name for p in run.parent.iterdir()) == ["oom"]
    meta = json.loads((run / "run.json").read_text())
    assert meta["job"].startswith("rendezvous:") and "127.0.0.1" in meta["job"]
    assert meta["block"] == "lightning.fit" and meta["world_size"] == 2 and meta["blocks_ended"] == 2
    assert "exception" not in meta and "exited_inside" not in meta
    assert sorted(p.name for p in run.glob("timeline-*.jsonl")) == ["timeline-rank0.jsonl", "timeline-rank1.jsonl"]
