"""Defects a new user's walkthrough found in how `oomdoctor explain` reads events (session 28): a fairseq run that
crashed right after "attempting to recover from OOM", slurmstepd's count of a step's oom-kill events, the figures of
PyTorch's cudaMallocAsync message and of vLLM's memory profile, TGI's cut message, a Kubernetes exit 137 whose reason
is Error, and a reStructuredText title. The texts are shortened from the real logs of public issues."""

from __future__ import annotations

from oomdoctor.explain.rank import Explanation, explain_text
from oomdoctor.render.explain import to_text
from oomdoctor.units import torch_size_to_bytes


def _said(ex: Explanation) -> str:
    """Everything the answer tells the user: evidence, fixes and the deciding commands."""
    parts = []
    for h in ex.hypotheses:
        j = h.to_json()
        parts += j["evidence"] + j["fixes"] + [j.get("decided_by", {}).get("command", "")]
    return "\n".join(parts)


def _gib(x: str) -> int:
    n, u = x.split()
    return torch_size_to_bytes(n, u)


# -- A2. fairseq: a traceback right after "attempting to recover from OOM" is the job's failure ---------------------

_FAIRSEQ_OOM = ("2020-11-06 22:55:35 | WARNING | fairseq.trainer | OOM: Ran out of memory with exception: CUDA out of "
                "memory. Tried to allocate 28.00 MiB (GPU 1; 10.92 GiB total capacity; 10.13 GiB already allocated; "
                "13.38 MiB free; 10.33 GiB reserved in total by PyTorch)")
_FAIRSEQ_RECOVER = ("2020-11-06 22:55:35 | WARNING | fairseq.trainer | attempting to recover from OOM in "
                    "forward/backward pass")
_SPAWN_TB = [
    "Traceback (most recent call last):",
    '  File "/data/rwd/anaconda3/envs/fairseq/bin/fairseq-train", line 33, in <module>',
    "    sys.exit(load_entry_point('fairseq', 'console_scripts', 'fairseq-train')())",
    '  File "/data/rwd/fairseq/fairseq_cli/train.py", line 352, in cli_main',
    "    distributed_utils.call_main(args, main)",
    '  File "/data/rwd/anaconda3/envs/fairseq/lib/python3.6/site-packages/torch/multiprocessing/spawn.py", line 171, '
    "in spawn",
]


def test_a_traceback_right_after_fairseqs_recovery_line_is_a_failure():
    ex = explain_text([_FAIRSEQ_OOM, "...", _FAIRSEQ_RECOVER] + _SPAWN_TB)
    assert ex.failures and ex.primary is not None and ex.primary.kind == "torch_oom"
    assert not ex.recovered
    assert ex.category == "true_capacity"
    assert "No failure" not in to_text(ex)


def test_a_worker_killed_right_after_the_recovery_line_is_a_failure():
    lines = [_FAIRSEQ_OOM, _FAIRSEQ_RECOVER, "Traceback (most recent call last):",
             '  File "train.py", line 352, in cli_main', "Exception: process 1 terminated with signal SIGKILL"]
    ex = explain_text(lines)
    assert ex.failures and not ex.recovered


def test_a_recovery_line_followed_by_more_training_is_still_recovered():
    lines = [_FAIRSEQ_OOM, _FAIRSEQ_RECOVER,
             "2020-11-06 22:55:41 | INFO | train_inner | epoch 001:    400 / 1200 loss=7.21, ppl=148.1, wps=10221",
             "2020-11-06 22:56:40 | INFO | train_inner | epoch 001:    500 / 1200 loss=7.02, ppl=129.8, wps=10310"]
    ex = explain_text(lines)
    assert not ex.failures and ex.recovered


# -- A3. slurmstepd's oom-kill count: a host OOM kill of a Slurm step, with Slurm's fix ------------------------------

_STEPD_OLD = ("slurmstepd: error: Detected 1 oom-kill event(s) in StepId=191.batch cgroup. Some of your processes may "
              "have been killed by the cgroup out-of-memory handler.")
_STEPD_NEW = ("slurmstepd: error: Detected 2 oom_kill events in StepId=4242.13. Some of the step tasks have been OOM "
              "Killed.")


def test_slurmstepds_oom_kill_line_is_a_slurm_host_oom_kill():
    for line in (_STEPD_OLD, _STEPD_NEW,
                 "slurmstepd: error: Detected 1 oom-kill event(s) in step 3495064.0 cgroup. Some of your processes "
                 "may have been killed by the cgroup out-of-memory handler."):
        ex = explain_text([line])
        assert [e.kind for e in ex.failures] == ["slurm_oom_kill"], line
        assert ex.category == "host_oom" and ex.hypotheses[0].confidence >= 0.8, line
        said = _said(ex)
        assert "--mem" in said and "seff" in said and "resources.limits.memory" not in said, line
        assert "unknown" not in [h.category for h in ex.hypotheses], line


