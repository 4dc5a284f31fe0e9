"""A workload whose own step fails is told so, in one line naming its file's line (estimate/step_errors.py).

An autograd error (a loss without a gradient, an in-place change of a leaf, a saved tensor changed in place) is
the workload's, as on a GPU, not the tracer's; when none of the file's code is on the stack, the line is that of
the code that made what failed (the loss function, the model's forward, or build())."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from oomdoctor.cli import main  # noqa: E402

# each "#>" marks the line the message must name
DETACHED = """import torch


class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):  #>
        return self.lin(x).detach()


def build(batch_size):
    return {"model": M(), "inputs": torch.randn(batch_size, 8), "optimizer": "sgd"}
"""

LOSS_WITHOUT_GRAD = """import torch


def build(batch_size):
    return {"model": torch.nn.Linear(8, 8), "inputs": torch.randn(batch_size, 8), "optimizer": "sgd",
            "loss": lambda out: out.sum().detach()}  #>
"""

LEAF_IN_FORWARD = """import torch


class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        self.lin.weight.add_(1.0)  #>
        return self.lin(x)


def build(batch_size):
    return {"model": M(), "inputs": torch.randn(batch_size, 8), "optimizer": "sgd"}
"""

# the leaf is the batch build() returns; torch's own ReLU changes it in place: no line of the file is on the stack
LEAF_FROM_BUILD = """import torch


def build(batch_size):  #>
    model = torch.nn.Sequential(torch.nn.ReLU(inplace=True), torch.nn.Linear(8, 8))
    return {"model": model, "inputs": torch.randn(batch_size, 8, requires_grad=True), "optimizer": "sgd"}
"""

SAVED_CHANGED = """import torch


class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):  #>
        y = torch.sigmoid(self.lin(x))
        y.mul_(2)
        return y


def build(batch_size):
    return {"model": M(), "inputs": torch.randn(batch_size, 8), "optimizer": "sgd"}
"""


def _marked(text: str) -> int:
    return next(i for i, ln in enumerate(text.splitlines(), 1) if ln.rstrip().endswith("#>"))


@pytest.mark.parametrize("text, needles", [
    (DETACHED, ["the workload's own step fails at loss.backward(), as it would on a GPU",
                "RuntimeError: element 0 of tensors does not require grad and does not have a grad_fn",
                "(line {line}: the model's forward)"]),
    (LOSS_WITHOUT_GRAD, ["at loss.backward()", "element 0 of tensors does not require grad",
                         "(line {line}: the loss function)"]),
    (LEAF_IN_FORWARD, ["the workload's own step fails in the forward, as it would on a GPU (in the model, a M)",
                       "a leaf Variable that requires grad is being used in an in-place operation"]),
    (LEAF_FROM_BUILD, ["the workload's own step fails in the forward, as it would on a GPU (in model.0, a ReLU)",
                       "a leaf Variable that requires grad is being used in an in-place operation",
                       "(line {line}: build(), whose inputs include a leaf tensor that requires grad)"]),
    (SAVED_CHANGED, ["at loss.backward()", "needed for gradient computation has been modified by an inplace",
                     "(line {line}: the model's forward)"]),
], ids=["detached-output", "loss-without-grad", "leaf-in-forward", "leaf-from-build", "saved-tensor-changed"])
def test_an_autograd_error_is_the_workloads_own_and_names_its_line(tmp_path, capfd, text, needles):
    p = tmp_path / "wl.py"
    p.write_text(text)
    line = _marked(text)
    assert main(["estimate", str(p), "--batch-size", "4"]) == 2
    out, err = capfd.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1, err
    assert f"{p}:{line}: " in err
    assert "fake tensor" not in err and "tracer" not in err
    for needle in needles:
        assert needle.format(line=line) in err, err


def test_a_failing_input_from_build_names_builds_line(capfd):
    """Linear(4, 4) fed build()'s (batch, 5) batch: torch's Linear raises, no line of the file is on the stack;
    the line is build()'s, which made the model and the batch."""
    from pathlib import Path

    wl = Path(__file__).parent / "fixtures" / "workloads" / "shape_err.py"
    line = next(i for i, ln in enumerate(wl.read_text().splitlines(), 1) if ln.startswith("def build("))
    assert main(["estimate", str(wl), "--batch-size", "4"]) == 2
    err = capfd.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith(f"oomdoctor estimate: {wl}:{line}: the step fails at aten.addmm (in the model, a Linear)")
    assert err.endswith(f"(line {line}: build(), which made the model and its inputs)")


def test_an_error_of_the_workloads_own_code_outside_its_file_names_builds_line(tmp_path, capfd):
    """Every parameter frozen: torch's optimizer refuses an empty list; build() is where that was decided."""
    p = tmp_path / "frozen.py"
    p.write_text("import torch\n\n\ndef build(batch_size):\n    model = torch.nn.Linear(8, 8).requires_grad_(False)\n"
                 "    return {'model': model, 'inputs': torch.randn(batch_size, 8)}\n")
    assert main(["estimate", str(p), "--batch-size", "4"]) == 2
    err = capfd.readouterr().err.strip()
    assert f"{p}:4: the step raised ValueError" in err and "optimizer got an empty parameter list" in err
    assert err.endswith("(line 4: build(), which made the model and its inputs)")


def test_a_workload_built_by_a_callable_has_no_line_to_name():
    from oomdoctor.errors import InputError
    from oomdoctor.estimate import estimator

    def build(b):
        import torch

        return {"model": torch.nn.Linear(8, 8), "inputs": torch.randn(b, 8), "optimizer": "sgd",
                "loss": lambda out: out.sum().detach()}

    with pytest.raises(InputError) as info:
        estimator.estimate(build, 2)
    assert str(info.value).startswith("build: the workload's own step fails at loss.backward()")
