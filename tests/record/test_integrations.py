"""Lightning and Hugging Face callbacks mark steps (skipped when the framework is not installed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oomdoctor.injob import record


def _steps(run: Path) -> list[int]:
    files = list(run.glob("timeline-*.jsonl"))
    assert len(files) == 1
    return [r["step"] for r in map(json.loads, files[0].read_text().splitlines()) if r["kind"] == "step"]


def test_lightning_callback_marks_every_batch(tmp_path):
    torch = pytest.importorskip("torch")
    pl = pytest.importorskip("lightning.pytorch")
    from oomdoctor.integrations.lightning import OomDoctorCallback

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(8, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.mse_loss(self.layer(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = torch.utils.data.TensorDataset(torch.randn(40, 8), torch.randn(40, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    trainer = pl.Trainer(max_epochs=2, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         callbacks=[OomDoctorCallback(str(tmp_path / "run"), every_ms=50)])
    trainer.fit(Tiny(), loader)
    assert _steps(tmp_path / "run") == list(range(1, 11))
    assert record.current() is None


def test_hf_callback_marks_optimizer_steps(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")  # transformers' Trainer needs it
    from oomdoctor.integrations.hf import OomDoctorTrainerCallback

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 2)

        def forward(self, x, labels=None):
            logits = self.layer(x)
            return {"loss": torch.nn.functional.cross_entropy(logits, labels), "logits": logits}

    class Data(torch.utils.data.Dataset):
        def __len__(self):
            return 24

        def __getitem__(self, i):
            return {"x": torch.randn(4), "labels": torch.tensor(i % 2)}

    args = transformers.TrainingArguments(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4,
                                          num_train_epochs=1, report_to=[], use_cpu=True, save_strategy="no",
                                          logging_strategy="no", disable_tqdm=True)
    trainer = transformers.Trainer(model=Tiny(), args=args, train_dataset=Data(),
                                   callbacks=[OomDoctorTrainerCallback(str(tmp_path / "run"), every_ms=50)])
    trainer.train()
    assert _steps(tmp_path / "run") == [1, 2, 3, 4, 5, 6]
    assert record.current() is None
