"""Session 14: a listing of source code, a test runner's passing verdict, TensorFlow's "not a failure".

Each shape comes with the text it was found on (dev benign of round ae, or a log made on the GPU by
validation/explain_logs_gpu.py) and a switch that shows the rule is what decides.
"""

from __future__ import annotations

from pathlib import Path

from ruamel.yaml import YAML

from oomdoctor.explain import listing, rank
from oomdoctor.explain.listing import source_listing
from oomdoctor.explain.patterns import classify_line
from oomdoctor.explain.rank import explain_text
from oomdoctor.explain.testrun import passing_verdicts

CORPUS = Path(__file__).parent / "corpus"


def _text(kind: str, name: str) -> list[str]:
    path = CORPUS / kind / f"{name}.yaml"
    return YAML(typ="safe").load(path.read_text(encoding="utf-8"))["text"].splitlines()


OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
       "23.65 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 22.60 GiB memory in use.")


# ---- a listing of source code ---------------------------------------------------------------------------

def test_source_files_that_quote_oom_are_no_failure(monkeypatch) -> None:
    # round ae dev / ac4 dev: a Go e2e helper holding a kernel OOM message as a constant, a Java exception class
    for kind, name in (("benign", "ae5_npd_problemmaker_oomkill_go"), ("benign", "ac4_sparkrapidsjni_gpuretryoom_class")):
        text = _text(kind, name)
        assert source_listing(text), name
        assert not explain_text(text).failures, name
        monkeypatch.setattr(listing, "SOURCE_MIN_SHARE", 1.01)  # the rule off: it was a false alarm
        assert explain_text(text).failures, name
        monkeypatch.undo()


def test_code_pasted_beside_a_real_error_stays_a_failure() -> None:
    # c6 dev: a report's reproduction code above its error (THCudaCheck ... out of memory + traceback)
    text = _text("reports", "c6_pytorch_2287")
    assert explain_text(text).failures
    # code and the allocator's figures: a job's own output, never a listing whatever the share of code
    code = ["import torch", "def step(x):", "    y = model(x)", "    return y.sum()", "for i in range(10):",
            "    loss = step(x)", "    loss.backward()", "x = torch.randn(64, 3, 224, 224)"]
    assert source_listing(code)
    assert explain_text(code + [OOM]).failures


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
    assert passing_verdicts([("log", 0, "\n".join(PYTEST_PASSED))]) == {"log": len(PYTEST_PASSED) - 1}
    assert not explain_text(PYTEST_PASSED).failures
    # the same run with a failing test: the runner's verdict says so, the OOM is the failure
    failed = [ln.replace("2 passed", "1 failed, 1 passed") for ln in PYTEST_PASSED]
    assert passing_verdicts([("log", 0, "\n".join(failed))]) == {}
    assert explain_text(failed).failures
    # an OOM after the passing verdict (the job that ran after the tests) is a new failure
    assert explain_text(PYTEST_PASSED + ["Traceback (most recent call last):", '  File "train.py", line 3', OOM]).failures


def test_unittest_and_googletest_verdicts() -> None:
    ut = ["test_oom (tests.T.test_oom) ... ok", OOM, "", "-" * 70, "Ran 1 test in 0.512s", "", "OK"]
    assert passing_verdicts([("log", 0, "\n".join(ut))]) == {"log": 6}
    assert not explain_text(ut).failures
    bad = ut[:-1] + ["FAILED (failures=1)"]
    assert passing_verdicts([("log", 0, "\n".join(bad))]) == {}
    gt = ["[ RUN      ] Pool.OutOfMemory", OOM, "[       OK ] Pool.OutOfMemory (3 ms)", "[  PASSED  ] 1 test."]
    assert not explain_text(gt).failures
    assert explain_text(gt + ["[  FAILED  ] 1 test, listed below:"]).failures
    # "OK" alone is no verdict without unittest's "Ran N tests" just before it
    assert explain_text([OOM, "OK"]).failures


# ---- TensorFlow's allocator that fell back ----------------------------------------------------------------

TF_WARN = ("2019-03-01 10:00:00.000000: W tensorflow/core/common_runtime/bfc_allocator.cc:211] Allocator (GPU_0_bfc) "
           "ran out of memory trying to allocate 2.26GiB. The caller indicates that this is not a failure, but may "
           "mean that there could be performance gains if more memory were available.")


def test_tensorflow_not_a_failure_is_a_recovered_oom_alone() -> None:
    assert classify_line(TF_WARN) == "oom_caught"
    ex = explain_text(["Epoch 1/10", TF_WARN, "100/100 [==============================] - 12s 120ms/step - loss: 0.51"])
    assert not ex.failures and len(ex.events) == 1
    # round ae dev: keras-frcnn's training log with these warnings, expected recovered
    ex = explain_text(_text("benign", "ae6_kerasfrcnn_bfc_notfailure_116"))
    assert not ex.failures and ex.events
    # it recovers no other failure: TF's real OOM after it stays the job's failure
    oom = ("tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with "
           "shape[64,256,56,56] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc")
    ex = explain_text([TF_WARN, "Traceback (most recent call last):", '  File "train.py", line 9, in <module>', oom])
    assert ex.failures


def test_switches_exist() -> None:
    # the constants the docs name (docs/explain.md) are the ones the code reads
    assert listing.SOURCE_MIN_SHARE == 0.7 and listing.SOURCE_MIN_LINES == 5
    assert rank.job_output([], {}) is False
