"""`oomdoctor estimate` end to end on the CPU: JSON contract, exit codes, bad workload files, --max-batch."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from oomdoctor.cli import main  # noqa: E402

MLP = """
import torch

def build(batch_size):
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    return {"model": model, "inputs": (torch.randn(batch_size, 256),),
            "target": torch.randint(0, 10, (batch_size,)), "loss": torch.nn.functional.cross_entropy,
            "optimizer": "adam"}
"""


@pytest.fixture()
def mlp(tmp_path):
    p = tmp_path / "mlp.py"
    p.write_text(MLP)
    return p


def test_json_contract(mlp, capsys):
    assert main(["estimate", str(mlp), "--batch-size", "32", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema_version"] == 1 and doc["tool_version"]
    assert doc["batch_size"] == 32
    for key in ("peak_allocated_bytes", "peak_reserved_bytes", "process_total_bytes"):
        assert isinstance(doc[key], int) and doc[key] > 0
    assert set(doc["breakdown"]) >= {"parameters", "gradients", "optimizer_state", "activations", "workspace",
                                     "context"}
    assert doc["peak_reserved_bytes"] >= doc["peak_allocated_bytes"]
    assert doc["process_total_bytes"] == doc["peak_reserved_bytes"] + doc["breakdown"]["context"]


def test_text_and_html(mlp, capsys, tmp_path):
    assert main(["estimate", str(mlp), "--batch-size", "8", "--gpu", "t4"]) == 0
    out = capsys.readouterr().out
    assert "peak reserved" in out and "FITS" in out
    html = tmp_path / "e.html"
    assert main(["estimate", str(mlp), "--batch-size", "8", "--format", "html", "-o", str(html)]) == 0
    assert "<html" in html.read_text()


def test_does_not_fit_exits_1(mlp, capsys):
    assert main(["estimate", str(mlp), "--batch-size", "8", "--memory-limit", "1MiB"]) == 1
    assert "DOES NOT FIT" in capsys.readouterr().out


BAD = {
    "syntax.py": ("def build(:\n", "syntax error"),
    "nobuild.py": ("x = 1\n", "no build"),
    "raises.py": ("def build(batch_size):\n    raise ValueError('boom')\n", "boom"),
    "raises_multiline.py": ("def build(batch_size):\n    raise ValueError('boom\\nsecond line')\n", "boom"),
    "unsupported.py": ("""
import torch

class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x)[torch.nonzero(x[:, 0] > 0).flatten()]

def build(batch_size):
    return {"model": M(), "inputs": (torch.randn(batch_size, 4),), "optimizer": "sgd"}
