"""Session 14: a listing of source code, a test runner's passing verdict.

Each shape comes with the text it was found on (dev benign of round ae, or a log made on the GPU by
validation/explain_logs_gpu.py) and a switch that shows the rule is what decides.
"""

from __future__ import annotations

from pathlib import Path

from ruamel.yaml import YAML

from oomdoctor.explain import listing, rank
from oomdoctor.explain.listing import source_listing
from oomdoctor.explain.rank import explain_text
from oomdoctor.explain.testrun import passing_sessions

CORPUS = Path(__file__).parent / "corpus"


def _text(kind: str, name: str) -> list[str]:
    path = CORPUS / kind / f"{name}.yaml"
    return YAML(typ="safe").load(path.read_text(encoding="utf-8"))["text"].splitlines()


OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
       "23.65 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 22.60 GiB memory in use.")


# ---- a listing of source code ---------------------------------------------------------------------------

def test_source_files_that_quote_oom_are_no_failure(monkeypatch) -> None:
    # round ae dev / ac4 dev: a Go e2e helper holding a kernel OOM message as a constant, a Java exception class
    for name in ("ae5_npd_problemmaker_oomkill_go", "ac4_sparkrapidsjni_gpuretryoom_class"):
        assert source_listing(_text("benign", name)), name
        assert not explain_text(_text("benign", name)).failures, name
    # the rule off: the Go helper was a false alarm (the Java class is also silenced by the refitted docs model)
    monkeypatch.setattr(listing, "SOURCE_MIN_SHARE", 1.01)
    assert explain_text(_text("benign", "ae5_npd_problemmaker_oomkill_go")).failures
    monkeypatch.undo()
    # Slurm's scontrol output is key=value lines, not code (review of session 10's fixture)
    scontrol = ["$ scontrol show job 8812345", "JobId=8812345 JobName=train", "   UserId=alice(1001) GroupId=alice(1001)",
                "   JobState=OUT_OF_MEMORY Reason=OutOfMemory Dependency=(null)", "   Requeue=1 Restarts=0 ExitCode=0:125"]
    assert not source_listing(scontrol) and explain_text(scontrol).failures


def test_code_pasted_beside_a_real_error_stays_a_failure() -> None:
    # c6 dev: a report's reproduction code above its error (THCudaCheck ... out of memory + traceback)
    text = _text("reports", "c6_pytorch_2287")
    assert explain_text(text).failures
    # code and the allocator's figures: a job's own output, never a listing whatever the share of code
    code = ["import torch", "def step(x):", "    y = model(x)", "    return y.sum()", "for i in range(10):",
            "    loss = step(x)", "    loss.backward()", "x = torch.randn(64, 3, 224, 224)"]
    assert source_listing(code)
    assert explain_text(code + [OOM]).failures


# review, session 14: reports that paste code (or a config) above their error, an issue template's bullets
REVIEW_REPORTS = {
    "repro_then_bare_torch_oom": 'Hi, I\'m fine-tuning with the script below and it crashes.\n\nimport torch\nfrom transformers import AutoModelForCausalLM, AutoTokenizer\nmodel_id = "meta-llama/Llama-2-7b-hf"\ntok = AutoTokenizer.from_pretrained(model_id)\nmodel = AutoModelForCausalLM.from_pretrained(model_id, torch_dtype=torch.float16).cuda()\nmodel.gradient_checkpointing_enable()\nopt = torch.optim.AdamW(model.parameters(), lr=1e-5)\nfor batch in loader:\n    loss = model(**batch).loss\n    loss.backward()\n    opt.step()\n    opt.zero_grad()\n\nError:\ntorch.cuda.OutOfMemoryError: CUDA out of memory.\nHow can I fix it?\n',
    "keras_code_then_resource_exhausted": "model = Sequential()\nmodel.add(Conv2D(64, (3, 3), activation='relu', input_shape=(512, 512, 3)))\nmodel.add(MaxPooling2D((2, 2)))\nmodel.add(Flatten())\nmodel.add(Dense(4096, activation='relu'))\nmodel.compile(optimizer='adam', loss='categorical_crossentropy')\nmodel.fit(x_train, y_train, batch_size=64, epochs=10)\n\nResourceExhaustedError: OOM when allocating tensor with shape[64,64,510,510] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n",
    "issue_template_bullets": '* OS: Ubuntu 20.04\n* PyTorch version: 2.1.0\n* Python version: 3.10\n* CUDA/cuDNN version: 12.1\n* How you installed PyTorch: pip\n* Batch size: 32\n* The run dies after ~2 hours with "RuntimeError: CUDA error: out of memory"\n',
    "config_then_bare_oom": 'batch_size = 64\nlr = 0.0003\nepochs = 100\nmodel = resnet50\nnum_workers = 16\namp = True\nseed = 42\ndata_root = /data/imagenet\ngrad_accum = 4\nimage_size = 224\ntorch.cuda.OutOfMemoryError: CUDA out of memory.\n',
}


