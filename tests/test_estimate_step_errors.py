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


# an op of the workload's own library with a CPU kernel and no meta (fake) one
CUSTOM_LIBRARY_OP = """import torch

lib = torch.library.Library("oomdoctor_test_wl", "DEF")
lib.define("scale(Tensor x) -> Tensor")
lib.impl("scale", lambda x: x * 2, "CPU")


class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.ops.oomdoctor_test_wl.scale(self.lin(x))


def build(batch_size):
    return {"model": M(), "inputs": torch.randn(batch_size, 8), "optimizer": "sgd"}
"""

CUSTOM_OP = """import torch


@torch.library.custom_op("oomdoctor_test_wl2::scale", mutates_args=())
def scale(x: torch.Tensor) -> torch.Tensor:
    return x * 2


class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        return scale(self.lin(x))


def build(batch_size):
    return {"model": M(), "inputs": torch.randn(batch_size, 8), "optimizer": "sgd"}
"""

# MultiMarginLoss's backward has no meta kernel in torch 2.x: fake tensors run it for real on zero-filled CPU tensors
MARGIN_LOSS = """import torch


def build(batch_size):
    return {"model": torch.nn.Linear(64, 1000), "inputs": torch.randn(batch_size, 64),
            "target": torch.randint(0, 1000, (batch_size,)), "loss": torch.nn.MultiMarginLoss(), "optimizer": "sgd"}
"""


def _no_meta_line(err: str, path, op: str) -> None:
    import torch

    assert len(err.strip().splitlines()) == 1, err
    assert f"{path}: {op} has no meta (fake tensor) implementation in torch {torch.__version__}" in err
    assert "a limit of estimating without a GPU" in err and f"oomdoctor max-batch {path}" in err
    assert "replace the op" in err
    assert "the step fails at" not in err and "the workload's own step" not in err


@pytest.mark.parametrize("text, op", [(CUSTOM_LIBRARY_OP, "oomdoctor_test_wl.scale"),
                                      (CUSTOM_OP, "oomdoctor_test_wl2.scale")], ids=["library", "custom_op"])
def test_an_op_without_a_meta_kernel_is_a_limit_of_the_estimate(tmp_path, capfd, text, op):
    p = tmp_path / "wl.py"
    p.write_text(text)
    assert main(["estimate", str(p), "--batch-size", "4"]) == 2
    err = capfd.readouterr().err
    _no_meta_line(err, p, op)
    assert "torch.library.register_fake" in err  # the workload's own op can be given one


def test_a_big_op_without_a_meta_kernel_whose_cpu_run_fails_is_no_error_of_the_workload(tmp_path, capfd, monkeypatch):
    """Fake tensors run an op without a meta kernel for real, on zero-filled CPU tensors of its full size: a big one
    exhausts the host's memory (measured: batch 2M under a 10 GB address-space limit). That was reported as the
    workload's step failing with the CPU allocator's words."""
    from torch._subclasses import fake_tensor

    real_fallback = fake_tensor.run_fallback_kernel

    def host_out_of_memory(mode, func, *args, **kwargs):
        if "multi_margin_loss_backward" in str(func):
            raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate "
                               "memory: you tried to allocate 8000000000 bytes. Error code 12 (Cannot allocate memory)")
        return real_fallback(mode, func, *args, **kwargs)

    monkeypatch.setattr(fake_tensor, "run_fallback_kernel", host_out_of_memory)
    p = tmp_path / "margin.py"
    p.write_text(MARGIN_LOSS)
    assert main(["estimate", str(p), "--batch-size", "4"]) == 2
    err = capfd.readouterr().err
    _no_meta_line(err, p, "aten.multi_margin_loss_backward")
    assert "can't allocate memory" in err  # what the CPU run in its place said
    assert "register_fake" not in err  # torch's own op: measure or replace


def test_a_small_op_without_a_meta_kernel_still_estimates(tmp_path, capsys):
    p = tmp_path / "margin.py"
    p.write_text(MARGIN_LOSS)
    assert main(["estimate", str(p), "--batch-size", "4"]) == 0


CTC = """import torch


def build(batch_size):
    lengths = torch.full((batch_size,), 50, dtype=torch.long)
    return {"model": torch.nn.Sequential(torch.nn.Linear(32, 20), torch.nn.LogSoftmax(-1)),
            "inputs": torch.randn(50, batch_size, 32), "target": torch.randint(1, 20, (batch_size, 10)),
            "loss": lambda out, tg: torch.nn.functional.ctc_loss(out, tg, lengths, torch.full_like(lengths, 10)),
            "optimizer": "sgd"}
"""


def test_an_op_whose_output_is_sized_by_values_is_a_limit_of_the_estimate(tmp_path, capfd):
    """CTC's loss (no meta kernel either) sizes its output by the target lengths' values."""
    p = tmp_path / "ctc.py"
    p.write_text(CTC)
    assert main(["estimate", str(p), "--batch-size", "4"]) == 2
    err = capfd.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert f"{p}: the size of what aten._ctc_loss.Tensor returns depends on its inputs' values" in err
    assert "a limit of estimating without a GPU" in err and f"oomdoctor max-batch {p}" in err
    assert "which fake tensors cannot run" not in err
