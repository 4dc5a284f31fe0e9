"""Shapes of logs that users paste, from session 27's new-user walkthrough: coloured terminal output, PowerShell's
UTF-16, NCCL's error without NCCL_DEBUG, a container's pid namespace, doctor and explain reading one log alike,
and advice that must not contradict itself. The texts are the frameworks' real messages."""

from __future__ import annotations

import gzip
import io
import json
import sys

import pytest

from oomdoctor.cli import main
from oomdoctor.explain.rank import explain_text

_FRAG = ("OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.65 GiB "
         "of which 1.00 GiB is free. Including non-PyTorch memory, this process has 22.60 GiB memory in use. Of the "
         "allocated memory 21.00 GiB is allocated by PyTorch, and 1.10 GiB is reserved by PyTorch but unallocated.")
_OLD_TORCH = ("Traceback (most recent call last):\n"
              '  File "train.py", line 40, in <module>\n'
              "    out = model(x)\n"
              "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 10.76 GiB total capacity; 9.80 GiB "
              "already allocated; 3.19 MiB free; 9.89 GiB reserved in total by PyTorch)\n")


def _explain_json(capsys, *args: str) -> tuple[int, dict]:
    rc = main(["explain", "--format", "json", *args])
    return rc, json.loads(capsys.readouterr().out)


def _write(tmp_path, name: str, data: bytes) -> str:
    p = tmp_path / name
    p.write_bytes(data)
    return str(p)


# -- 1. terminal escape sequences ----------------------------------------------------------------------------------

_ANSI = ("\x1b[31m\x1b[1mOutOfMemoryError\x1b[0m: \x1b[35mCUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
         "total capacity of 23.65 GiB of which 1.00 GiB is free. Including non-PyTorch memory, this process has 22.60 "
         "GiB memory in use. Of the allocated memory 21.00 GiB is allocated by PyTorch, and 1.10 GiB is reserved by "
         "PyTorch but unallocated.\x1b[0m\n")


@pytest.mark.parametrize("threads", ["1", "2"])
def test_a_coloured_oom_message_is_read_with_its_numbers(tmp_path, capsys, threads):
    path = _write(tmp_path, "ansi.log", b"\x1b]0;train.py\x07epoch 1\n" + b"epoch 1\n" * 2 + _ANSI.encode())  # OSC title
    rc, d = _explain_json(capsys, "--threads", threads, path)
    assert rc == 1
    ev = d["events"][0]
    assert ev["kind"] == "torch_oom" and ev["line"] == 4  # the log's own line number
    assert ev["numbers"]["requested_bytes"] == 2 << 30 and ev["numbers"]["reserved_unallocated_bytes"]
    assert "\x1b" not in ev["text"] and "[0m" not in ev["text"]
    assert d["hypotheses"][0]["category"] == "fragmentation"


def test_a_colour_code_inside_the_literal_the_prefilter_looks_for(tmp_path, capsys):
    """"out of \\x1b[1mmemory": no literal of the pre-filter is in the raw bytes; the line is still found."""
    line = "RuntimeError: CUDA out of \x1b[1mmemory\x1b[0m. Tried to allocate 2.00 GiB\n"
    rc, d = _explain_json(capsys, _write(tmp_path, "split.log", ("step 1\n" + line).encode()))
    assert rc == 1 and d["events"][0]["kind"] == "torch_oom" and d["events"][0]["line"] == 2


def test_the_caret_form_of_colour_codes(tmp_path, capsys):
    text = ("step 1\n"  # no ESC byte in the file: the caret form is plain text
            "^[[31mRuntimeError^[[0m: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
            "23.65 GiB of which 1.00 GiB is free.\n")
    rc, d = _explain_json(capsys, _write(tmp_path, "caret.log", text.encode()))
    assert rc == 1
    ev = d["events"][0]
    assert ev["kind"] == "torch_oom" and ev["line"] == 2 and not ev["text"].startswith("^[")
    assert ev["numbers"]["total_bytes"] == round(23.65 * (1 << 30))


