"""Defects a new user's walkthrough found in `oomdoctor explain` (session 26's second walkthrough, fixed in session 27).
The logs are written here in the frameworks' real message formats (XLA's BFC allocator and PjRt client, JAX's
XlaRuntimeError traceback, PyTorch's caching allocator, vLLM's KV-cache checks, the HF Trainer's evaluation loop)."""

from __future__ import annotations

from oomdoctor.explain.rank import Explanation, explain_text

# XLA's BFC allocator as JAX prints it (external/xla/xla/tsl/framework/bfc_allocator.cc), then JAX's error
_BFC_JAX = ("2024-11-28 10:02:14.553101: W external/xla/xla/tsl/framework/bfc_allocator.cc:497] Allocator (GPU_0_bfc) "
            "ran out of memory trying to allocate 12.00GiB (rounded to 12884901888)requested by op ")
_OCCUPANCY = ("2024-11-28 10:02:14.553341: W external/xla/xla/tsl/framework/bfc_allocator.cc:508] "
              "*************************************************************************************_______________")
_JAX_FRAMES = [
    "Traceback (most recent call last):",
    '  File "/home/user/proj/train.py", line 141, in <module>',
    "    state, metrics = train_step(state, batch)",
    '  File "/home/user/.venv/lib/python3.11/site-packages/jax/_src/traceback_util.py", line 180, in '
    "reraise_with_filtered_traceback",
    "    return fun(*args, **kwargs)",
    '  File "/home/user/.venv/lib/python3.11/site-packages/jax/_src/pjit.py", line 337, in cache_miss',
    "    outs, out_flat, out_tree, args_flat, jaxpr, attrs_tracked = _python_pjit_helper(",
]
_XLA_ERROR = "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 12884901888 bytes."


def _said(ex: Explanation) -> str:
    """Everything the answer tells the user: evidence, fixes and the deciding commands."""
    parts = []
    for h in ex.hypotheses:
        j = h.to_json()
        parts += j["evidence"] + j["fixes"] + [j.get("decided_by", {}).get("command", "")]
    return "\n".join(parts)


# -- 1. XLA's allocator line in a JAX log is JAX's -----------------------------------------------------------------

def test_the_bfc_line_of_a_jax_log_is_jax_not_tensorflow():
    ex = explain_text([_BFC_JAX, _OCCUPANCY] + _JAX_FRAMES)  # the traceback cut before its last line: the BFC line alone
    assert [e.kind for e in ex.failures] == ["jax_oom"]
    said = _said(ex)
    assert "TensorFlow" not in said and "tf.config" not in said
    assert "JAX/XLA ran out of device memory allocating 12.00 GiB" in said
    assert "jax.devices()" in said  # JAX's deciding command
    assert ex.primary is not None and ex.primary.numbers.get("requested_bytes") == 12 * 2**30


def test_with_the_xla_runtime_error_nothing_is_told_as_tensorflow():
    pjrt = ("2024-11-28 10:02:14.553412: E external/xla/xla/pjrt/pjrt_stream_executor_client.cc:3084] Execution of "
            "replica 0 failed: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 12884901888 bytes.")
    ex = explain_text(["step 1200 loss=2.3114", _BFC_JAX, _OCCUPANCY, pjrt] + _JAX_FRAMES + [_XLA_ERROR])
    assert {e.kind for e in ex.events} == {"jax_oom"}
    assert "TensorFlow" not in _said(ex)


def test_a_jax_log_whose_bfc_line_has_no_path_is_told_by_its_frames():
    line = "W0000 00:00:1732788134.553101 bfc_allocator.cc:497] Allocator (GPU_0_bfc) ran out of memory trying to allocate 3.00GiB"
    ex = explain_text(["I0000 train.py:12] starting", line] + _JAX_FRAMES)
    assert [e.kind for e in ex.failures] == ["jax_oom"]


