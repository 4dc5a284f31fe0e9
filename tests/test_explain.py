"""GIVEN real OOM texts WHEN explained THEN the documented root cause ranks first, with its numbers."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from oomdoctor.explain.events import LogScanner
from oomdoctor.explain.patterns import extract
from oomdoctor.explain.rank import explain_text
from oomdoctor.facts import Fact, FactSet
from oomdoctor.units import torch_size_to_bytes

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "real-oom"  # captured on an H200 (INDEX.json says how)
SEED = ROOT / "tests" / "fixtures" / "seeds" / "000_12513d42392d08f5.txt"  # the A100 Kubernetes case study
GiB = 1024**3


def _explain(text: str, facts: FactSet | None = None):
    return explain_text(text.splitlines(), facts)


def _fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


# --- the fixtures captured on an H200 (tests/fixtures/real-oom/INDEX.json) -------------------------

@pytest.mark.parametrize("name,expected", [
    ("huge_single.txt", "true_capacity"),       # 3725 GiB asked of a 139.8 GiB GPU
    ("fill_then_ask.txt", "true_capacity"),     # 0 bytes reserved-unallocated: nothing to defragment
    ("fraction_cap.txt", "gpu_sharing_limit"),  # a 6.99 GiB fraction cap with 133 GiB free: contract "fractions"
    # cuda:7 on a one-GPU machine: a device the process cannot see is configuration (contract §2:
    # context_or_driver covers "wrong device"), not a program error.
    ("bad_ordinal.txt", "context_or_driver"),
    ("jax_oom.txt", "true_capacity"),
    ("cupy_oom.txt", "true_capacity"),
    # Another process held all but 30-400 MiB; the text alone shows only the driver's error, so the
    # answer is the driver-level failure with other processes as the next lead (bundle tests below).
    ("hog_leaves_300MiB_then_alloc_1GiB.txt", "context_or_driver"),
    ("hog_leaves_30MiB_then_model_to.txt", "context_or_driver"),
    ("hog_leaves_400MiB_then_matmul.txt", "context_or_driver"),
])
def test_fixture_category(name, expected):
    ex = _explain(_fixture(name))
    assert ex.hypotheses[0].category == expected
    if name.startswith("hog_"):
        assert ex.hypotheses[1].category == "other_process"


def test_fraction_cap_numbers_and_fix():
    ex = _explain(_fixture("fraction_cap.txt"))
    n = ex.primary.numbers
    assert n["allowed_bytes"] == torch_size_to_bytes("6.99", "GiB")
    assert n["requested_bytes"] == 1024 * 1024**2
    assert n["reserved_unallocated_bytes"] == 0
    assert "set_per_process_memory_fraction" in " ".join(ex.hypotheses[0].fixes)


def test_fill_then_ask_has_nothing_to_defragment():
    ex = _explain(_fixture("fill_then_ask.txt"))
    assert "fragmentation" not in [h.category for h in ex.hypotheses]
    assert ex.primary.numbers["free_bytes"] == torch_size_to_bytes("2.29", "GiB")


def test_hog_with_bundle_facts_becomes_other_process():
    facts = FactSet([Fact("sharing.processes", [{"gpu": 0, "pid": 817, "used_bytes": 143118 * 1024**2,
                                                "name": "python", "self": False}], "nvml")])
    ex = _explain(_fixture("hog_leaves_30MiB_then_model_to.txt"), facts)
    assert ex.hypotheses[0].category == "other_process"
    assert "sharing.processes" in ex.facts_used


# --- the issue's two examples -----------------------------------------------------------------------

ISSUE_FRAG = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.95 GiB. GPU 0 has a total capacity "
              "of 44.35 GiB of which 1.27 GiB is free. Including non-PyTorch memory, this process has 43.07 GiB "
              "memory in use. Of the allocated memory 30.02 GiB is allocated by PyTorch, and 12.46 GiB is reserved "
              "by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
              "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.")


def test_issue_example_fragmentation():
    ex = _explain(ISSUE_FRAG)
    top = ex.hypotheses[0]
    assert top.category == "fragmentation"
    assert "12.46 GiB" in top.evidence[0]
    assert any("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in f for f in top.fixes)
    assert ex.primary.numbers["reserved_unallocated_bytes"] == torch_size_to_bytes("12.46", "GiB")
    assert ex.primary.numbers["requested_bytes"] == torch_size_to_bytes("1.95", "GiB")


def _seed_traceback() -> str:
    lines = SEED.read_text().splitlines()
    end = next(i for i, line in enumerate(lines) if line.startswith("RuntimeError: CUDA error: out of memory"))
    return "\n".join(lines[3:end + 1])


def test_seed_traceback_is_driver_error_in_model_to():
    ex = _explain(_seed_traceback())
    top = ex.hypotheses[0]
    assert top.category == "context_or_driver"
    text = " ".join(top.evidence)
    assert "driver's error" in text and ".to()" in text and "not the caching allocator" in text
    assert "other_process" in [h.category for h in ex.hypotheses[:2]]


def test_seed_with_bundle_sharing_layer_and_probe_failures():
    facts = FactSet([Fact("sharing.vcuda", {"config": "/etc/vcuda/vcuda.config"}, "bundle"),
                     Fact("probe.context", {"attempts": 5, "failures": 2, "errors": ["out of memory"]}, "probe"),
                     Fact("kernel.release", "3.10.0-1062.9.1.el7.x86_64", "proc/version")])
    ex = _explain(_seed_traceback(), facts)
    assert ex.hypotheses[0].category == "context_or_driver"
    assert ex.hypotheses[0].confidence > _explain(_seed_traceback()).hypotheses[0].confidence
    assert {"probe.context", "sharing.vcuda", "kernel.release"} <= set(ex.facts_used)


def test_whole_seed_file_reads_environment_hints():
    ex = _explain(SEED.read_text())
    assert ex.hypotheses[0].category == "context_or_driver"
    assert ex.scan.env["kernel_release"] == ["3.10.0-1062.9.1.el7.x86_64"]
    # 7.79 GiB total on a log that names an A100: the job saw a slice.
    cats = {e.kind: c for e, c in ((ex.events[i], c) for i, c in ex.event_categories.items())}
    assert "torch_oom" in cats


# --- formats across versions (memory-tools §4.5) ---------------------------------------------------

@pytest.mark.parametrize("text,key,value", [
    ("RuntimeError: CUDA out of memory. Tried to allocate 16.00 GiB (GPU 0; 11.93 GiB total capacity; 4.00 GiB "
     "already allocated; 7.33 GiB free; 179.00 KiB cached)", "reserved_unallocated_bytes", 179 * 1024),
    ("RuntimeError: CUDA out of memory. Tried to allocate 2.00 MiB (GPU 0; 31.72 GiB total capacity; 24.89 GiB "
     "already allocated; 6.12 MiB free; 30.70 GiB reserved in total by PyTorch)", "reserved_bytes",
     torch_size_to_bytes("30.70", "GiB")),
    ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 138.00 MiB. GPU 0 has a total capacty "
     "of 15.90 GiB of which 8.44 MiB is free. Process 1246069 has 577.00 MiB memory in use. Including non-PyTorch "
     "memory, this process has 15.32 GiB memory in use.", "total_bytes", torch_size_to_bytes("15.90", "GiB")),
    ("HIP out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 63.98 GiB of which 0 bytes "
     "is free. Of the allocated memory 60.00 GiB is allocated by PyTorch, with 1.00 GiB allocated in private pools "
     "(e.g., CUDA Graphs), and 2.00 GiB is reserved by PyTorch but unallocated.", "private_pool_bytes", GiB),
])
def test_torch_formats(text, key, value):
    nums, _ = extract("torch_oom", text)
    assert nums[key] == value


def test_other_process_listed_and_self_in_container():
    n, d = extract("torch_oom", "CUDA out of memory. Tried to allocate 546.00 MiB. GPU 0 has a total capacity of "
                   "15.77 GiB of which 514.19 MiB is free. Process 562167 has 15.25 GiB memory in use. Of the "
                   "allocated memory 13.73 GiB is allocated by PyTorch, and 736.86 MiB is reserved by PyTorch but "
                   "unallocated.")
    assert d["other_processes"] == [{"pid": 562167, "bytes": torch_size_to_bytes("15.25", "GiB")}]
    assert "process_bytes" not in n  # never guessed: the text does not say which process is this one


def test_other_process_big_neighbour():
    ex = _explain("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                  "capacity of 79.15 GiB of which 1.10 GiB is free. Process 4242 has 60.00 GiB memory in use. "
                  "Including non-PyTorch memory, this process has 18.00 GiB memory in use. Of the allocated memory "
                  "17.00 GiB is allocated by PyTorch, and 200.00 MiB is reserved by PyTorch but unallocated.")
    assert ex.hypotheses[0].category == "other_process"
    assert "4242" in ex.hypotheses[0].evidence[0]


def test_hami_limit_line():
    ex = _explain("[HAMI-core ERROR (pid:25 thread=1 allocator.c:53)]: Device 0 OOM 27147995136 / 25757220864")
    assert ex.hypotheses[0].category == "gpu_sharing_limit"
    assert ex.primary.details["limit_bytes"] == 25757220864


@pytest.mark.parametrize("text,expected", [
    ("RuntimeError: DataLoader worker (pid 47) is killed by signal: Bus error. It is possible that dataloader's "
     "workers are out of shared memory.", "shm_exhausted"),
    ("RuntimeError: unable to write to file </torch_739_144252761_4>: No space left on device (28)", "shm_exhausted"),
    ("[123.4] Memory cgroup out of memory: Killed process 4242 (python) total-vm:1kB, anon-rss:2kB", "host_oom"),
    ("      Reason:       OOMKilled", "host_oom"),
    ("command terminated with exit code 137", "host_oom"),
    ("NVRM: Xid (PCI:0000:3b:00): 31, pid=1234, name=python, Ch 00000008, MMU Fault", "not_oom"),
    ("RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm( handle)`", "not_oom"),
    ("RuntimeError: The NVIDIA driver on your system is too old (found version 11040).", "context_or_driver"),
    ("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 7406166528 "
     "bytes.", "true_capacity"),
    ("ValueError: Free memory on device (0.22/30.3 GiB) on startup is less than desired GPU memory utilization "
     "(0.7, 21.21 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
     "other_process"),
    ("NCCL WARN Cuda failure 'out of memory'", "context_or_driver"),
])
def test_kinds(text, expected):
    assert _explain(text).hypotheses[0].category == expected


def test_leak_from_step_readings():
    lines = [f"step {i} loss 0.5 max_memory_allocated {4 + i * 0.4:.2f} GiB" for i in range(1, 30)]
    lines.append("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                 "capacity of 15.77 GiB of which 1.00 GiB is free. Including non-PyTorch memory, this process has "
                 "14.70 GiB memory in use. Of the allocated memory 14.20 GiB is allocated by PyTorch, and "
                 "10.00 MiB is reserved by PyTorch but unallocated.")
    ex = _explain("\n".join(lines))
    assert ex.hypotheses[0].category == "leak_in_code"
    assert "loss.item()" in ex.hypotheses[0].fixes[0]


def test_plateau_is_not_a_leak():
    lines = [f"step {i} mem {12.0 if i > 2 else 6.0:.2f} GiB" for i in range(1, 40)]
    lines.append("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB. GPU 0 has a total "
                 "capacity of 15.77 GiB of which 1.00 GiB is free. Of the allocated memory 14.20 GiB is allocated "
                 "by PyTorch, and 10.00 MiB is reserved by PyTorch but unallocated.")
    assert "leak_in_code" not in [h.category for h in _explain("\n".join(lines)).hypotheses]


def test_old_message_wrapped_over_lines_is_joined():
    ex = _explain("OutOfMemoryError: CUDA out of memory.\nTried to allocate 734.00 MiB (GPU 0; 7.79 GiB total "
                  "capacity;\n5.20 GiB already allocated; 139.94 MiB free;6.78 GiB reserved in total by PyTorch)")
    n = ex.primary.numbers
    assert n["requested_bytes"] == 734 * 1024**2 and n["reserved_bytes"] == torch_size_to_bytes("6.78", "GiB")


def test_message_split_across_blocks():
    s = LogScanner()
    s.feed(b"noise\nOutOfMemoryError: CUDA out of memory.\n")
    s.feed(b"Tried to allocate 734.00 MiB (GPU 0; 7.79 GiB total capacity;\n5.20 GiB already allocated\n")
    ev = s.finish().events[0]
    assert ev.line == 2 and ev.numbers["requested_bytes"] == 734 * 1024**2


def test_repeats_are_counted_not_stored():
    line = ("[rank{r}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB. GPU {r} has a total "
            "capacity of 79.15 GiB of which 1.00 MiB is free.")
    ex = _explain("\n".join(line.format(r=r) for r in range(8)))
    assert len(ex.events) == 1 and ex.events[0].count == 8


def test_no_event_no_hypothesis():
    ex = _explain("epoch 1 loss 0.3\nepoch 2 loss 0.2\n")
    assert not ex.explained and ex.hypotheses == []


def test_json_contract_keys():
    d = _explain(ISSUE_FRAG).to_json()
    assert set(d) >= {"events", "hypotheses"}
    assert set(d["events"][0]) >= {"kind", "line", "text", "numbers"}
    assert set(d["hypotheses"][0]) >= {"category", "confidence", "evidence", "fixes"}
    confs = [h["confidence"] for h in d["hypotheses"]]
    assert confs == sorted(confs, reverse=True) and all(0 <= c <= 1 for c in confs)
    json.dumps(d)


# --- the labelled corpus of real reports ------------------------------------------------------------

def _corpus():
    spec = importlib.util.spec_from_file_location("explain_corpus", ROOT / "bench" / "explain_corpus.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["explain_corpus"] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


CATEGORIES = ("true_capacity", "fragmentation", "other_process", "leak_in_code", "context_or_driver",
              "shm_exhausted", "host_oom", "gpu_sharing_limit", "not_oom")


def test_corpus_schema_and_frozen_split():
    """Every report is labelled, dated and linked; its split is the hash of its link (or dev, with a reason)."""
    C = _corpus()
    cases = C.load_reports()
    urls = set()
    for c in cases:
        assert set(C.REPORT_KEYS) <= set(c), c["file"]
        assert c["id"] == c["file"].removesuffix(".yaml")
        assert c["url"].startswith("https://") and c["url"] not in urls, c["file"]
        urls.add(c["url"])
        assert c["category"] in CATEGORIES and str(c["text"]).strip() and str(c["why"]).strip(), c["file"]
        if c.get("split_note"):
            assert c["split"] == "dev", c["file"]  # the exception goes one way only
        else:
            assert c["split"] == C.split_of(c["url"]), c["file"]
    benign_urls = set()
    for c in C.load_benign():
        assert set(C.BENIGN_KEYS) <= set(c) and c["expect"] in ("none", "recovered"), c["file"]
        assert c["url"] not in benign_urls, c["file"]
        benign_urls.add(c["url"])
        assert c["split"] == (C.split_of(c["url"]) if not c.get("split_note") else "dev"), c["file"]


def test_corpus_is_wide_enough():
    """A floor under what the corpus holds (issue 17 asks for 250 and 15 per category: 241 and 8
    gpu_sharing_limit cases so far, see docs/benchmarks.md), so that it can only grow."""
    C = _corpus()
    cases = C.load_reports()
    assert len(cases) >= 240
    per = {cat: sum(c["category"] == cat for c in cases) for cat in CATEGORIES}
    assert per.pop("gpu_sharing_limit") >= 8 and min(per.values()) >= 25, per
    assert len({c["ecosystem"] for c in cases}) >= 12
    assert len(C.load_benign()) >= 60
    n_test = sum(c["split"] == "test" for c in cases)
    assert 0.25 <= n_test / len(cases) <= 0.45


def test_dev_split_floor_and_no_false_alarms():
    """A regression floor on the dev split only (rules are written from it); test figures are only
    printed by bench/explain_accuracy.py, never asserted, so nothing here can be tuned to them."""
    C = _corpus()
    s = C.summary(C.score_reports(C.load_reports("dev")))
    assert s["top1"] / s["n"] >= DEV_TOP1_FLOOR, s
    benign = C.score_benign(C.load_benign("dev"))
    alarms = {r.id for r in benign if r.false_alarm}
    assert alarms <= KNOWN_DEV_FALSE_ALARMS, sorted(alarms - KNOWN_DEV_FALSE_ALARMS)
    # and the list holds no text that no longer raises one (a refit may move a text either way: keep it true)
    assert KNOWN_DEV_FALSE_ALARMS <= alarms, sorted(KNOWN_DEV_FALSE_ALARMS - alarms)


# The dev benign logs explain still reports as failures: 0 until the sixth session's hard negatives (r4,
# 2026-11-27: 12 of its 24 dev texts on arrival, the same with the round's starting code; 5 fixed from dev
# since: gunicorn's guess after a timeout kill, a per-image loop that went on, a CJK article's general
# statement, sglang's retraction). Session 8: a u4 batch-size probe whose OOM line repeats and goes on
# (recovery.loop_went_on) is recovered. Session 7: CJK articles of five or more prose lines
# (mentions.cjk_article) took four r4 pages and two of t5's off the list. Known, not accepted: a Chinese
# FAQ and a Japanese page of few prose lines that quote a full message, an English how-to page
# (docs/benchmarks.md), and t5's test source whose messages sit in plain indented string
# literals (the review of session 7: a notebook's or a JSON array's real message looks the same, so an
# indented quoted line is source only as an f-string or with a {placeholder}). Any other false alarm on
# dev fails this test, and so does an entry that no longer raises one (since session 22): fixing one shrinks the set.
KNOWN_DEV_FALSE_ALARMS = frozenset({
    "r4_lmdeploy_faq_zh_tmoom", "r4_openillumi_ja_fragmentation", "r4_theneuralbase_hf_cudaoom_page",
    "t5_torchtnt_test_oom_source",
    # session 8, round w4 (dev, scored on arrival first): a Spark feature request whose prose says the OOM
    # "led to the Spark task retries" (recovered, not read as such), and a Ray PR quoting a pytest failure
    # line ("E   ray.exceptions.OutOfMemoryError: ...") from a test that kills a task on purpose
    "w4_cudfspark_shufflecoalesce_splitretry_11584", "w4_ray_oommsg_topn_pr30312",
    # session 9, round z10 (dev, scored on arrival first; 4 of its 16 dev logs, 3 fixed since): torch.compile's
    # autotuner rejecting Triton configs for lack of shared memory ("OutOfResources: out of resource: shared
    # memory ... Ignoring this choice."), read as a program error; "Ignoring this choice" is no pre-filter
    # literal (the 64 slots are full)
    "z10_openpi_inductor_autotune_smem_654",
    # session 10, round aa3 (dev, scored on arrival first; 6 of its 22 dev texts, 4 fixed since: a class
    # definition, a literal tested in code, docstrings, a C comment): HAMi's tutorial whose demo script fills the
    # card until the limit and catches the OOM (labelled recovered; the catch is only in the prose); the
    # Kubernetes task page that shows a container's OOMKilled status as its worked example (a strong kind: no
    # documentation gate)
    "aa3_hamiweb_gpupartition_oomtest",
    # session 10, rounds aa7-aa9 (dev source snapshots, scored on arrival first: 17 of 58 with the session's
    # starting code, 14 with the code of the moment, 3 now): a cuDF troubleshooting page's bold labels
    # ("**Enable spill before OOM happens**"), a docstring's "you will see the same OOM error message" (module
    # level, no def before it), Docker's API schema whose description of OOMKilled says a process "has been killed"
    "aa8_maxtext_traincompile_docstring", "aa9_moby_swagger_containerstate_oomkilled",
    # session 11, round ab (dev, scored on arrival at session 10's end; 6 of its 39 dev texts, 5 fixed since): a
    # DeepLabCut run that completed, then printed a loader thread's traceback, cut after its first line (no memory
    # word anywhere: a failure, but none of memory)
    "ab3_deeplabcut_end_of_training_1915",
    # (session 11's ac4 Javadoc class and session 12's aa3 cuVS C comment: no false alarm since session 14, the
    # first by the source-listing rule, the second by the refitted documentation model)
    # session 14, round ae (dev, scored on arrival first; 5 of its 41 dev texts, 2 fixed since): a script whose
    # comments quote a whole PyTorch OOM message with its figures (a job's output, by the figures), a Go test
    # fixture's `Reason: "OOMKilled", ExitCode: 137` in a pod literal (62% of its lines code-shaped, under 0.7),
    # PyCUDA's memory pool whose trace strings say "allocation still OOM after GC"
    "ae5_camerayolo_cleancache_comment_oom", "ae5_pycuda_mempool_oom_gc",
    # session 14: not new texts; the word and documentation models refitted with round ae moved two texts past
    # the gates' thresholds (a DeepSpeed log's cache-flush warning in an Anyscale PR, VALL-E's "OOM, continue"
    # loop), while two others came back under them (the cuDF and cuVS texts above)
    # (session 21: t5_anyscale_templates_cacheflush_pr252, which session 14's refit had moved past the gates, raised no
    # false alarm with the session's start code nor since (the review found it): removed from the list)
    # session 15: the models refitted with rounds af and ag moved the cuDF troubleshooting page above past the
    # gates again (VALL-E's loop went under them with round af and came back with round ag; BatchFlow's finder
    # notes the other way round)
    # (session 16: the refit with round ah took the cuDF page, VALL-E's loop and the Kubernetes task page's
    # OOMKilled demo back under the gates; removed from the list)
    # session 15, round ag (dev, scored on arrival first; 2 of its 19 dev texts): an English error-help page that
    # quotes a whole PyTorch OOM message with its figures, and a diagnosis guide that shows the message beside
    # the nvidia-smi table it asks for (documentation pages in the shape of a report)
    "ag4_theneuralbase_pytorch_oom_large_model_errpage", "ag4_ametric_diagnose_oom_nvidiasmi",
    # session 17: VALL-E's "OOM, continue" loop is past the documentation gate again after the refit in which two
    # TensorFlow BFC logs (kind "other") were relabelled recovered and so left the documentation class
    # session 18: the refit with round aj took VALL-E's loop and the Go pod fixture (ae5_ksm_podtest_oomkilled_fixture)
    # under the gates and moved BatchFlow's batch-size-finder notes past the documentation gate (18 -> 17)
    "u4_batchflow_optbs_744",
    # session 20, round am (dev, scored on arrival in session 19: 1 of its 8 dev benign texts): an error-reference
    # page (deadends.dev) that heads with a whole PyTorch OOM message and lists workarounds with success rates, whose
    # summary names "memory leak from accumulated gradients" (an English error-help page, as ag4's above)
    "am1_deadends_pytorch_cuda_oom_page",
    # session 21, round an (dev, scored on arrival in session 20: 1 of its 7 dev benign texts): a OneFormer question
    # in prose only whose "keeps reporting oom ... and the computing are sent to cpu" is detectron2's CPU fallback
    # (labelled recovered; the fallback is said only in the reporter's words, no log line of it)
    "an3_oneformer_87",
    # session 22, round ao (web pages, dev, scored on arrival with the session's start code: 4 of its 6 dev benign
    # texts; the refit that joined them cleared none): a Chinese Kubernetes design post whose dd demo fills a 64M
    # /dev/shm (a real failure provoked on purpose), a Chinese DataLoader tutorial quoting the shm message with
    # "pid xxx", an English guide to OOMKilled / exit 137 with a `kubectl describe` example. (The fourth, a Chinese
    # "fix it 100%" page quoting an error from the author's own training with its figures, was dropped from the
    # corpus on review: a failure without its cause is neither benign nor a report.)
    "ao1_ieevee_k8s_pod_shm_64m_design",
    "ao1_jishuzhan_num_workers_docker_shm_bus_error_howto", "ao3_devopsbeast_k8s_oomkilled_guide",
    # (session 22: the same refit moved the Anyscale PR's DeepSpeed cache-flush warning past the gates again; session
    # 28's refit, with the walkthrough's cases, took it back under them: off the list)
    # session 28: that refit moved a Chinese DeepSpeed introduction (which quotes ZeRO's memory savings and an OOM in
    # passing) past the gates: the models' words moved, no rule changed
    "t5_coloradmin_zh_deepspeed_intro",
})


# A regression guard on dev (in-sample for the rules), not a claim: 0.80 until 2026-11-26, when 113 new dev
# reports collected by helpers, first scored before any rule was written from them, came in at ~50% and
# brought dev to 0.795 after the rules written from them. 0.75 from the fourth session: 103 more dev
# reports from long-tail frameworks (38% and 37% right on arrival) brought dev to 0.772.
DEV_TOP1_FLOOR = 0.75


def test_mmcv_and_yolo_readings():
    mm = [f"2019-12-31 00:32:13,255 - INFO - Epoch [1][{i * 50}/23454]\tlr: 0.00050, time: 0.430, "
          f"memory: {4000 + i * 120}, loss: 5.1" for i in range(1, 30)]
    yo = [f"     {i}/299     {3 + i * 0.3:.3g}G    0.0574      3.93" for i in range(1, 30)]
    for lines in (mm, yo):
        ex = _explain("\n".join(lines + ["RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; "
                                         "11.91 GiB total capacity; 10.90 GiB already allocated; 8.00 MiB free; "
                                         "11.00 GiB reserved in total by PyTorch)"]))
        assert ex.hypotheses[0].category == "leak_in_code", lines[0]


def test_hog_with_nvidia_smi_in_the_log_is_other_process():
    """INDEX.json's nvidia_smi_during pasted after the traceback: the text now shows the other process."""
    index = json.loads((FIXTURES / "INDEX.json").read_text()) if (FIXTURES / "INDEX.json").exists() else None
    if index is None:
        pytest.skip("INDEX.json not present")
    case = next(c for c in index["cases"] if c["file"] == "hog_leaves_30MiB_then_model_to.txt")
    ex = _explain(_fixture(case["file"]) + "\n" + case["nvidia_smi_during"])
    assert ex.hypotheses[0].category == "other_process"
    assert "pid 817" in ex.hypotheses[0].evidence[-1] or any("pid 817" in e for e in ex.hypotheses[0].evidence)