def test_escapes_in_a_piped_log_and_a_regex_class_kept(capsys, monkeypatch):
    """stdin takes the same path; text that only looks like a caret code ("^[[:alpha:]]") is left alone."""
    data = ("grep '^[[:alpha:]]' out.txt\n" + _ANSI).encode()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    rc, d = _explain_json(capsys, "-")
    assert rc == 1 and d["events"][0]["line"] == 2 and d["events"][0]["kind"] == "torch_oom"


def test_strip_escapes_keeps_lines_and_copies_nothing_without_them():
    from oomdoctor.explain.prefilter import strip_escapes

    assert strip_escapes(b"plain line\nanother\n", 0, 19) is None
    raw = b"a\x1b[1;31mb\x1b[0m\n\x1b[2K\rc ^[[32mok^[[0m\n"
    assert strip_escapes(raw, 0, len(raw)) == b"ab\n\rc ^[[32mok^[[0m\n"  # the caret form: candidate lines only


# -- 2. UTF-16 (Windows PowerShell's `>`) and UTF-8 with a byte-order mark ------------------------------------------

@pytest.mark.parametrize("codec", ["utf-16", "utf-16-le", "utf-16-be"])  # with a mark (LE on x86), and without
def test_a_utf16_log_is_decoded(tmp_path, capsys, codec):
    rc, d = _explain_json(capsys, _write(tmp_path, "ps.log", _OLD_TORCH.encode(codec)))
    assert rc == 1
    ev = d["events"][0]
    assert ev["kind"] == "torch_oom" and ev["line"] == 4 and ev["numbers"]["requested_bytes"] == 20 << 20


def test_a_utf16_log_gzipped_or_piped(tmp_path, capsys, monkeypatch):
    rc, d = _explain_json(capsys, _write(tmp_path, "ps.log.gz", gzip.compress(_OLD_TORCH.encode("utf-16"))))
    assert rc == 1 and d["events"][0]["line"] == 4
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(io.BytesIO(_OLD_TORCH.encode("utf-16")))))
    rc, d = _explain_json(capsys, "-")
    assert rc == 1 and d["events"][0]["kind"] == "torch_oom"


def test_utf8_with_a_byte_order_mark(tmp_path, capsys):
    body = "Cuda failure 'out of memory'\n"  # a pattern that wants the line's start
    rc, d = _explain_json(capsys, _write(tmp_path, "bom.log", b"\xef\xbb\xbf" + body.encode()))
    assert rc == 1 and d["events"][0]["kind"] == "nccl_oom" and not d["events"][0]["text"].startswith("\ufeff")


def test_utf16_large_enough_for_several_blocks(tmp_path):
    """The transcoding reader hands on whole lines across its reads (a UTF-16 code unit split between reads)."""
    from oomdoctor.explain.read import iter_blocks

    text = "".join(f"step {i} loss 0.{i % 97}\n" for i in range(40_000)) + _OLD_TORCH
    path = _write(tmp_path, "big.log", text.encode("utf-16"))
    got = b"".join(bytes(buf[s:e]) for buf, s, e in iter_blocks(path, block_size=4097))
    assert got.decode("utf-8") == text


def test_doctor_does_not_call_a_utf16_log_binary(tmp_path):
    from oomdoctor.explain.read import text_encoding

    assert text_encoding(_OLD_TORCH.encode("utf-16")) == "utf-16-le"
    assert text_encoding(_OLD_TORCH.encode("utf-16-be")) == "utf-16-be-nobom"
    assert text_encoding(b"\x7fELF\x02\x01\x01\x00" + bytes(56)) is None
    assert text_encoding(_OLD_TORCH.encode()) is None


# -- 3. NCCL's error without NCCL_DEBUG -------------------------------------------------------------------------------

_NCCL_PLAIN = ("ncclUnhandledCudaError: Call to CUDA function failed.\n"
               "Last error:\n"
               "Cuda failure 'out of memory'\n")
_DDP = ("Traceback (most recent call last):\n"
        '  File "/workspace/train.py", line 52, in <module>\n'
        "    model = DDP(model, device_ids=[local_rank])\n"
        '  File "/usr/local/lib/python3.10/dist-packages/torch/nn/parallel/distributed.py", line 825, in __init__\n'
        "    _verify_param_shape_across_processes(self.process_group, parameters)\n"
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, "
        "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5\n")