def test_a_tensorflow_log_with_the_same_line_stays_tensorflow():
    tf = [
        "2024-11-28 10:02:14.553101: W external/local_xla/xla/tsl/framework/bfc_allocator.cc:497] Allocator (GPU_0_bfc) "
        "ran out of memory trying to allocate 12.00GiB (rounded to 12884901888)requested by op model/dense/MatMul",
        "Traceback (most recent call last):",
        '  File "/home/user/train.py", line 40, in <module>',
        "    model.fit(ds, epochs=3)",
        '  File "/usr/local/lib/python3.11/site-packages/keras/src/utils/traceback_utils.py", line 122, in error_handler',
        "    raise e.with_traceback(filtered_tb) from None",
        "tensorflow.python.framework.errors_impl.ResourceExhaustedError: Graph execution error:",
    ]
    ex = explain_text(tf)
    assert ex.primary is not None and ex.primary.kind == "tf_oom"
    assert "TensorFlow ran out of device memory" in _said(ex)
    assert all(e.kind == "tf_oom" for e in ex.events)
    # the same BFC line with JAX's path, in a log whose failure is TensorFlow's, is TensorFlow's too
    ex = explain_text([_BFC_JAX] + tf[1:])
    assert {e.kind for e in ex.events} == {"tf_oom"}


def test_a_bare_bfc_line_with_tensorflows_path_stays_tensorflow():
    for path in ("tensorflow/core/common_runtime/bfc_allocator.cc:419", "external/local_tsl/tsl/framework/bfc_allocator.cc:485"):
        line = (f"2020-06-06 14:55:20.542336: W {path}] Allocator (GPU_0_bfc) ran out of memory trying to allocate "
                "532.00MiB (rounded to 557842432).  Current allocation summary follows.")
        ex = explain_text([line])
        assert [e.kind for e in ex.events] == ["tf_oom"], path


# -- 2. a caught OOM before the fatal one: the fatal one is the answer ---------------------------------------------

_TORCH_FATAL = [
    "starting fine-tune: epochs=3 batch_size=32",
    "epoch 0 step 50 loss 2.2104",
    "epoch 0 step 100 loss 1.9311",
    "Traceback (most recent call last):",
    '  File "/app/finetune.py", line 212, in <module>',
    "    main()",
    '  File "/usr/local/lib/python3.11/site-packages/torch/_tensor.py", line 581, in backward',
    "    torch.autograd.backward(",
    "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 79.11 GiB total capacity; 76.52 GiB already "
    "allocated; 10.06 MiB free; 77.01 GiB reserved in total by PyTorch)",
]


def test_a_caught_jax_oom_before_a_fatal_torch_oom_is_recovered():
    search = [
        "[finder] trying batch size 256",
        "Traceback (most recent call last):",
        '  File "/app/search.py", line 41, in probe',
        "    out = step_fn(params, batch)",
        '  File "/usr/local/lib/python3.11/site-packages/jax/_src/pjit.py", line 337, in cache_miss',
        "    outs, out_flat, out_tree, args_flat, jaxpr, attrs_tracked = _python_pjit_helper(",
        "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 10737418240 bytes.",
        "[finder] batch size 256 does not fit; halving",
        "[finder] trying batch size 128",
        "[finder] batch size 128 fits",
        "embedding 120000 sequences with batch size 128",
        "embeddings written to /data/emb.npy",
    ]
    ex = explain_text(search + _TORCH_FATAL)
    assert ex.primary is not None and ex.primary.kind == "torch_oom"
    assert [e.kind for e in ex.recovered] == ["jax_oom"]
    assert [e.kind for e in ex.failures] == ["torch_oom"]
    assert "JAX" not in _said(ex)


def test_a_caught_oom_logged_on_one_line_then_a_smaller_try():
    search = [
        "2026-11-28 09:14:02,101 INFO finder: trying per-device batch size 256",
        "2026-11-28 09:14:09,554 WARNING finder: batch size 256 does not fit: RESOURCE_EXHAUSTED: Out of memory while "
        "trying to allocate 10737418240 bytes.",
        "2026-11-28 09:14:09,560 INFO finder: trying per-device batch size 128",
        "2026-11-28 09:14:15,912 INFO finder: batch size 128 fits (peak 61.2 GiB)",
    ]
    ex = explain_text(search + _TORCH_FATAL)
    assert ex.primary is not None and ex.primary.kind == "torch_oom"
    assert [e.kind for e in ex.recovered] == ["jax_oom"]