def test_a_shells_killed_line_in_a_slurm_script_gets_slurms_fix():
    lines = ["Epoch: [0][511/1736]\t Loss 0.5117 MAE 0.6075 RMSE 0.7153",
             "/var/spool/slurmd/job00191/slurm_script: line 28:  8156 Killed                  python3 main.py "
             "--prop hform --epochs 400", _STEPD_OLD]
    ex = explain_text(lines)
    assert ex.category == "host_oom" and ex.primary is not None and ex.primary.kind == "slurm_oom_kill"
    said = _said(ex)
    assert "--mem" in said and "resources.limits.memory" not in said
    # the shell's Killed alone, in a Slurm batch script: Slurm's fix too
    ex = explain_text(lines[:2])
    assert ex.category == "host_oom" and "--mem" in _said(ex) and "resources.limits.memory" not in _said(ex)


# -- A5. the figures of PyTorch's memory-fraction message, vLLM's memory profile and TGI's cut message --------------

_ALLOWED = ["Allocation on device 0 would exceed allowed memory. (out of memory)",
            "Currently allocated     : 16.08 GiB",
            "Requested               : 4.83 GiB",
            "Device limit            : 22.20 GiB",
            "Free (according to CUDA): 11.12 MiB",
            "PyTorch limit (set by user-supplied memory fraction)",
            "                        : 22.20 GiB"]


def _check_allowed_figures(ex: Explanation) -> None:
    assert ex.primary is not None and ex.primary.kind == "torch_oom"
    n = ex.primary.numbers
    assert n["requested_bytes"] == _gib("4.83 GiB") and n["allocated_bytes"] == _gib("16.08 GiB")
    assert n["total_bytes"] == _gib("22.20 GiB") and n["free_bytes"] == _gib("11.12 MiB")
    assert "allowed_bytes" not in n  # the limit is the whole device: no fraction was set
    assert ex.category == "true_capacity" and ex.hypotheses[0].confidence >= 0.5
    assert "without numbers" not in _said(ex)
    assert "set_per_process_memory_fraction" not in _said(ex)


def test_the_memory_fraction_message_escaped_on_one_line_is_read_with_its_figures():
    line = ("thread 'main' panicked at 'Unable to warmup model: Generation(\"" + "\\n".join(_ALLOWED) + "\")', "
            "router/src/main.rs:216:18")
    _check_allowed_figures(explain_text([line, "Error: WebserverFailed"]))


def test_the_memory_fraction_message_on_its_own_lines_is_read_with_its_figures():
    _check_allowed_figures(explain_text(["Traceback (most recent call last):", '  File "x.py", line 3, in <module>',
                                         "RuntimeError: " + _ALLOWED[0]] + _ALLOWED[1:]))


def test_a_fraction_below_the_device_is_the_cap_that_refused():
    lines = ["torch.OutOfMemoryError: " + _ALLOWED[0], "Currently allocated     : 10.00 GiB",
             "Requested               : 4.83 GiB", "Device limit            : 22.20 GiB",
             "Free (according to CUDA): 9.50 GiB", "PyTorch limit (set by user-supplied memory fraction)",
             "                        : 11.10 GiB"]
    ex = explain_text(lines)
    assert ex.primary is not None and ex.primary.numbers["allowed_bytes"] == _gib("11.10 GiB")
    assert ex.category == "gpu_sharing_limit"


_VLLM = [
    "INFO 02-26 09:54:02 model_runner.py:1115] Loading model weights took 5.2032 GB",
    "INFO 02-26 09:54:05 worker.py:267] Memory profiling takes 3.25 seconds",
    "INFO 02-26 09:54:05 worker.py:267] the current vLLM instance can use total_gpu_memory (8.00GiB) x "
    "gpu_memory_utilization (0.70) = 5.60GiB",
    "INFO 02-26 09:54:05 worker.py:267] model weights take 5.20GiB; non_torch_memory takes 0.03GiB; PyTorch activation "
    "peak memory takes 1.42GiB; the rest of the memory reserved for KV Cache is -1.05GiB.",
    "INFO 02-26 09:54:05 executor_base.py:111] # cuda blocks: 0, # CPU blocks: 4681",
    "[rank0]: Traceback (most recent call last):",
    '[rank0]:   File "/usr/local/lib/python3.12/dist-packages/vllm/worker/worker.py", line 493, in '
    "raise_if_cache_size_invalid",
    '[rank0]:     raise ValueError("No available memory for the cache blocks. "',
    "[rank0]: ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
    "initializing the engine.",
]