@pytest.mark.parametrize("text", [
    _NCCL_PLAIN,
    _DDP + _NCCL_PLAIN,
    _DDP + "".join(f"[rank1]: {x}\n" for x in _NCCL_PLAIN.replace("'out", "2 'out").splitlines()),  # NCCL 2.20's number
    "host:1234:1250 [0] include/alloc.h:228 NCCL WARN Cuda failure 2 'out of memory'\n",
])
def test_nccl_last_error_out_of_memory_is_an_nccl_oom(text):
    ex = explain_text(text.splitlines())
    assert [e.kind for e in ex.failures] == ["nccl_oom"]
    assert ex.failures[0].text.endswith("'out of memory'")


def test_a_sentence_about_the_nccl_error_is_not_one():
    ex = explain_text(["I keep seeing Cuda failure 'out of memory' mentioned in the NCCL docs"])
    assert "nccl_oom" not in [e.kind for e in ex.events]


# -- 4. the job itself behind a container's pid namespace -------------------------------------------------------------

_PIDNS = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 "
          "GiB of which 1.05 GiB is free. Process 3418827 has 78.09 GiB memory in use. Of the allocated memory 76.40 GiB "
          "is allocated by PyTorch, and 120.50 MiB is reserved by PyTorch but unallocated. If reserved but unallocated "
          "memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.")


def test_a_listed_process_that_could_not_fit_beside_the_jobs_reserve_is_the_job():
    """78.09 GiB listed + 76.52 GiB PyTorch holds = 154 GiB on a 79 GiB card: the 1.57 GiB over the reserve (NCCL,
    cuBLAS on an H100) is more than a bare context, yet it cannot be another process."""
    ex = explain_text(["Traceback (most recent call last):", _PIDNS])
    top = ex.hypotheses[0]
    assert top.category == "true_capacity"
    said = " ".join(h.to_json()["evidence"][0] for h in ex.hypotheses if h.to_json()["evidence"])
    assert "other processes hold" not in said
    assert "other_process" not in [h.category for h in ex.hypotheses[:2]]


def test_a_listed_process_that_fits_beside_the_reserve_is_still_another_one():
    """The same shape where the two figures fit on the card together: a co-tenant, as before."""
    text = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
            "79.15 GiB of which 1.05 GiB is free. Process 3418827 has 40.00 GiB memory in use. Of the allocated memory "
            "36.00 GiB is allocated by PyTorch, and 120.50 MiB is reserved by PyTorch but unallocated.")
    ex = explain_text([text])
    assert ex.hypotheses[0].category == "other_process"


# -- 5. doctor's WRK001 reads the log as explain does ----------------------------------------------------------------

_R5 = ("[rank0]: Traceback (most recent call last):\n"
       '[rank0]:   File "/workspace/train.py", line 88, in <module>\n'
       "[rank0]:     loss.backward()\n"
       "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
       "79.15 GiB of which 1.05 GiB is free. Process 12345 has 78.09 GiB memory in use. Of the allocated memory 70.12 "
       "GiB is allocated by PyTorch, and 6.50 GiB is reserved by PyTorch but unallocated. If reserved but unallocated "
       "memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.\n")


def _bundle_with_log(tmp_path, name: str, text: str) -> str:
    """A bundle of a machine without NVIDIA's driver (r5.tar.gz's meta.json) and the job's log: no other finding."""
    bundle = tmp_path / "bundle"
    (bundle / "logs").mkdir(parents=True)
    (bundle / "meta.json").write_text(json.dumps({
        "format": "oomdoctor-bundle", "version": 1, "created": "2026-11-28T18:26:18+00:00", "tool_version": "0.1.0",
        "hostname": "vm", "cpu_count": 2, "pid": 3444,
        "nvml_error": "NVML library not found (libnvidia-ml.so.1): no NVIDIA driver libraries here"}))
    (bundle / "logs" / name).write_text(text)
    return str(bundle)


