"""doctor and explain recognise log lines with one mechanism: same events, same kinds, same numbers.

Also: the kind table (explain/kinds.py) agrees with explain's rules, and doctor's log reading is
streamed and bounded like explain's.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

import oomdoctor.checks.workload  # noqa: F401 - registers WRK001 whatever ran before
from builders import a100, make_facts
from oomdoctor.checks.registry import CHECKS
from oomdoctor.cli import main
from oomdoctor.collectors import workload as workload_collector
from oomdoctor.collectors.machine import collect_bundle
from oomdoctor.explain import patterns as oom_patterns
from oomdoctor.explain.events import LogScanner
from oomdoctor.explain.facts import as_record, records_from_lines
from oomdoctor.explain.kinds import KINDS, MARKERS, category_hint
from oomdoctor.explain.rules import Board
from oomdoctor.explain.rules_by_kind import event_rules

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "tests" / "fixtures" / "real-oom"
SEED = ROOT / "examples" / "seed-a100-k8s"
CORPUS = ROOT / "tests" / "corpus" / "reports"


def _bundle_with_logs(tmp_path: Path, logs: list[Path]) -> Path:
    bundle = tmp_path / "bundle"
    shutil.copytree(SEED, bundle)
    for p in logs:
        shutil.copy(p, bundle / "logs" / p.name)
    return bundle


def _json(capsys, argv: list[str]) -> dict:
    assert main(argv) in (0, 1)
    return json.loads(capsys.readouterr().out)


def test_every_event_explain_reads_in_a_bundle_doctor_reports(tmp_path, capsys):
    files = sorted(p for p in REAL.glob("*.txt"))
    assert files
    bundle = _bundle_with_logs(tmp_path, files)
    explained = _json(capsys, ["explain", "--bundle", str(bundle), "--format", "json"])
    doctor = _json(capsys, ["doctor", "--bundle", str(bundle), "--format", "json"])
    facts = next(layer["facts"] for layer in doctor["layers"] if "workload.oom_events" in layer["facts"])
    reported = {(e["file"], e["line"], e["kind"]): e for e in facts["workload.oom_events"]}
    from_logs = [e for e in explained["events"] if str(e["source"]).startswith("logs/")]
    assert len(from_logs) >= len(files) - 1  # every real report carries at least one event
    for e in from_logs:
        got = reported.get((e["source"], e["line"], e["kind"]))
        assert got is not None, f"doctor missed {e['source']}:{e['line']} {e['kind']}"
        assert got["numbers"] == e["numbers"] and got["count"] == e["count"]
        assert got["text"] == e["text"][:len(got["text"])]
    assert {e["name"] for e in facts["workload.logs"]} == {p.name for p in files} | {"seed-traceback.txt"}
    wrk = [f for f in doctor["findings"] if f["id"] == "WRK001"]
    kinds_in_titles = {k for f in wrk for k in KINDS if f"({k})" in f["title"]}
    assert {"torch_oom", "cuda_driver_oom", "cupy_oom", "jax_oom"} <= kinds_in_titles


def test_bundle_logs_are_streamed_past_a_block_and_capped(tmp_path, monkeypatch):
    filler = b"step 1 loss 0.25 lr 1e-4 nothing to see\n" * 300_000  # ~12 MiB: more than one 8 MiB block
    log = tmp_path / "big.log"
    log.write_bytes(filler + b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
                    b"total capacity of 79.25 GiB of which 1.00 GiB is free.\n" + filler)
    bundle = _bundle_with_logs(tmp_path, [log])
    events = collect_bundle(bundle).value("workload.oom_events")
    big = [e for e in events if e["file"] == "logs/big.log"]
    assert [(e["kind"], e["line"]) for e in big] == [("torch_oom", 300_001)]
    assert big[0]["numbers"]["requested_bytes"] == 2 * 1024**3
    monkeypatch.setattr(workload_collector, "MAX_LOG_BYTES", 1 << 20)
    facts = collect_bundle(bundle)
    assert not [e for e in facts.value("workload.oom_events") if e["file"] == "logs/big.log"]
    entry = next(x for x in facts.value("workload.logs") if x["name"] == "big.log")
    assert entry["bytes"] == log.stat().st_size and 0 < entry["scanned_bytes"] <= 1 << 20


def test_secrets_in_log_lines_are_redacted_in_the_fact(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("RuntimeError: CUDA error: out of memory (HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz123456)\n")
    events = collect_bundle(_bundle_with_logs(tmp_path, [log])).value("workload.oom_events")
    text = next(e["text"] for e in events if e["file"] == "logs/train.log")
    assert "hf_abcdefghijklmnopqrstuvwxyz123456" not in text and "CUDA error: out of memory" in text


def test_kind_table_covers_every_pattern():
    assert {k for k, _ in oom_patterns.LINE_PATTERNS} == set(KINDS)
    assert MARKERS == {"vcuda_line", "oom_recovered", "autobatch_settled", "oom_caught"}
    # the recovery flags of the kind table: a library's own recovery line covers no other event; only kills
    # from outside the process are never recovered
    from oomdoctor.explain.kinds import NEVER_RECOVERED, SELF_CONTAINED
    assert SELF_CONTAINED == {"oom_caught"}
    assert NEVER_RECOVERED == {"kernel_oom", "slurm_oom_state", "slurm_oom_kill", "k8s_oomkilled", "k8s_evicted", "dataloader_killed", "ray_oom"}


# Lines for kinds the corpus may not hold, so every kind of the table is held to explain's rules.
EXTRA_LINES = [
    "[HAMI-core ERROR (pid:1 thread=2 allocator.c:52)]: Device 0 OOM 10779361280 / 10737418240",
    "[HAMI-core Warn(12:34:allocator.c:121)]: cuMemoryAllocate failed res=2",
    "NCCL WARN Cuda failure 'out of memory'",
    "RuntimeError: MPS backend out of memory (MPS allocated: 17.00 GB, other allocations: 1.00 GB, max allowed: 18.13 GB).",
    "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`",
    "ValueError: Free memory on device (10.1/79.1 GiB) on startup is less than desired GPU memory utilization (0.9, 71.2 GiB).",
    "RuntimeError: [enforce fail at alloc_cpu.cpp:114] data. DefaultCPUAllocator: not enough memory",
    "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with shape[1024,1024] on /job:localhost/device:CPU:0 by allocator cpu",
    "CUBLAS_STATUS_NOT_SUPPORTED when calling cublasGemmEx",
    "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.",
    "NVRM: Xid (PCI:0000:3b:00): 31, pid=1, MMU Fault",
    "I1122 vcuda hijack_call.c:120 loaded",
    "Killed",
    "State: OUT_OF_MEMORY (exit code 0)",
    "Warning  Evicted  2m  kubelet  The node was low on resource: memory. Threshold quantity: 100Mi, available: 52Mi.",
    "RuntimeError: rmm::out_of_memory: RMM failure at:/rmm/mr/device/cuda_memory_resource.hpp:70: out of memory",
    "RuntimeError: NCCL Error 2: unhandled system error",
    "OSError: [Errno 28] No space left on device",
    "There is a GPU memory leak in the evaluation loop",
    "Epoch 0: Batch size 512 failed, trying batch size 256",
    "Bus error (core dumped)",
    "AutoBatch: Using batch-size 8 for CUDA:0 6.32G/14.75G (43%) \u2705",
    "[TensorRT] ERROR: Tactic Device request: 2304MB Available: 1536MB. Device memory is insufficient to use tactic.",
]


def _texts() -> list[str]:
    from ruamel.yaml import YAML

    y = YAML(typ="safe")
    out = [y.load(p.read_text(encoding="utf-8"))["text"] for p in sorted(CORPUS.glob("*.yaml"))]
    out += [p.read_text(errors="replace") for p in sorted(REAL.glob("*.txt"))] if REAL.is_dir() else []
    return out + EXTRA_LINES


def test_category_hint_is_what_explains_rules_say_before_numbers_and_environment():
    seen = set()
    for text in _texts():
        scanner = LogScanner()
        scanner.feed_lines(text.splitlines())
        for ev in scanner.finish().events:
            seen.add(ev.kind)
            if ev.kind in ("torch_oom", "mps_oom") and ev.numbers:
                continue  # the allocator's numbers refine it (WRK001 / explain_rules.torch_oom)
            board = Board()
            event_rules(ev, board, {})
            top = max(board.scores.items(), key=lambda kv: kv[1])[0] if board.scores else None
            assert category_hint(ev.kind, ev.details, ev.text) == top, (ev.kind, ev.text[:120])
    assert seen == set(KINDS), set(KINDS) - seen


def test_records_written_by_hand_or_by_an_older_oomdoctor_are_read_again():
    old = {"file": "logs/a.log", "line": 3, "kind": "cuda_oom",  # oom_lines.py's name for the allocator
           "text": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                   "capacity of 79.25 GiB of which 1.00 GiB is free. Process 22 has 60.00 GiB memory in use."}
    rec = as_record(old)
    assert rec["kind"] == "torch_oom" and rec["numbers"]["requested_bytes"] == 2 * 1024**3
    assert rec["details"]["other_processes"] == [{"pid": 22, "bytes": 60 * 1024**3}]
    assert as_record({"text": "all fine"}) is None and as_record("x") is None
    new = records_from_lines([old["text"]], file="logs/a.log")[0]
    findings = [list(CHECKS["WRK001"].fn(make_facts(driver__gpus=[a100()], workload__oom_events=[e]))) for e in (old, new)]
    assert [(f[0].category, f[0].severity) for f in findings] == [(findings[1][0].category, findings[1][0].severity)] * 2
    assert findings[0][0].category.value == "other_process"


def test_repeated_lines_count_in_the_finding():
    line = "RuntimeError: CUDA error: out of memory"
    events = records_from_lines([line, "retrying", line, line])
    assert len(events) == 1 and events[0]["count"] == 3
    f = list(CHECKS["WRK001"].fn(make_facts(driver__gpus=[a100()], workload__oom_events=events)))
    assert f[0].title.startswith("3 log line(s)") and f[0].category.value == "context_or_driver"


_JSONISH = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=40),
                        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=3),
                        max_leaves=12)
_ENTRY = st.fixed_dictionaries({}, optional={
    "kind": st.sampled_from(sorted(KINDS)) | st.text(max_size=12), "text": st.sampled_from(EXTRA_LINES) | st.text(max_size=80),
    "numbers": st.dictionaries(st.sampled_from(["total_bytes", "reserved_bytes", "allocated_bytes"]), _JSONISH, max_size=3) | _JSONISH,
    "details": st.dictionaries(st.sampled_from(["xid", "status", "other_processes", "in_dataloader_worker"]), _JSONISH, max_size=3) | _JSONISH,
    "count": _JSONISH, "line": _JSONISH, "file": _JSONISH})


@settings(max_examples=300, deadline=None)
@given(st.lists(_ENTRY | _JSONISH, max_size=4))
def test_odd_fact_entries_never_break_the_workload_check(entries):
    for e in entries:
        as_record(e)
    list(CHECKS["WRK001"].fn(make_facts(driver__gpus=[a100()], workload__oom_events=entries)))


def test_diff_names_the_event_kinds_of_each_side():
    from oomdoctor.analysis.diff_notes import explain as note

    a = records_from_lines(["RuntimeError: CUDA error: out of memory"] * 2)
    b = records_from_lines(["[HAMI-core ERROR (pid:1 thread=2 allocator.c:52)]: Device 0 OOM 10779361280 / 10737418240"])
    text = note("workload.oom_events", a, b)
    assert "A: cuda_driver_oom -> context_or_driver x2;" in text and "B: hami_oom -> gpu_sharing_limit)" in text
    assert "A: none" in note("workload.oom_events", [], b)
