"""GIVEN a log whose every line names its GPU ("device cuda:0", "GPU 0", RETURNN's "mem_usage:cuda:0 8.9GB") WHEN
explain reads its head (where the pre-filter hands such lines on for the environment hints) THEN no pattern runs on
them, and the answer is the same as testing every gate of every pattern one by one.

A walkthrough timed such logs at ~3 s/MB against ~0.2 s/MB (each line ran the gate tests of every hint in Python and
other_holder's regex, whose gates held "cuda:0"); structural checks here, timings in docs/benchmarks.md.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oomdoctor.explain import patterns as P
from oomdoctor.explain import prefilter as PF
from oomdoctor.explain.events import LogScanner, _decode
from oomdoctor.explain.gates import GateIndex

GPU_LINES = [
    "epoch 1 step {i} loss 4.{i} device cuda:0 ok",
    "epoch 1 step {i} loss 4.29 device GPU 0 ok",
    "ep 13 train, step {i}, ctc_4 4.363, ctc 4.293, num_seqs 10, max_size:time 225760, mem_usage:cuda:0 8.9GB, "
    "0.750 sec/step",
    "[rank0] gpu0 util {i}% device 0 temp 61C",
]


def _log(n: int = 3000) -> bytes:
    return "".join(GPU_LINES[i % len(GPU_LINES)].format(i=i) + "\n" for i in range(n)).encode()


def _scan(data: bytes):
    sc = LogScanner()
    sc.start_source("x.log")
    sc.feed(data)
    return sc.finish()


class _Counting:
    """Stands in for a compiled pattern and counts the searches run with it."""

    def __init__(self, pat, counter: list[int]) -> None:
        self._pat, self._counter = pat, counter

    def search(self, *a, **k):
        self._counter[0] += 1
        return self._pat.search(*a, **k)

    def __getattr__(self, name):
        return getattr(self._pat, name)


def _candidate_lines(data: bytes) -> set[int]:
    """Line starts of the head pre-filter's hits, as _index's loop finds them."""
    return {data.rfind(b"\n", 0, max(e - 1, 0)) + 1 for e in PF._prefilter(True).ends(data)}


def test_lines_that_name_the_gpu_are_candidates_but_reach_no_pattern(monkeypatch):
    data = _log()
    assert len(_candidate_lines(data)) == 3000  # the head's environment literals ("cuda:0", "GPU 0") take each line
    assert PF.index_block(data, 0, len(data), 0).lines == []  # ... but none holds a gate of any pattern
    hits = [0]
    monkeypatch.setattr(LogScanner, "_line_hit", lambda self, *a: hits.__setitem__(0, hits[0] + 1))
    _scan(data)
    assert hits[0] == 0  # the scanner reads none of them


def test_a_dense_span_keeps_its_lines_that_hold_a_gate():
    """Among the GPU lines: an OOM, a hint, a line whose gate is only in its lower case; each kept, with its number."""
    extra = {500: "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
             1200: "NVIDIA A100-SXM4-80GB  Driver Version: 535.104.05", 2000: "Memory keeps growing on cuda:0",
             2500: "All ranks use cuda:0"}
    lines = [extra.get(i, GPU_LINES[i % len(GPU_LINES)].format(i=i)) for i in range(3000)]
    data = "".join(x + "\n" for x in lines).encode()
    index = PF.index_block(data, 0, len(data), 0)
    assert [before + 1 for _, before in index.lines] == [501, 1201, 2001, 2501]  # 1-based line numbers
    assert all(data[ls:].startswith(lines[n].encode()) for ls, n in index.lines)


def test_without_the_block_pass_each_line_runs_no_regex(monkeypatch):
    """The scanner's own gate test (one pass a line) opens no hint on these lines either: no regex is searched."""
    monkeypatch.setattr(PF, "DENSE_FROM", 10**9)
    searches = [0]
    monkeypatch.setattr(P, "ENV_PATTERNS", {k: _Counting(v, searches) for k, v in P.ENV_PATTERNS.items()})
    scan = _scan(_log(400))
    assert searches[0] == 0
    assert scan.events == [] and scan.lines == 400


@pytest.mark.parametrize("line", [
    "all ranks use cuda:0 instead of their own GPU", "cuda:0 is full before training starts",
    "GPU 0 takes much more memory than the others", "every worker runs on GPU0", "gpu = 0 was occupied",
    "more memory on device 0 than on device 1", "3 contexts are created on gpu 0",
])
def test_other_holder_still_reads_gpu_lines_that_say_more(line):
    """other_holder's branches that name a GPU's index need a second word too; those lines still open it."""
    assert P.ENV_PATTERNS["other_holder"].search(line)
    assert "other_holder" in P.env_gates_open(line)
    assert _scan(f"{line}\n".encode()).env.get("other_holder")


def test_the_weak_gates_alone_open_nothing():
    for line in ("device cuda:0", "GPU 0 util 99%", "mem_usage:cuda:0 8.9GB", "Device 0: NVIDIA"):
        assert P.env_gates_open(line) == [], line


# -- the one-pass gates are the one-by-one gates -------------------------------------------------------------------

