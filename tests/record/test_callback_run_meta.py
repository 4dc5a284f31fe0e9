"""The Hugging Face and Lightning callbacks write run.json as `oomdoctor.watch` does: `report` says how training ended.

Without it a callback's recording was reported as "ended: not recorded (no run.json ...)", and a second run into
the same directory was mixed into the first one's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from oomdoctor.injob import record

ROOT = Path(__file__).resolve().parents[2]

HF_JOB = """
import sys
import torch, transformers
from oomdoctor.integrations.hf import OomDoctorTrainerCallback

how = sys.argv[2]

class OutOfMemoryError(RuntimeError):
    pass

class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 2)
        self.calls = 0

    def forward(self, x, labels=None):
        self.calls += 1
        if how == "oom" and self.calls == 3:
            raise OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        logits = self.layer(x)
        return {"loss": torch.nn.functional.cross_entropy(logits, labels), "logits": logits}

class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 24

    def __getitem__(self, i):
        return {"x": torch.randn(4), "labels": torch.tensor(i % 2)}

class ExitAtStep2(transformers.TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        if how == "exit" and state.global_step == 2:
            sys.exit(0)

args = transformers.TrainingArguments(output_dir=sys.argv[1] + "-out", per_device_train_batch_size=4,
                                      num_train_epochs=1, report_to=[], use_cpu=True, save_strategy="no",
                                      logging_strategy="no", disable_tqdm=True)
callbacks = [OomDoctorTrainerCallback(sys.argv[1], every_ms=50), ExitAtStep2()]
transformers.Trainer(model=Tiny(), args=args, train_dataset=Data(), callbacks=callbacks).train()
print("trained")
"""


def _env():
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "MASTER_ADDR")
           and not k.startswith("OOMDOCTOR")}
    env["PYTHONPATH"] = str(ROOT / "src")
    return env


def _report(run_dir, fmt="text"):
    out = subprocess.run([sys.executable, "-m", "oomdoctor", "report", str(run_dir), "--format", fmt],
                         capture_output=True, text=True, env=_env(), timeout=120)
    assert out.returncode in (0, 1) and not out.stderr, out.stderr
    return out.stdout


def _hf_job(tmp_path, how):
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")  # transformers' Trainer needs it
    script = tmp_path / "hf_job.py"
    script.write_text(HF_JOB)
    return subprocess.run([sys.executable, str(script), str(tmp_path / "run"), how], capture_output=True, text=True,
                          env=_env(), cwd=tmp_path, timeout=300)


def _meta(run_dir: Path) -> dict:
    return json.loads((run_dir / "run.json").read_text())


def test_hf_training_that_ends_writes_how_it_ended(tmp_path):
    job = _hf_job(tmp_path, "clean")
    assert job.returncode == 0 and "trained" in job.stdout, job.stderr
    meta = _meta(tmp_path / "run")
    assert meta["recorded_by"] == "watch" and meta["block"] == "hf" and meta["ended_by"] == "watch"
    assert meta["returncode"] is None and meta["end"] >= meta["start"] and "exception" not in meta
    text = _report(tmp_path / "run")
    assert "ended: Trainer.train (the Hugging Face callback) ended normally" in text, text
    assert "cut short" not in text and "not recorded" not in text


def test_hf_training_killed_by_an_oom_says_so(tmp_path):
    """transformers has no exception hook: the OOM that ends the process is seen by sys.excepthook."""
    job = _hf_job(tmp_path, "oom")
    assert job.returncode == 1 and "OutOfMemoryError" in job.stderr, job.stderr  # the job's traceback, unchanged
    meta = _meta(tmp_path / "run")
    assert meta["exception"]["type"] == "OutOfMemoryError" and meta["exception"]["oom"] is True
    text = _report(tmp_path / "run")
    assert ("ended: Trainer.train (the Hugging Face callback) raised a CUDA out-of-memory error (OutOfMemoryError)"
            in text), text


def test_hf_training_left_by_an_exit_says_the_end_was_not_reached(tmp_path):
    job = _hf_job(tmp_path, "exit")
    assert job.returncode == 0 and "trained" not in job.stdout, job.stderr
    meta = _meta(tmp_path / "run")
    assert meta["exited_inside"] is True and "exception" not in meta
    text = _report(tmp_path / "run")
    assert "ended: the process exited inside Trainer.train (the Hugging Face callback), before its end" in text, text
    assert "cut short" not in text


def _lightning_fit(tmp_path, run="run", fail_at=None):
    torch = pytest.importorskip("torch")
    pl = pytest.importorskip("lightning.pytorch")
    from oomdoctor.integrations.lightning import OomDoctorCallback

    class OutOfMemoryError(RuntimeError):
        pass

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(8, 1)

        def training_step(self, batch, batch_idx):
            if batch_idx == fail_at:
                raise OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            x, y = batch
            return torch.nn.functional.mse_loss(self.layer(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = torch.utils.data.TensorDataset(torch.randn(40, 8), torch.randn(40, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    trainer = pl.Trainer(max_epochs=1, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         callbacks=[OomDoctorCallback(str(tmp_path / run), every_ms=50)])
    trainer.fit(Tiny(), loader)


def test_lightning_fit_that_ends_writes_how_it_ended(tmp_path, monkeypatch):
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "MASTER_ADDR"):
        monkeypatch.delenv(k, raising=False)
    _lightning_fit(tmp_path)
    assert record.current() is None
    meta = _meta(tmp_path / "run")
    assert meta["block"] == "lightning.fit" and meta["ended_by"] == "watch" and "exception" not in meta
    text = _report(tmp_path / "run")
    assert "ended: trainer.fit (the Lightning callback) ended normally" in text, text


def test_lightning_fit_that_raises_records_its_exception(tmp_path, monkeypatch):
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "MASTER_ADDR"):
        monkeypatch.delenv(k, raising=False)
    with pytest.raises(RuntimeError, match="CUDA out of memory"):
        _lightning_fit(tmp_path, fail_at=2)
    assert record.current() is None  # the recorder stopped with the run, not at the process's exit
    meta = _meta(tmp_path / "run")
    assert meta["exception"] == {"type": "OutOfMemoryError", "oom": True, "pid": os.getpid()}
    text = _report(tmp_path / "run")
    assert "ended: trainer.fit (the Lightning callback) raised a CUDA out-of-memory error (OutOfMemoryError)" in text


def test_a_second_run_of_a_callback_does_not_mix_into_the_first(tmp_path, monkeypatch, capsys):
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "MASTER_ADDR"):
        monkeypatch.delenv(k, raising=False)
    _lightning_fit(tmp_path)
    _lightning_fit(tmp_path)
    assert _meta(tmp_path / "run")["blocks_ended"] == 1
    assert _meta(tmp_path / "run-2")["blocks_ended"] == 1
    assert "recording into" in capsys.readouterr().err


FORKS_INSIDE = """
import json, os, sys
from oomdoctor.injob import record

def meta():
    with open(os.path.join(sys.argv[1], "run.json")) as f:
        return {k: v for k, v in json.load(f).items() if k in ("blocks_ended", "exited_inside", "exception")}

block = record.Block(sys.argv[1], "hf", until_exit=True, every_ms=50)
for how in ("exit", "raise"):
    pid = os.fork()
    if pid == 0:  # a helper forked inside training, leaving through the interpreter's exit
        if how == "raise":
            raise ValueError("the helper failed")
        sys.exit(0)
    os.waitpid(pid, 0)
print("children", json.dumps(meta()), flush=True)
block.end()
print("parent", json.dumps(meta()), flush=True)
"""


def test_a_process_forked_inside_training_does_not_end_its_block(tmp_path):
    """A fork inherits the atexit hook and sys.excepthook: a child leaving ended the parent's block, so a finished
    run read "the process exited inside Trainer.train, before its end" (or raised the child's exception)."""
    script = tmp_path / "forks.py"
    script.write_text(FORKS_INSIDE)
    job = subprocess.run([sys.executable, str(script), str(tmp_path / "run")], capture_output=True, text=True,
                         env=_env(), cwd=tmp_path, timeout=120)
    assert job.returncode == 0 and "the helper failed" in job.stderr, job.stderr  # the child's traceback, unchanged
    seen = dict(line.split(" ", 1) for line in job.stdout.splitlines())
    assert json.loads(seen["children"]) == {}
    assert json.loads(seen["parent"]) == {"blocks_ended": 1}
    assert "ended: Trainer.train (the Hugging Face callback) ended normally" in _report(tmp_path / "run")


@pytest.mark.parametrize("block, wording", [
    ("lightning.sanity_check", "trainer.sanity_check (the Lightning callback)"),
    ("keras", "the recorded block (keras)"),
    ("\x1b[2J" + "x" * 500, "the recorded block"),
    (["watch"], "the recorded block"),
    (None, "the watched block (oomdoctor.watch)"),  # a run.json written before `block` was
])
def test_a_block_the_report_does_not_know_is_worded_as_what_it_is(block, wording):
    from oomdoctor.analysis import kill

    meta = {"ended_by": "watch", "returncode": None, "block": block}
    assert kill.exit_wording(meta) == f"{wording} ended normally"
    meta["exited_inside"] = True
    assert kill.exit_wording(meta) == f"the process exited inside {wording}, before its end"