""", "aten.nonzero"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_workloads_exit_2_one_line(tmp_path, capsys, name):
    text, needle = BAD[name]
    p = tmp_path / name
    p.write_text(text)
    assert main(["estimate", str(p), "--batch-size", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert str(p) in err and needle in err


def test_missing_file_and_bad_size(tmp_path, capsys):
    assert main(["estimate", str(tmp_path / "nope.py"), "--batch-size", "2"]) == 2
    assert main(["estimate", str(tmp_path / "nope.py"), "--batch-size", "2", "--memory-limit", "lots"]) == 2
    assert main(["estimate", str(tmp_path / "nope.py"), "--batch-size", "2", "--gpu", "gtx-9999"]) == 2


def test_max_batch_is_monotonic_in_the_limit(mlp, capsys):
    found = []
    for limit in ("100MiB", "160MiB"):
        assert main(["estimate", str(mlp), "--max-batch", "--memory-limit", limit, "--format", "json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["memory_limit_bytes"] > 0
        found.append(doc["max_batch_size"])
    assert 1 <= found[0] <= found[1]
    # the answer fits and one more does not
    assert main(["estimate", str(mlp), "--batch-size", str(found[0]), "--memory-limit", "100MiB"]) == 0
    assert main(["estimate", str(mlp), "--batch-size", str(found[0] + 1), "--memory-limit", "100MiB"]) == 1


@pytest.mark.parametrize("argv, words", [
    (["--model", "cfg", "--lora-r", "8"], "--lora-r applies to --task lora or qlora; this is --task train"),
    (["--model", "cfg", "--task", "lora", "--num-beams", "4"], "--num-beams applies to --task generate"),
    (["--model", "cfg", "--task", "lora", "--kbit-prep"], "--kbit-prep applies to --task qlora"),
    (["WORKLOAD", "--batch-size", "2", "--task", "lora"], "--task shapes a --model estimate"),
])
def test_an_option_the_estimate_would_ignore_is_refused(mlp, capsys, argv, words):
    # a new user's walkthrough (session 25): --lora-r without --task lora silently gave a full fine-tune's figure
    argv = [str(mlp) if a == "WORKLOAD" else a for a in argv]
    assert main(["estimate", *argv]) == 2
    assert words in capsys.readouterr().err


@pytest.mark.parametrize("name, key", [("rtx4090", "rtx-4090"), ("RTX 4090", "rtx-4090"), ("nvidia-a100-80g", "a100-80gb"),
                                       ("H100 SXM", "h100"), ("tesla-t4", "t4"), ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
                                       ("NVIDIA H100 80GB HBM3", "h100"), ("Tesla V100-SXM2-32GB", "v100-32gb")])
def test_a_gpu_is_found_by_the_names_people_write(name, key):
    from oomdoctor.knowledge.gpus import get_gpu
    assert get_gpu(name).key == key


def test_a_gpu_name_with_two_sizes_asks_which(mlp, capsys):
    assert main(["estimate", str(mlp), "--batch-size", "2", "--gpu", "a100"]) == 2
    assert "a100-40gb or a100-80gb" in capsys.readouterr().err


def test_a_directory_given_as_the_workload_says_so(tmp_path, capsys):
    (tmp_path / "config.json").write_text("{}")
    assert main(["estimate", str(tmp_path), "--batch-size", "2"]) == 2
    err = capsys.readouterr().err
    assert "a directory, not a workload file" in err and "--model DIR" in err


def test_qlora_refuses_an_fp32_base_it_would_not_model(capsys):
    # review, session 25: --task qlora --dtype fp32 printed fp32 in its header and estimated bf16
    assert main(["estimate", "--model", "cfg", "--task", "qlora", "--dtype", "fp32"]) == 2
    assert "--dtype fp32 is not modelled" in capsys.readouterr().err


@pytest.mark.parametrize("argv, flag, task", [
    (["--task", "infer", "--optimizer", "adamw"], "--optimizer", "infer"),  # the default, given explicitly
    (["--task", "infer", "--optimizer", "sgd"], "--optimizer", "infer"),
    (["--task", "infer", "--gradient-checkpointing"], "--gradient-checkpointing", "infer"),
    (["--task", "generate", "--optimizer", "adamw"], "--optimizer", "generate"),
    (["--task", "generate", "--gradient-checkpointing"], "--gradient-checkpointing", "generate"),
])
def test_a_training_option_given_for_inference_is_refused(capsys, argv, flag, task):
    # new-user walkthrough (session 27): --task infer --optimizer adamw was accepted and meant nothing
    assert main(["estimate", "--model", "cfg", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"{flag} does not apply to --task {task}" in err


def test_the_optimizer_still_defaults_to_adamw_for_training():
    import argparse

    from oomdoctor.cli import estimate as cli

    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args(["--model", "cfg"])
    assert cli.optimizer_of(args) == "adamw"
    assert cli.optimizer_of(parser.parse_args(["--model", "cfg", "--optimizer", "sgd"])) == "sgd"


# the names nvidia-smi / NVML print (nvidia-smi --query-gpu=name), as users paste them
@pytest.mark.parametrize("name, key", [
    ("NVIDIA A100 80GB PCIe", "a100-80gb"), ("NVIDIA A100-PCIE-40GB", "a100-40gb"), ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
    ("NVIDIA H100 NVL", "h100-nvl"), ("NVIDIA H100 PCIe", "h100-pcie"), ("NVIDIA H100 80GB HBM3", "h100"),
    ("nvidia h100-sxm5-80gb", "h100"), ("H100 NVL 94GB", "h100-nvl"), ("NVIDIA H200", "h200"),
    ("NVIDIA L40S", "l40s"), ("NVIDIA L4", "l4"), ("NVIDIA A10G", "a10g"), ("NVIDIA A10", "a10"),
    ("Tesla T4", "t4"), ("Tesla V100-PCIE-16GB", "v100-16gb"), ("Tesla V100-SXM2-32GB", "v100-32gb"),
    ("NVIDIA GeForce RTX 4090", "rtx-4090"), ("NVIDIA GeForce RTX 3090", "rtx-3090"), ("nvidia_a100_80gb_pcie", "a100-80gb"),
])
def test_a_gpu_is_found_by_the_name_nvidia_smi_prints(name, key):
    from oomdoctor.knowledge.gpus import get_gpu
    assert get_gpu(name).key == key


def test_the_h100_nvl_has_its_own_memory():
    # NVIDIA's datasheet: 94 GB HBM3 per GPU; nvidia-smi shows 95830 MiB (an H100 SXM 81559 MiB)
    from oomdoctor.knowledge.gpus import GIB, get_gpu
    nvl, sxm = get_gpu("NVIDIA H100 NVL"), get_gpu("h100")
    assert 88 * GIB < nvl.total_memory < 94 * GIB and nvl.total_memory > sxm.total_memory + 10 * GIB
    assert get_gpu("NVIDIA A100 80GB PCIe").total_memory > 78 * GIB


@pytest.mark.parametrize("name, near", [("NVIDIA H10 PCIe", "h100-pcie"), ("NVIDIA H100 40GB", "h100"),
                                        ("NVIDIA L40", "l40s"), ("NVIDIA GH200 480GB", "h200")])
def test_an_unknown_gpu_is_one_line_with_close_matches(mlp, capsys, name, near):
    assert main(["estimate", str(mlp), "--batch-size", "2", "--gpu", name]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "unknown GPU" in err
    closest = err.split("closest: ", 1)[1].split(";", 1)[0]  # named apart from the whole table
    assert near in closest.split(", ")


def test_every_key_of_the_table_is_reachable_and_names_a_row():
    from oomdoctor.knowledge import gpus
    assert {k for _, _, _, k in gpus._VARIANTS} == set(gpus.GPUS)
    for key in gpus.GPUS:
        assert gpus.get_gpu(key).key == key


def test_a_mig_slice_name_asks_for_its_memory_limit(mlp, capsys):
    # nvidia-smi names a MIG device after its board: the board's memory would be the wrong figure
    assert main(["estimate", str(mlp), "--batch-size", "2", "--gpu", "NVIDIA A100-SXM4-40GB MIG 1g.5gb"]) == 2
    assert "MIG slice" in capsys.readouterr().err


@pytest.mark.parametrize("device, key", [("NVIDIA A100 80GB PCIe", "a100-80gb"), ("NVIDIA H100 NVL", "h100-nvl"),
                                         ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA L40", None), (None, None)])
def test_max_batch_starts_from_the_estimate_for_the_gpu_cuda_names(device, key):
    from oomdoctor.trials.max_batch import _gpu_key
    assert _gpu_key(device) == key


def test_an_unknown_task_is_named_before_the_options_it_would_refuse(capsys):
    assert main(["estimate", "--model", "cfg", "--task", "pretrain", "--optimizer", "sgd"]) == 2
    assert "--task must be one of" in capsys.readouterr().err


def test_the_recipe_refuses_checkpointing_for_inference():
    from oomdoctor.errors import UsageError
    from oomdoctor.estimate import hf
    with pytest.raises(UsageError, match="--gradient-checkpointing does not apply to --task generate"):
        hf.Recipe(task="generate", gradient_checkpointing=True).check()


FIXTURES = __import__("pathlib").Path(__file__).parent / "fixtures" / "workloads"


def test_max_batch_searches_past_65536_to_the_memory_edge(capsys):
    # a new user's walkthrough (session 27): 1 GiB, 8 GiB and 80 GiB all answered 65536, the search's old cap
    wl = str(FIXTURES / "tiny_mlp.py")
    assert main(["estimate", wl, "--max-batch", "--memory-limit", "1GiB", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    best = doc["max_batch_size"]
    assert best > 65536 and doc["max_batch_size_bound"] == "memory" and "search_stopped" not in doc
    assert doc["trials"][str(best)] is True and doc["trials"][str(best + 1)] is False
    assert main(["estimate", wl, "--batch-size", str(best + 1), "--memory-limit", "1GiB"]) == 1
    assert main(["estimate", wl, "--max-batch", "--memory-limit", "8GiB"]) == 0
    out = capsys.readouterr().out
    assert "at least" not in out
    bigger = int(out.split("fits 8.00 GiB: ")[1].split()[0])
    assert bigger > 7 * best


def test_max_batch_at_the_search_cap_says_at_least(tmp_path, capsys):
    # memory that does not grow with the batch: the search stops at its cap and says so, not "largest: N"
    p = tmp_path / "flat.py"
    p.write_text("import torch\ndef build(batch_size):\n"
                 "    return {'model': torch.nn.Linear(4, 4), 'inputs': (torch.randn(2, 4),), 'optimizer': 'sgd'}\n")
    from oomdoctor.estimate import estimator

    found = estimator.max_batch(str(p), memory_limit=1 << 30, upper=1 << 10)
    assert (found.max_batch_size, found.bound) == (1 << 10, "search_limit")
    assert "does not grow with the batch size" in found.stopped
    best, tried = found  # unpacks as before
    assert best == 1 << 10 and all(tried.values())
    assert main(["estimate", str(p), "--max-batch", "--memory-limit", "1GiB", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["max_batch_size"], doc["max_batch_size_bound"]) == (estimator.MAX_BATCH_CAP, "search_limit")
    assert doc["search_stopped"]
    assert main(["estimate", str(p), "--max-batch", "--memory-limit", "1GiB"]) == 0
    assert f"at least {estimator.MAX_BATCH_CAP} (the search stopped at" in capsys.readouterr().out


@pytest.mark.parametrize("name, argv, needles", [
    # a new user's walkthrough (session 27): a shape bug was reported as "fake tensors cannot run aten.addmm"
    ("shape_err.py", ["--batch-size", "4"], ["aten.addmm (in the model, a Linear)",
                                             "mat1 and mat2 shapes cannot be multiplied (4x5 and 4x4)"]),
    ("shape_err.py", ["--max-batch", "--memory-limit", "1GiB"], ["mat1 and mat2 shapes cannot be multiplied (1x5"]),
    ("sub_shape.py", ["--batch-size", "4"], ["sub_shape.py:12: ", "(in model.head, a Linear)", "(4x16 and 32x2)"]),
    ("raise_fwd.py", ["--batch-size", "4"], ["raise_fwd.py:11: the step raised ValueError (in model.1, a Block)",
                                             "Block wants 4 features, got 3"]),
    # the meta kernels let a float64 batch into a float32 Linear; a real run refuses it
    ("dtype_err.py", ["--batch-size", "4"], ["mat1 and mat2 must have the same dtype"]),
    ("dtype_err.py", ["--batch-size", "40000000"], ["mat1 and mat2 must have the same dtype"]),  # 1x1 stand-ins
])
def test_a_workload_bug_is_its_own_one_line_error(capfd, name, argv, needles):
    wl = str(FIXTURES / name)
    assert main(["estimate", wl, *argv]) == 2
    out, err = capfd.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1, err  # no torch log of the same error (E... fake_tensor.py)
    assert "fake tensors cannot run" not in err and "under fake tensors" not in err
    for needle in needles:
        assert needle in err


def test_an_op_fake_tensors_cannot_run_is_still_said_so(capfd):
    # a CUDA tensor made in forward: fake tensors refuse the device mix, a run on the GPU would not
    assert main(["estimate", str(FIXTURES / "cuda_in_fwd.py"), "--batch-size", "4"]) == 2
    err = capfd.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "which fake tensors cannot run" in err


def test_the_fake_tensor_log_is_quiet_only_during_the_trace():
    import logging

    from oomdoctor.estimate import step_errors

    logger = logging.getLogger("torch._subclasses.fake_tensor")
    before = list(logger.filters)
    with step_errors.quiet_fake_tensor_log():
        assert len(logger.filters) == len(before) + 1
        try:
            raise RuntimeError("x")
        except RuntimeError:
            rec = logger.makeRecord(logger.name, logging.ERROR, __file__, 1, "failed", (), __import__("sys").exc_info())
        assert not logger.filter(rec)
        assert logger.filter(logger.makeRecord(logger.name, logging.WARNING, __file__, 1, "warn", (), None))
    assert logger.filters == before


def test_a_broken_build_is_named_with_its_line(tmp_path, capsys):
    p = tmp_path / "b.py"
    p.write_text("import torch\n\ndef build(batch_size):\n    x = torch.randn(batch_size, 5)\n"
                 "    y = x @ torch.randn(4, 4)\n    return {'model': torch.nn.Linear(4, 4), 'inputs': (y,)}\n")
    assert main(["estimate", str(p), "--batch-size", "4"]) == 2
    assert f"{p}:5: build(4) raised RuntimeError" in capsys.readouterr().err
    p.write_text("import torch\nraise ValueError('top')\n")
    assert main(["estimate", str(p), "--batch-size", "4"]) == 2
    assert f"{p}:2: importing it raised ValueError: top" in capsys.readouterr().err


# new-user walkthrough (session 27, third pass) -------------------------------------------------------------------

def _gpt2_dir(tmp_path):
    """GPT-2's shape (a learned position table of n_positions), tiny: 2 layers of width 64."""
    d = tmp_path / "gpt2"
    d.mkdir()
    d.joinpath("config.json").write_text(json.dumps({"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2,
                                                     "n_positions": 128, "vocab_size": 256,
                                                     "bos_token_id": 0, "eos_token_id": 0}))
    return d