_PIECES = sorted({n for g in P.LINE_GATES.values() for n in g} | {n for g in P.ENV_GATES.items() for n in g[1]}
                 | {n for w, a in P.ENV_PAIRED_GATES.values() for n in w + a}
                 | {"Cuda:0", "GPU 0", "ALL ", "Each ", "FULL", "\u212a", "\u0130", "^[[31m", "^[[0m", " ", "x", "0"})
_TEXT = st.lists(st.one_of(st.sampled_from(_PIECES), st.text(max_size=3)), max_size=12).map("".join)
_SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_SETTINGS
@given(text=_TEXT)
def test_one_pass_finds_the_gates_the_in_tests_find(text):
    for gates in (P.LINE_GATES, P.ENV_GATES):
        want = {n for n, g in gates.items() if any(x in text for x in g)}
        assert GateIndex(gates, "ahocorasick").names_in(text) == want
        assert GateIndex(gates, "in").names_in(text) == want


@_SETTINGS
@given(text=_TEXT)
def test_env_gates_open_as_each_gate_passes(text):
    assert P.env_gates_open(text) == [n for n in P.ENV_PATTERNS if P.env_gate_passes(n, text)]


@_SETTINGS
@given(lines=st.lists(_TEXT, min_size=1, max_size=30))
def test_a_line_the_block_pass_leaves_out_opens_no_pattern(lines):
    """prefilter._gated looks for gate bytes in the raw and the lowered span; a line it leaves out must open nothing
    once decoded as the scanner decodes it (caret escapes taken out, str.lower() on any character)."""
    data = "\n".join(x.replace("\n", " ").replace("\r", " ") for x in lines).encode("utf-8", errors="replace")
    gated = PF._gated(data, 0, len(data))
    pos = 0
    for raw in data.split(b"\n"):
        text = _decode(raw)
        if pos not in gated:
            assert P.classify_line(text) is None and P.env_gates_open(text) == [], text
        pos += len(raw) + 1


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])  # it sets what it uses
@given(lines=st.lists(st.one_of(_TEXT, st.sampled_from(GPU_LINES), st.sampled_from([
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB",
    "NVIDIA A100-SXM4-80GB  Driver Version: 535.104.05", "memory keeps growing on cuda:0 every epoch",
    "Killed", "step 3 gpu memory allocated: 10.5 GiB"])), min_size=1, max_size=60))
def test_the_scan_is_the_same_with_and_without_the_block_pass(monkeypatch, lines):
    data = ("\n".join(x.replace("\n", " ").replace("\r", " ") for x in lines) + "\n").encode("utf-8", errors="replace")
    monkeypatch.setattr(PF, "DENSE_FROM", 0)
    monkeypatch.setattr(PF, "DENSE_BYTES", 10**9)
    with_pass = _scan(data)
    monkeypatch.setattr(PF, "DENSE_FROM", 10**9)
    without = _scan(data)
    assert [(e.kind, e.line, e.text, e.count) for e in with_pass.events] == \
        [(e.kind, e.line, e.text, e.count) for e in without.events]
    assert (with_pass.env, with_pass.readings, with_pass.lines) == (without.env, without.readings, without.lines)


@pytest.mark.parametrize("block", [4096, 65536, 1 << 20])
def test_threads_and_windows_give_the_same_scan(tmp_path, block):
    """A window may be dense (its gate-less candidate lines dropped) where another reader's is not: the scan is the
    same whatever the windows."""
    from oomdoctor.explain.read import iter_prepared_at

    lines = [GPU_LINES[i % len(GPU_LINES)].format(i=i) for i in range(6000)]
    lines[1000] = "Memory keeps growing on cuda:0 every epoch"
    lines[4000] = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of " \
                  "79.15 GiB of which 1.20 GiB is free."
    lines[5000:5000] = ["step 7 loss 0.5"] * 3000  # a sparse stretch: its windows are read line by line
    path = tmp_path / "gpu.log"
    path.write_text("\n".join(lines) + "\n")

    def scan(workers: int, size: int):
        sc = LogScanner()
        sc.start_source("gpu.log")
        for buf, start, end, index, offset, length in iter_prepared_at(str(path), PF.index_block, workers=workers,
                                                                       block_size=size):
            sc.feed(buf, start, end, index, offset, length)
        s = sc.finish()
        return [(e.kind, e.line, e.text, e.count) for e in s.events], s.env, s.readings, s.lines

    ref = scan(1, 1 << 20)
    assert ref[0] and ref[0][0][1] == 4001 and ref[1].get("growth")
    assert scan(3, block) == ref == scan(1, block)


def test_the_lowered_pass_does_not_cut_a_long_line():
    """The lowered pass reads a MiB at a time, cut at a line's end: a gate past the first MiB of a long line is seen."""
    data = b"x" * ((1 << 20) - 3) + b"cuda:0 is FULL " + b"y" * 100 + b"\n" + b"z\n" * 10 + b"ALL ranks use GPU 0\n"
    assert PF._gated(data, 0, len(data)) == {0, data.index(b"ALL")}
