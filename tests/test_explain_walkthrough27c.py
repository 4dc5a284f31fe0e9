"""Session 27's third walkthrough: the HTML page must say what the text says (no failure is no "Answer"), batch-size
searches that recovered, a bare `Killed`, advice in the event's own framework's terms, Ray's advice sentence, and
an OOM message kept whole by the redactor. The texts are the frameworks' real messages."""

from __future__ import annotations

from oomdoctor.explain.rank import explain_text
from oomdoctor.render.explain import to_html, to_text

_README = ("## Troubleshooting\n\n"
           "If you see `torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB`, reduce the\n"
           "batch size with `--batch-size 8` or enable gradient checkpointing. Setting\n"
           "`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` can help with fragmentation. On Kubernetes,\n"
           "an `OOMKilled` status means the container exceeded its memory limit.\n")
_HF_OK = ("{'loss': 2.1, 'learning_rate': 5e-05, 'epoch': 0.1}\n"
          "{'train_runtime': 120.5, 'train_samples_per_second': 33.2, 'train_loss': 1.95, 'epoch': 1.0}\n"
          "[INFO] Peak GPU memory: 21.3 GiB (torch.cuda.max_memory_reserved), no OOM during training\n"
          "***** Running Evaluation *****\n")
_CUBLAS = ("Traceback (most recent call last):\n"
           '  File "train.py", line 88, in <module>\n'
           "    y = lin(x)\n"
           "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`\n")


# -- 1. no failure: the HTML page says so, as the text does ---------------------------------------------------------

def test_html_without_failure_gives_no_answer() -> None:
    for text in (_README, _HF_OK):
        ex = explain_text(text.splitlines())
        assert not ex.failures
        page = to_html(ex)
        assert "Answer:" not in page
        assert "No OOM-like event found" in page
        assert "No OOM-like event found" in to_text(ex)


def test_html_shows_a_leaning_as_a_leaning() -> None:
    ex = explain_text(_README.splitlines())
    if ex.hypotheses:  # the words lean somewhere: shown, but as a leaning
        assert "Leanings" in to_html(ex)


def test_html_with_failure_still_answers() -> None:
    ex = explain_text(_CUBLAS.splitlines())
    assert ex.failures
    assert "Answer: " + ex.hypotheses[0].category in to_html(ex)


# -- 6. what decides, in the HTML as in the text ----------------------------------------------------------------------

def test_html_shows_what_decides() -> None:
    ex = explain_text(_CUBLAS.splitlines())
    decide = ex.to_decide()
    assert decide and "The log alone cannot settle this" in to_text(ex)
    page = to_html(ex)
    assert "The log alone cannot settle this" in page
    for d in decide:
        assert d["fact"].replace("'", "&#39;") in page or d["fact"] in page


# -- 2. accelerate's find_executable_batch_size: a search that stepped down and finished ---------------------------

_ACCEL_OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of "
              "23.65 GiB of which 2.10 GiB is free. Of the allocated memory 20.50 GiB is allocated by PyTorch, and "
              "500.00 MiB is reserved by PyTorch but unallocated.")
_ACCEL = ["Running with batch size 64", _ACCEL_OOM, "Decreasing batch size to: 32", "Running with batch size 32",
          "step 10 loss 2.0", "step 20 loss 1.8", "Training finished successfully."]


def test_batch_size_search_that_finished_is_recovered() -> None:
    ex = explain_text(_ACCEL)
    assert not ex.failures and len(ex.recovered) == 1


def test_batch_size_search_that_did_not_finish_still_fails() -> None:
    assert explain_text(_ACCEL[:-1]).failures  # no word that it finished
    assert explain_text(_ACCEL[:2] + ["step 10 loss 2.0", "Training finished successfully."]).failures  # no step down
    assert explain_text(_ACCEL[:-1] + ["RuntimeError: NCCL error", "Training finished successfully."]).failures


# -- 3. a bare SIGKILL: host_oom first, at an honest confidence, with no 137 it did not see --------------------------

_TORCHRUN9 = ["ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 3 (pid: 812917) of "
              "binary: /usr/bin/python3", "  exitcode  : -9 (pid: 812917)"]


def test_bare_sigkill_is_host_oom_but_not_sure() -> None:
    for lines in (["Epoch 1 step 100 loss 2.3", "Killed"], _TORCHRUN9):
        ex = explain_text(lines)
        top = ex.hypotheses[0]
        assert top.category == "host_oom"
        assert top.confidence < 0.8
        assert not any("137" in e for e in top.evidence)
        assert any("dmesg" in d["command"] for d in ex.to_decide())


def test_exit_code_137_is_still_said() -> None:
    ex = explain_text(["train.sh: job exited with exit code 137"])
    assert ex.hypotheses[0].category == "host_oom"
    assert any("137" in e for e in ex.hypotheses[0].evidence)


# -- 4. advice in the terms of the framework that failed ---------------------------------------------------------