def test_without_a_step_down_both_failures_stand():
    # two runs pasted one after the other: nothing says the first was caught
    first = ["Traceback (most recent call last):", '  File "/app/run.py", line 9, in <module>',
             "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 10737418240 bytes.",
             "$ python finetune.py"]
    ex = explain_text(first + _TORCH_FATAL)
    assert not ex.recovered
    assert {e.kind for e in ex.failures} == {"jax_oom", "torch_oom"}


def test_a_step_down_followed_by_an_error_is_no_recovery():
    search = ["jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 10737418240 bytes.",
              "[finder] halving the batch size",
              "ERROR: the finder gave up at batch size 1"]
    ex = explain_text(search + _TORCH_FATAL)
    assert not ex.recovered


def test_a_loop_that_printed_a_jax_oom_and_went_on_is_recovered_as_with_torch():
    lines = ["Testing 0 img_000.png", "Testing 1 img_001.png",
             "Error RESOURCE_EXHAUSTED: Out of memory while trying to allocate 8589934592 bytes.",
             "Testing 2 img_002.png", "Testing 3 img_003.png", "done: 4 images"]
    ex = explain_text(lines)
    assert [e.kind for e in ex.recovered] == ["jax_oom"] and not ex.failures


# -- 3. vLLM's KV-cache errors, bare: failures, not documentation ----------------------------------------------------
# (vllm/v1/core/kv_cache_utils.py _check_enough_kv_cache_memory; the older engine's worker.raise_if_cache_size_invalid)

_NO_BLOCKS = ("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
              "initializing the engine.")
_MAX_LEN_OLD = ("ValueError: The model's max seq len (32768) is larger than the maximum number of tokens that can be stored "
                "in KV cache (10992). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
                "initializing the engine.")
_MAX_LEN = ("ValueError: To serve at least one request with the models's max seq len (32768), (6.00 GiB KV cache is "
            "needed, which is larger than the available KV cache memory (2.01 GiB). Based on the available memory, the "
            "estimated maximum model length is 10992. Try increasing `gpu_memory_utilization` or decreasing "
            "`max_model_len` when initializing the engine. See "
            "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.")


def test_bare_vllm_kv_cache_errors_are_failures_not_documentation():
    # one per start-up attempt: each a sentence, which the documentation gate had read as a page's prose
    ex = explain_text([_NO_BLOCKS, _MAX_LEN_OLD, _MAX_LEN])
    assert not ex.documentation
    assert ex.explained and ex.category == "true_capacity"
    assert {e.kind for e in ex.failures} == {"vllm_capacity"}
    for one in (_NO_BLOCKS, _MAX_LEN_OLD, _MAX_LEN):  # and each alone, as before
        ex = explain_text([one])
        assert ex.explained and ex.category == "true_capacity", one


def test_a_traceback_tail_of_the_kv_cache_error_is_a_failure():
    tail = ['(EngineCore_DP0 pid=6804)   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/core/kv_cache_utils.py", '
            'line 616, in _check_enough_kv_cache_memory', "(EngineCore_DP0 pid=6804)     raise ValueError(",
            "(EngineCore_DP0 pid=6804) " + _MAX_LEN]
    ex = explain_text(tail)
    assert ex.explained and [e.kind for e in ex.failures] == ["vllm_capacity"]


def test_a_kv_cache_error_wrapped_by_a_terminal_is_a_failure():
    wrapped_old = ["ValueError: The model's max seq len (32768) is larger than the maximum number of tokens",
                   "that can be stored in KV cache (10992). Try increasing `gpu_memory_utilization` or",
                   "decreasing `max_model_len` when initializing the engine."]
    wrapped = ["ValueError: To serve at least one request with the model's max seq len",
               "(1000000), 3.09 GiB KV cache is needed, which is larger than the available",
               "KV cache memory (0.24 GiB). Estimated maximum model length is 57344."]
    for lines in (wrapped_old, wrapped):
        ex = explain_text(lines)
        assert ex.explained and ex.category == "true_capacity", lines[0]
        assert [e.kind for e in ex.failures] == ["vllm_capacity"]