@pytest.mark.parametrize("text", [_R5, _FRAG + "\n"])
def test_doctor_and_explain_give_one_cause_for_one_bundle(tmp_path, capsys, text):
    bundle = _bundle_with_log(tmp_path, "train.log", text)
    _, ex = _explain_json(capsys, "--bundle", bundle)
    main(["doctor", "--bundle", bundle, "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    cause = ex["hypotheses"][0]["category"]
    assert cause == "fragmentation"
    assert [f["category"] for f in doc["findings"] if f["id"] == "WRK001"] == [cause]
    assert doc["verdict"]["category"] == cause
    (events,) = [layer["facts"]["workload.oom_events"] for layer in doc["layers"] if layer["name"] == "workload"]
    assert [e["category"] for e in events] == [cause]  # the fact says what explain says of the line


def test_wrk001_weighs_the_bundles_facts_as_explain_does(tmp_path, capsys):
    """With a machine's facts (the seed bundle: an A100 behind a sharing layer) the answer may change; WRK001 still
    gives explain's."""
    import shutil
    from pathlib import Path

    bundle = tmp_path / "seed"
    shutil.copytree(Path(__file__).resolve().parents[1] / "examples" / "seed-a100-k8s", bundle)
    shutil.rmtree(bundle / "logs")
    (bundle / "logs").mkdir()
    (bundle / "logs" / "train.log").write_text(_R5)
    _, ex = _explain_json(capsys, "--bundle", str(bundle))
    main(["doctor", "--bundle", str(bundle), "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert [f["category"] for f in doc["findings"] if f["id"] == "WRK001"] == [ex["hypotheses"][0]["category"]]


def test_a_weak_finding_is_not_contradicted_by_the_verdict():
    """A warning that names a cause, below the verdict's floor: the verdict says which way it leans, not "No finding
    points at a root cause" (b2.tar.gz: WRK001 warned of an OOM, exit 1, verdict unknown)."""
    from oomdoctor.checks.engine import choose_verdict
    from oomdoctor.facts.model import Category, Confidence, Finding, Layer, Severity

    weak = Finding(id="WRK001", layer=Layer.WORKLOAD, severity=Severity.WARNING, confidence=Confidence.LOW,
                   title="an OOM", remedy="explain it", category=Category.TRUE_CAPACITY)
    v = choose_verdict([weak], {"workload": "ok"})
    assert v.category is Category.UNKNOWN
    assert "No finding points" not in v.summary and "true_capacity" in v.summary and "WRK001" in v.summary


# -- 7. text cut between words; no internal jargon -------------------------------------------------------------------

def test_explain_text_cuts_between_words(tmp_path, capsys):
    from oomdoctor.explain.events import LogScanner
    from oomdoctor.explain.rank import explain_scan
    from oomdoctor.render.explain import to_text

    s = LogScanner()
    s.feed(("Traceback (most recent call last):\n" + _PIDNS + "\n").encode())
    out = to_text(explain_scan(s.finish()), width=400)
    header = out.splitlines()[1]
    assert header.endswith(" …") and header.rstrip(" …").endswith(("unallocated.", "If", "reserved", "but"))
    (event_line,) = [ln for ln in out.splitlines() if "torch_oom ->" in ln]
    assert event_line.endswith(" …") and event_line[:-2].split()[-1] in _PIDNS.split()  # a whole word before it


def test_a_leaning_from_the_words_is_said_in_plain_words():
    ex = explain_text(["RuntimeError: out of memory", "while loading the checkpoint in my notebook"])
    said = " ".join(e for h in ex.hypotheses for e in h.evidence)
    assert "no rule names it" not in said and "(p = " not in said.replace("a word model fitted", "")
    assert "only a faint hint" in said


def test_doctor_remedies_and_diff_notes_name_no_seed_case():
    """"(the seed case's test)" is the project's own name for the incident it began with; a user has no such case."""
    from builders import make_facts
    from oomdoctor.analysis.diff_notes import explain as note
    from oomdoctor.checks.registry import CHECKS

    (f,) = CHECKS["SHR004"].fn(make_facts(sharing__vcuda={"config": "/etc/vcuda/vcuda.config"}, cuda__torch_runtime="11.3"))
    assert "seed case" not in f.title + f.remedy and "the hooks were the cause" in f.remedy
    for key, a, b in (("sharing.vcuda", None, {"config": "x"}), ("driver.gpus[0].memory_used_bytes", 4 << 20, 600 << 20),
                      ("runtime.container", "docker", "kubernetes"), ("kernel.release", "3.10.0-1062.el7.x86_64", "5.15.0")):
        assert "seed case" not in note(key, a, b)


# -- 6. advice that does not contradict itself ------------------------------------------------------------------------

def test_old_pytorch_fragmentation_is_decided_without_expandable_segments():
    """PyTorch <= 2.0's message: its fix is max_split_size_mb (no expandable_segments yet), and so is what decides."""
    text = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 6.51 GiB (GPU 0; 39.39 GiB total "
            "capacity; 26.98 GiB already allocated; 5.47 GiB free; 32.55 GiB reserved in total by PyTorch) If reserved "
            "memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.")
    ex = explain_text([text])
    assert ex.category == "fragmentation"
    commands = " ".join(d["command"] for d in ex.to_decide())
    assert ex.to_decide() and "expandable_segments:True" not in commands and "max_split_size_mb" in commands
    assert "predates expandable_segments" in " ".join(ex.hypotheses[0].fixes)
    new = explain_text([_FRAG])  # PyTorch 2.1+: expandable_segments, as before
    assert all("expandable_segments" in d["command"] for d in new.to_decide() if d["category"] == "fragmentation")


def test_no_batch_size_found_is_not_told_to_lower_the_batch():
    ex = explain_text(["RuntimeError: No executable batch size found, reached zero."])
    top = ex.hypotheses[0]
    assert top.category == "true_capacity" and "down to 1" in top.evidence[0]
    assert not any("lower the batch" in f for f in top.fixes) and "batch of 1" in top.fixes[0]


def test_a_slurm_kill_is_fixed_with_slurms_memory_request():
    ex = explain_text(["Epoch 3: 45%|####      | 450/1000",
                       "slurmstepd: error: Detected 1 oom_kill event in StepId=812345.0. Some of the step tasks have "
                       "been OOM Killed.",
                       "srun: error: gpu-node-17: task 0: Out Of Memory"])
    fixes = " ".join(ex.hypotheses[0].fixes)
    assert ex.category == "host_oom" and "--mem" in fixes and "resources.limits" not in fixes
    k8s = explain_text(["Last State: Terminated", "Reason: OOMKilled", "Exit Code: 137"])
    assert "resources.limits.memory" in " ".join(k8s.hypotheses[0].fixes)  # a pod's is still the pod's


def test_hami_fix_once_and_its_limit_not_called_the_gpu_total():
    from oomdoctor.render.explain import to_text

    ex = explain_text(["[HAMI-core Msg(52:139869418223424:libvgpu.c:836)]: Initializing.....",
                       "[HAMI-core ERROR (pid:52 thread=139869418223424 allocator.c:49)]: Device 0 OOM 8589934592 / "
                       "8589934592"])
    top = ex.hypotheses[0]
    assert top.category == "gpu_sharing_limit" and len(top.fixes) == 1
    out = to_text(ex, width=300)
    assert "GPU total" not in out and "HAMi limit" in out


def test_an_mps_oom_names_the_mps_limit_and_what_pytorch_holds():
    from oomdoctor.render.explain import to_text

    ex = explain_text(["RuntimeError: MPS backend out of memory (MPS allocated: 17.85 GB, other allocations: 1.23 MB, "
                       "max allowed: 18.13 GB). Tried to allocate 512.00 MB on private pool. Use "
                       "PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 to disable upper limit for memory allocations (may cause "
                       "system failure)."])
    top = ex.hypotheses[0]
    said = " ".join(top.evidence + top.fixes)
    assert "set_per_process_memory_fraction" not in said and "holds 0 bytes" not in said
    assert "PYTORCH_MPS_HIGH_WATERMARK_RATIO" in said and "holds 17.85 GiB" in said
    assert "fraction cap" not in to_text(ex, width=300)


def test_a_fraction_cap_without_a_total_reads_as_a_sentence():
    ex = explain_text(["RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB. Of the allocated memory 6.00 GiB "
                       "is allocated by PyTorch, with 6.50 GiB allowed; and 100.00 MiB is reserved by PyTorch but "
                       "unallocated."])
    assert not any("above a larger fraction" in f for h in ex.hypotheses for f in h.fixes)