_TGI = ["2024-06-01T10:00:31.000000Z  INFO text_generation_router: router/src/main.rs:300: Warming up model",
        'Error: WebServer(Warmup(Generation("Not enough memory to handle 8192 prefill tokens. You need to decrease '
        '`--max-batch-prefill-tokens`")))']
_LLAMA = ["llm_load_tensors: offloaded 81/81 layers to GPU",
          "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 37885.52 MiB on device 0: cudaMalloc failed: out of memory",
          "llama_model_load: error loading model: unable to allocate backend buffer"]
_JAX = ["jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate "
        "17179869184 bytes."]
_VLLM = ["ERROR 04-30 10:20:36 [core.py:396] ValueError: No available memory for the cache blocks. Try increasing "
         "`gpu_memory_utilization` when initializing the engine."]


def _top(lines: list[str]) -> dict:
    return explain_text(lines).to_json()["hypotheses"][0]


def test_tgi_is_told_tgi_knobs() -> None:
    h = _top(_TGI)
    fixes = " ".join(h["fixes"])
    assert "--max-batch-prefill-tokens" in fixes and "--cuda-memory-fraction" in fixes
    assert "max_model_len" not in fixes and "gpu_memory_utilization" not in fixes
    assert "WORKLOAD.py" not in h["decided_by"]["command"]


def test_llamacpp_reads_its_figure_and_gets_llamacpp_advice() -> None:
    ex = explain_text(_LLAMA)
    assert ex.primary is not None and ex.primary.numbers.get("requested_bytes") == round(37885.52 * 1024**2)
    h = ex.to_json()["hypotheses"][0]
    assert not any("without numbers" in e for e in h["evidence"])
    fixes = " ".join(h["fixes"])
    assert "-ngl" in fixes and "-c" in fixes and "batch size" not in fixes
    assert "WORKLOAD.py" not in h["decided_by"]["command"]


def test_jax_is_told_xla_settings_not_pytorch() -> None:
    fixes = " ".join(_top(_JAX)["fixes"])
    assert "XLA_PYTHON_CLIENT_MEM_FRACTION" in fixes and "XLA_PYTHON_CLIENT_PREALLOCATE" in fixes
    assert "autocast" not in fixes and "oomdoctor estimate" not in fixes


def test_vllm_cache_blocks_is_told_to_raise_utilization() -> None:
    h = _top(_VLLM)
    fixes = " ".join(h["fixes"])
    assert "gpu_memory_utilization" in fixes and "tensor" in fixes
    assert "max_model_len" not in fixes
    assert "WORKLOAD.py" not in h["decided_by"]["command"]


# -- 5. Ray: its advice sentence is no second OOM, and its fix is Ray's ---------------------------------------------

_RAY = ["ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.",
        "Memory on the node (IP: 10.0.0.5, ID: 3f2a) where the task was running was 60.50GB / 62.00GB (0.975806), "
        "which exceeds the memory usage threshold of 0.95. Ray killed this worker (ID: 9a8b).",
        "Refer to the documentation on how to address the out of memory issue: "
        "https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html. Consider provisioning more memory "
        "on this node or reducing task parallelism by requesting more CPUs per task."]


def test_ray_advice_sentence_is_not_an_event() -> None:
    ex = explain_text(_RAY)
    assert [e.kind for e in ex.failures] == ["ray_oom"]
    assert explain_text(["RuntimeError: out of memory"]).failures  # a plain vague OOM still counts


def test_ray_fix_names_ray_settings() -> None:
    fixes = " ".join(explain_text(_RAY).hypotheses[0].fixes)
    assert "RAY_memory_usage_threshold" in fixes and "num_cpus" in fixes


# -- 7. the redactor ends an env-style NAME=value at the blank, as the shell does -------------------------------------

def test_env_value_ends_at_a_blank_and_the_oom_message_stays() -> None:
    from oomdoctor.redact import MASK, redact_text

    secret = "hf_abcdEFGHijklMNOPqrstUVwxyz123456"
    line = (f"HF_TOKEN={secret} RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total "
            "capacity; 14.50 GiB already allocated; 5.00 MiB free; 14.70 GiB reserved in total by PyTorch)")
    out = redact_text(line)
    assert secret not in out
    assert out == f"HF_TOKEN={MASK}" + line[len("HF_TOKEN=") + len(secret):]
    # a connection string's field still runs to its `;` (its key follows a `;`, or has no underscore)
    assert "w0rd" not in redact_text("Server=h;DB_PASSWORD=p@ss w0rd;Database=d")
    assert "w0rd" not in redact_text("PWD=p@ss w0rd;UID=sa")


def test_a_leaning_does_not_say_the_text_reports_a_cause() -> None:
    ex = explain_text(_README.splitlines())
    assert not ex.failures and ex.hypotheses
    assert not any("the text reports" in e for h in ex.hypotheses for e in h.evidence)