def test_reports_that_paste_code_above_their_error_stay_failures() -> None:
    for name, text in REVIEW_REPORTS.items():
        assert explain_text(text.splitlines()).failures, name
    # a big log whose head is a printed config (mmdetection), then training lines, then the kill
    head = ["2023-05-01 10:00:00,000 - mmdet - INFO - Config:", "model = dict(", "    type='FasterRCNN',",
            "    backbone=dict(", "        type='ResNet',", "        depth=50,", "    ),", ")"] * 60
    body = [f"2023-05-01 10:{i // 60 % 60:02d}:{i % 60:02d},000 - mmdet - INFO - Epoch [1][{i}/100000]\tlr: 2.000e-02, "
            f"memory: 4998 , loss: 1.2031" for i in range(3000)]
    assert explain_text(head + body + ["Killed"]).failures


def test_source_listing_shapes() -> None:
    go = ['func TestOOM(t *testing.T) {', '\tpod := newPod()', '\tpod.Status.Reason = "OOMKilled"',
          '\tif got := reason(pod); got != "OOMKilled" {', '\t\tt.Errorf("got %q", got)', '\t}', '}']
    cpp = ["try { return alloc(n); }", "catch (const std::bad_alloc &e)", "{", "  throw out_of_memory(\"pool\");", "}"]
    log = ["2024-05-01 10:00:01 INFO epoch 1 step 100 loss 2.31", "Epoch 1:  40%|####  | 400/1000 [01:10<01:45, 5.7it/s]",
           "[rank0]: torch.OutOfMemoryError: CUDA out of memory.", "wandb: Run summary:", "train/loss 2.1"]
    assert source_listing(go) and source_listing(cpp)
    assert not source_listing(log)
    assert not source_listing(go[:4])  # too short to say
    assert not source_listing(["x = 1"] * 3 + ["some prose line about it"] * 3)
    assert not source_listing(REVIEW_REPORTS["issue_template_bullets"].splitlines())  # "* " outside a /* */ block
    assert source_listing(["/*", " * Copyright (c) 2023", " * Licensed under the Apache License", " */",
                           "package com.example;", "public class GpuOOM extends RuntimeException {", "}"])
    assert not source_listing(["=" * 100_000] * 10)  # bounded on a hostile line


# ---- a test runner's verdict ----------------------------------------------------------------------------

PYTEST_PASSED = """\
============================= test session starts ==============================
collecting ... collected 2 items

test_oom_paths.py::test_oom_is_raised_and_recoverable PASSED             [ 50%]
test_oom_paths.py::test_small_alloc PASSED                               [100%]

==================================== PASSES ====================================
______________________ test_oom_is_raised_and_recoverable ______________________
----------------------------- Captured stdout call -----------------------------
CUDA out of memory. Tried to allocate 262144.00 GiB. GPU 0 has a total capacity of 139.80 GiB of which 139.29 GiB is free. Including non-PyTorch memory, this process has 518.00 MiB memory in use. Of the allocated memory 0 bytes is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated.
=========================== short test summary info ============================
PASSED test_oom_paths.py::test_oom_is_raised_and_recoverable
PASSED test_oom_paths.py::test_small_alloc
============================== 2 passed in 4.39s ===============================
""".splitlines()