@pytest.mark.parametrize("argv, words", [
    (["--batch-size", "0"], "--batch-size must be at least 1, got 0"),  # ran as batch 1, exit 0
    (["--batch-size", "-3"], "--batch-size must be at least 1"),
    (["--seq-len", "0"], "--seq-len must be at least 1"),
    (["--ranks", "0", "--parallel", "ddp"], "--ranks must be at least 1"),
    (["--ranks", "0"], "--ranks must be at least 1"),  # silently ignored without --parallel
    (["--ranks", "4"], "--ranks applies with --parallel"),
    (["--shard-size", "0"], "--shard-size must be at least 1"),
    (["--task", "generate", "--max-new-tokens", "0"], "--max-new-tokens must be at least 1"),
])
def test_a_count_below_one_is_refused_in_one_line(tmp_path, capsys, argv, words):
    assert main(["estimate", "--model", str(_gpt2_dir(tmp_path)), "--seq-len", "16", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and words in err


def test_a_workload_batch_size_of_zero_is_refused(mlp, capsys):
    assert main(["estimate", str(mlp), "--batch-size", "0"]) == 2
    assert "--batch-size must be at least 1" in capsys.readouterr().err


@pytest.mark.parametrize("flag, task", [("--lora", "lora"), ("--qlora", "qlora")])
def test_a_task_written_as_a_flag_names_the_task_option(capsys, flag, task):
    # `--lora` was "ambiguous option: --lora could match --lora-r, --lora-targets", no hint
    with pytest.raises(SystemExit) as exc:
        main(["estimate", "--model", "cfg", flag])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"use --task {task}" in err


@pytest.mark.parametrize("argv, words", [
    (["--seq-len", "256"], "--seq-len 256 is past the model's context length (max_position_embeddings 128)"),
    (["--task", "generate", "--seq-len", "100", "--max-new-tokens", "40"],
     "--seq-len 100 + --max-new-tokens 40 = 140 tokens is past the model's context length"),
])
def test_a_sequence_past_the_learned_positions_is_refused(tmp_path, capsys, argv, words):
    # gpt2 at --seq-len 2048 (n_positions 1024) gave 3.14 GiB, exit 0: a real run fails on its position table
    rc = main(["estimate", "--model", str(_gpt2_dir(tmp_path)), "--batch-size", "1", *argv, "--format", "json"])
    out = capsys.readouterr()
    assert rc == 2 and out.out == ""
    assert "\n" not in out.err.strip() and words in out.err


def test_a_sequence_at_the_context_length_runs(tmp_path, capsys):
    rc = main(["estimate", "--model", str(_gpt2_dir(tmp_path)), "--batch-size", "1", "--task", "generate",
               "--seq-len", "100", "--max-new-tokens", "28", "--format", "json"])
    assert rc == 0 and json.loads(capsys.readouterr().out)["seq_len"] == 100


def test_rope_scaling_past_the_context_length_warns_and_estimates(tmp_path, capsys):
    cfg = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
           "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 256, "max_position_embeddings": 64,
           "rope_scaling": {"rope_type": "linear", "factor": 4.0}}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    rc = main(["estimate", "--model", str(tmp_path), "--batch-size", "1", "--seq-len", "128", "--task", "infer",
               "--format", "json"])
    out = capsys.readouterr()
    assert rc == 0 and json.loads(out.out)["seq_len"] == 128  # stdout stays the JSON document
    assert "warning:" in out.err and "linear RoPE scaling" in out.err and "max_position_embeddings 64" in out.err
    cfg.pop("rope_scaling")  # without scaling: rotary positions are computed for any length, so a warning too
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert main(["estimate", "--model", str(tmp_path), "--seq-len", "128", "--task", "infer", "--format", "json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["seq_len"] == 128 and "rotary positions were trained up to there" in out.err


@pytest.mark.parametrize("name, key", [("NVIDIA RTX A6000", "rtx-a6000"), ("RTX A6000", "rtx-a6000"),
                                       ("NVIDIA B200", "b200")])
def test_common_cards_are_in_the_table(name, key):
    from oomdoctor.knowledge.gpus import GIB, get_gpu
    gpu = get_gpu(name)
    assert gpu.key == key
    # nvidia-smi totals 49140 MiB (A6000) and 183359 MiB (B200), less the NVML-to-torch gap
    assert gpu.total_memory == {"rtx-a6000": 49140, "b200": 183359}[key] * 2**20 - 480 * 2**20 < 180 * GIB


def test_an_unknown_gpu_says_how_to_go_on(mlp, capsys):
    assert main(["estimate", str(mlp), "--batch-size", "2", "--gpu", "NVIDIA RTX 6000 Ada Generation"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--memory-limit SIZE instead of --gpu" in err and "47GiB" in err


def test_optimizer_temporaries_are_not_activations(tmp_path, capsys):
    # gpt2 at batch 1: the peak is in the optimizer step, and foreach AdamW's temporaries (a parameter's worth)
    # were reported as activations
    assert main(["estimate", "--model", str(_gpt2_dir(tmp_path)), "--batch-size", "1", "--seq-len", "8",
                 "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    bd = doc["breakdown"]
    assert doc["peak_phase"].endswith("/optimizer")
    assert bd["optimizer_temporaries"] > bd["parameters"] / 2 and bd["activations"] < bd["optimizer_temporaries"] / 10
    assert main(["estimate", "--model", str(tmp_path / "gpt2"), "--batch-size", "1", "--seq-len", "8"]) == 0
    assert "optimizer temps" in capsys.readouterr().out