def test_a_page_that_explains_the_kv_cache_errors_stays_documentation():
    page = ["## Troubleshooting the KV cache", "",
            "vLLM reserves the memory for its KV cache when the engine starts, after it has loaded the weights.",
            "If the weights and the activations leave nothing for the cache, the engine refuses to start with:",
            "", "```", _NO_BLOCKS, "```", "",
            "When the cache is too small for one request of the model's full context length, it says instead:",
            "", "```", _MAX_LEN_OLD, "```", "",
            "In both cases raise gpu_memory_utilization, lower max_model_len, or spread the model over more GPUs with "
            "tensor parallelism."]
    ex = explain_text(page)
    assert ex.documentation and not ex.explained


# -- 4. the HF Trainer's evaluation OOM in nested_concat: predictions accumulated on the GPU -------------------------

_EVAL_FRAMES = [
    "Traceback (most recent call last):",
    '  File "/home/user/run_clm.py", line 603, in main',
    "    train_result = trainer.train(resume_from_checkpoint=checkpoint)",
    '  File "/opt/conda/lib/python3.10/site-packages/transformers/trainer.py", line 2804, in _maybe_log_save_evaluate',
    "    metrics = self._evaluate(trial, ignore_keys_for_eval)",
    '  File "/opt/conda/lib/python3.10/site-packages/transformers/trainer.py", line 3886, in evaluation_loop',
    "    all_preds.add(logits)",
    '  File "/opt/conda/lib/python3.10/site-packages/transformers/trainer_pt_utils.py", line 326, in add',
    "    self.tensors = nested_concat(self.tensors, tensors, padding_index=self.padding_index)",
    '  File "/opt/conda/lib/python3.10/site-packages/transformers/trainer_pt_utils.py", line 140, in nested_concat',
    "    return torch_pad_and_concatenate(tensors, new_tensors, padding_index=padding_index)",
    '  File "/opt/conda/lib/python3.10/site-packages/transformers/trainer_pt_utils.py", line 99, in torch_pad_and_concatenate',
    "    return torch.cat((tensor1, tensor2), dim=0)",
]
_EVAL_OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 5.86 GiB. GPU 0 has a total capacity of 39.38 GiB "
             "of which 3.12 GiB is free. Including non-PyTorch memory, this process has 36.25 GiB memory in use. Of the "
             "allocated memory 33.91 GiB is allocated by PyTorch, and 1.83 GiB is reserved by PyTorch but unallocated.")


def test_an_evaluation_oom_in_nested_concat_says_eval_accumulation_steps():
    ex = explain_text(["{'loss': 1.8123, 'epoch': 0.5}"] + _EVAL_FRAMES + [_EVAL_OOM])
    assert ex.explained and ex.primary is not None and ex.primary.kind == "torch_oom"
    assert ex.category == "leak_in_code"
    assert any("eval_accumulation_steps" in f for f in ex.hypotheses[0].fixes)


def test_a_notebook_evaluation_oom_in_torch_pad_and_concatenate_too():
    cell = [
        "OutOfMemoryError                          Traceback (most recent call last)",
        "----> 1 trainer.evaluate()",
        "File /usr/local/lib/python3.10/dist-packages/transformers/trainer_pt_utils.py:88, in "
        "torch_pad_and_concatenate(tensor1, tensor2, padding_index)",
        "---> 88 result = tensor1.new_full(new_shape, padding_index)",
        "",
        "OutOfMemoryError: CUDA out of memory. Tried to allocate 12.94 GiB (GPU 0; 39.56 GiB total capacity; 18.33 GiB "
        "already allocated; 12.29 GiB free; 25.71 GiB reserved in total by PyTorch)",
    ]
    ex = explain_text(cell)
    assert ex.category == "leak_in_code"
    assert any("eval_accumulation_steps" in f for f in ex.hypotheses[0].fixes)


def test_a_training_step_oom_is_not_told_eval_accumulation():
    frames = [f for f in _EVAL_FRAMES if "nested_concat" not in f and "pad_and_concatenate" not in f]
    ex = explain_text(frames + [_EVAL_OOM])
    assert "eval_accumulation_steps" not in _said(ex)