def test_a_passing_pytest_run_that_printed_an_oom_is_no_failure() -> None:
    # the GPU log of validation/explain_logs_gpu.py (pytest_oom_test, H200): read as not_oom before session 14
    assert passing_sessions([("log", 0, "\n".join(PYTEST_PASSED))]) == {"log": [(0, len(PYTEST_PASSED) - 1)]}
    assert not explain_text(PYTEST_PASSED).failures
    # the same run with a failing test: the runner's verdict says so, the OOM is the failure
    failed = [ln.replace("2 passed", "1 failed, 1 passed") for ln in PYTEST_PASSED]
    assert passing_sessions([("log", 0, "\n".join(failed))]) == {}
    assert explain_text(failed).failures
    # an OOM after the passing verdict (the job that ran after the tests) is a new failure
    assert explain_text(PYTEST_PASSED + ["Traceback (most recent call last):", '  File "train.py", line 3', OOM]).failures


def test_unittest_and_googletest_verdicts() -> None:
    ut = ["test_oom (tests.T.test_oom) ... ok", OOM, "", "-" * 70, "Ran 1 test in 0.512s", "", "OK"]
    assert passing_sessions([("log", 0, "\n".join(ut))]) == {"log": [(0, 6)]}
    assert not explain_text(ut).failures
    bad = ut[:-1] + ["FAILED (failures=1)"]
    assert passing_sessions([("log", 0, "\n".join(bad))]) == {}
    gt = ["[==========] Running 1 test from 1 test suite.", "[ RUN      ] Pool.OutOfMemory", OOM, "[       OK ] Pool.OutOfMemory (3 ms)", "[  PASSED  ] 1 test."]
    assert not explain_text(gt).failures
    assert explain_text(gt + ["[  FAILED  ] 1 test, listed below:"]).failures
    # "OK" alone is no verdict without unittest's "Ran N tests" just before it
    assert explain_text([OOM, "OK"]).failures


def test_only_the_sessions_own_lines_are_a_tests_output() -> None:
    # review, session 14: a report's traceback, then "the unit tests all pass": no session start, a failure
    report = ["Traceback (most recent call last):", '  File "train.py", line 3, in <module>', OOM,
              "The unit tests all pass though:", "============ 48 passed in 12.31s ============"]
    assert explain_text(report).failures
    # a smoke run whose OOM was ignored (`|| true`), then a passing test session: the OOM is before it
    ci = ["$ python smoke_train.py || true", "RuntimeError: CUDA error: out of memory",
          "============================= test session starts ==============================",
          "tests/test_a.py ............                                             [100%]",
          "============================== 12 passed in 3.20s ==============================",
          "##[error]Process completed with exit code 1."]
    assert explain_text(ci).failures
    # two sessions in one sample, the first failing: nothing is a passing test's own
    two = PYTEST_PASSED[:1] + [OOM, "========= 1 failed, 600 passed in 80.00s ========="] + PYTEST_PASSED
    assert explain_text(two).failures
    # a session's start in the head and a verdict in the tail (the middle unread): no span
    assert passing_sessions([("log", 0, PYTEST_PASSED[0] + "\n" + OOM), ("log", 5000, PYTEST_PASSED[-1])]) == {}


def test_switches_exist() -> None:
    # the constants the docs name (docs/explain.md) are the ones the code reads
    assert listing.SOURCE_MIN_SHARE == 0.7 and listing.SOURCE_MIN_LINES == 5
    assert rank.job_output([], {}) is False