def test_silver_items_are_well_formed_and_apart_from_the_gold_corpus():
    """Silver items train the prior only: each is labelled, linked, one per thread, and none is a gold
    case's thread or text (load_silver would drop it; the file holds only what it keeps)."""
    import json

    C = _corpus()
    lines = [json.loads(ln) for ln in C.SILVER.read_text(encoding="utf-8").splitlines() if ln.strip()]
    for item in lines:
        assert set(C.SILVER_KEYS) <= set(item), item.get("url")
        assert item["url"].startswith(("https://", "http://")) and item["category"] in CATEGORIES, item["url"]
        assert item["confidence"] in ("high", "medium") and item["text"].strip(), item["url"]
    assert len(C.load_silver()) == len(lines)


def test_thread_key_joins_forms_of_one_thread():
    C = _corpus()
    assert C.thread_key("https://github.com/a/b/issues/12#issuecomment-9") == C.thread_key("http://www.github.com/A/B/pull/12/")
    assert C.thread_key("https://discuss.pytorch.org/t/slug/1234/5") == C.thread_key("https://discuss.pytorch.org/t/1234")
    assert C.thread_key("https://discuss.pytorch.org/t/1234/5") == C.thread_key("https://discuss.pytorch.org/t/slug/1234")
    assert C.thread_key("https://stackoverflow.com/questions/5963/a-title") == C.thread_key("https://stackoverflow.com/q/5963")
    assert C.thread_key("https://github.com/a/b/issues/12") != C.thread_key("https://github.com/a/b/issues/13")


def test_cupy_figures_are_named_as_cupy_reports_them():
    from oomdoctor.render.explain import to_text
    text = to_text(_explain(_fixture("cupy_oom.txt")))
    assert "allocated by CuPy's pool so far: 0 bytes" in text and "allocated by PyTorch" not in text


def test_facts_asked_for_are_said_to_have_been_read_or_not():
    # a new user's walkthrough (session 25): `explain --here` printed the same as without it, ending with advice to
    # run --here; now it says what the deciding facts were where they were read, and drops the advice
    from oomdoctor.facts import Unavailable
    from oomdoctor.render.explain import to_text
    text = _fixture("hog_leaves_300MiB_then_alloc_1GiB.txt").splitlines()
    bare = to_text(explain_text(text))
    assert "explain --here LOG` reads these facts" in bare
    ex = explain_text(text, FactSet([Unavailable("sharing.processes", "NVML library not found")]))
    note = next(n for n in ex.notes if n.startswith("the facts that decide"))
    assert "sharing.processes: not available (NVML library not found)" in note and "probe.context: not read" in note
    assert "explain --here LOG` reads these facts" not in to_text(ex)