def test_vllms_negative_kv_cache_is_a_capacity_failure_told_with_its_figures():
    ex = explain_text(_VLLM)
    assert ex.primary is not None and ex.primary.kind == "vllm_capacity"
    assert ex.category == "true_capacity"
    said = _said(ex)
    assert "5.20 GiB" in said and "-1.05 GiB" in said and "8.00 GiB" in said
    # the log already has what the deciding command would grep for
    assert not any("grep" in d["command"] for d in ex.to_decide())
    assert not ex.ambiguous


def test_vllm_profile_with_a_small_model_under_a_low_utilisation_is_the_cap():
    lines = [ln.replace("(8.00GiB) x gpu_memory_utilization (0.70) = 5.60GiB",
                        "(80.00GiB) x gpu_memory_utilization (0.08) = 6.40GiB").replace("-1.05GiB", "-0.25GiB")
             for ln in _VLLM]
    ex = explain_text(lines)
    assert ex.category == "gpu_sharing_limit"


def test_tgis_cut_message_keeps_its_allocated_figure_and_the_pid_is_the_job():
    line = ("text_generation.errors.GenerationError: Request failed during generation: Server error: CUDA out of "
            "memory. Tried to allocate 42.00 MiB. GPU 0 has a total capacty of 39.39 GiB of which 31.94 MiB is free. "
            "Process 7529 has 39.23 GiB memory in use. Of the allocated memory 37.21 GiB is allo")
    ex = explain_text([line])
    assert ex.primary is not None and ex.primary.numbers["allocated_bytes"] == _gib("37.21 GiB")
    assert ex.category == "true_capacity"
    assert "other_process" not in [h.category for h in ex.hypotheses[:1]]
    assert "stop or move those processes" not in _said(ex)
    assert "pid namespace" in _said(ex)


# -- B4. Kubernetes' Reason: Error with exit code 137 is not its OOM kill -------------------------------------------

_DESCRIBE = ["    State: Running", "      Started: Mon, 13 Nov 2023 03:50:57 +0100", "    Last State: Terminated",
             "      Reason: Error", "      Exit Code: 137", "      Started: Mon, 13 Nov 2023 03:48:52 +0100",
             "      Finished: Mon, 13 Nov 2023 03:50:55 +0100", "    Ready: True", "    Restart Count: 1"]


def test_kubernetes_reason_error_with_137_is_not_stated_as_an_oom_kill():
    ex = explain_text(_DESCRIBE)
    assert ex.failures
    assert ex.category != "host_oom"
    host = next((h for h in ex.hypotheses if h.category == "host_oom"), None)
    assert host is None or host.confidence < 0.5
    assert "OOMKilled" in _said(ex)
    assert not any("CUDA_LAUNCH_BLOCKING" in d["command"] for d in ex.to_decide())
    assert any("kubectl" in d["command"] for d in ex.to_decide())


def test_kubernetes_reason_error_in_pod_yaml_is_read_too():
    lines = ["    lastState:", "      terminated:", "        containerID: containerd://0f30d47b", "        exitCode: 137",
             '        finishedAt: "2025-12-17T10:56:44Z"', "        reason: Error"]
    ex = explain_text(lines)
    assert ex.failures and ex.category != "host_oom"


def test_kubernetes_oomkilled_with_137_stays_host_oom():
    lines = [ln.replace("Reason: Error", "Reason: OOMKilled") for ln in _DESCRIBE]
    ex = explain_text(lines)
    assert ex.category == "host_oom"


# -- B5. an underlined (reStructuredText / setext) title is a heading, not a failure ---------------------------------

def test_an_rst_title_about_ooms_is_no_failure():
    for under in ("-", "=", "~"):
        ex = explain_text(["Common causes of OOM failures", under * 29, "",
                           "**Running multiple JAX processes concurrently.**",
                           "  Either use XLA_PYTHON_CLIENT_MEM_FRACTION to give each process an appropriate"])
        assert not ex.failures, under


def test_an_error_line_above_a_separator_is_still_a_failure():
    err = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
           "23.65 GiB of which 1.06 GiB is free.")
    ex = explain_text(["Traceback (most recent call last):", '  File "t.py", line 9, in test_x', err, "-" * 70,
                       "Ran 1 test in 3.2s", "FAILED (errors=1)"])
    assert ex.failures
    ex = explain_text(["CUDA out of memory", "-" * 18, "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"])
    assert ex.failures


def test_a_title_whose_underline_begins_the_next_block_is_no_failure():
    from oomdoctor.explain.events import LogScanner

    for second, failed in ((b"-----------------------------\n\nText of the page.\n", False),
                           (b"step 12 loss 0.31\n", True)):
        scanner = LogScanner()
        scanner.feed(b"Some notes\nCommon causes of OOM failures\n")
        scanner.feed(second)
        scan = scanner.finish()
        assert bool(scan.events) == failed, second
