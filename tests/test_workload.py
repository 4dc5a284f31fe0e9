"""GIVEN workload files WHEN loaded and stepped on the CPU THEN the contract holds and errors name the file."""

from __future__ import annotations

import textwrap

import pytest

from oomdoctor.errors import InputError
from oomdoctor.workload.load import load_workload

MLP = """
import torch
def build(batch_size):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    return {"model": model, "inputs": (torch.randn(batch_size, 8),),
            "target": torch.randint(0, 4, (batch_size,)),
            "loss": torch.nn.functional.cross_entropy, "optimizer": "adam"}
"""


def write(tmp_path, text, name="w.py"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def test_three_steps_change_the_weights_and_create_adam_state(tmp_path):
    torch = pytest.importorskip("torch")
    from oomdoctor.workload.step import StepRunner

    spec = load_workload(write(tmp_path, MLP)).spec(4)
    before = [p.detach().clone() for p in spec.model.parameters()]
    runner = StepRunner(spec, device_type="cpu")
    for _ in range(3):
        runner.step()
    assert any(not torch.equal(a, b) for a, b in zip(before, spec.model.parameters()))
    assert len(runner.optimizer.state) == len(before)
    assert all(p.grad is None for p in spec.model.parameters())  # zero_grad(set_to_none=True)


@pytest.mark.parametrize("text,needle", [
    ("def build(:\n", "syntax error"),
    ("x = 1\n", "no build"),
    ("def build(b):\n    raise RuntimeError('boom')\n", "raised RuntimeError: boom"),
    ("def build(b):\n    return [1]\n", "must return a dict"),
    ("def build(b):\n    return {'model': 1, 'inputs': 2, 'optimizer': 'lion'}\n", "optimizer must be"),
    ("raise ImportError('no module named foo')\n", "importing it raised"),
])
def test_bad_workloads_name_the_file(tmp_path, text, needle):
    path = write(tmp_path, text)
    with pytest.raises(InputError) as exc:
        load_workload(path).spec(2)
    assert str(path) in exc.value.message and needle in exc.value.message


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="no such workload file"):
        load_workload(tmp_path / "nope.py")


def test_a_workload_asking_for_checkpointing_steps_quietly():
    """max-batch and the estimator step a workload with gradient_checkpointing: True through StepRunner; the
    checkpointing call and the use_cache notice it used to cause each step are oomdoctor's, not the user's."""
    import logging
    import warnings

    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from oomdoctor.workload.load import WorkloadSpec
    from oomdoctor.workload.step import StepRunner

    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2)
    x = torch.randint(0, 64, (2, 8))
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    tlog = logging.getLogger("transformers")
    tlog.addHandler(handler)
    cache_clear = getattr(logging.Logger.warning_once, "cache_clear", None)  # transformers says it once a process
    if cache_clear:
        cache_clear()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            spec = WorkloadSpec.from_dict({"model": transformers.LlamaForCausalLM(cfg),
                                           "inputs": {"input_ids": x, "labels": x}, "optimizer": "adamw",
                                           "gradient_checkpointing": {"use_reentrant": False}})
            runner = StepRunner(spec, "cpu")
            runner.step()
            runner.step()
    finally:
        tlog.removeHandler(handler)
    assert any(getattr(m, "gradient_checkpointing", False) for m in spec.model.modules())  # and it is on
    assert not [str(w.message) for w in caught if "checkpointing" in str(w.message)]
    assert not [r.getMessage() for r in records if "use_cache" in r.getMessage()]
