"""GIVEN the same logs WHEN scanned by the fast reading scan and by the original whole-window regex scan
THEN events, line numbers, numbers, readings, environment hints and line counts are identical.

The reference below is the pre-optimisation `_scan_readings` (the anchor regex run over the whole
decoded window, classify_line asked of every line); the fast one finds lines with READING_LITERALS in
one C pass first and asks classify_line only of the pre-filter's lines.
"""

from __future__ import annotations

import random
from dataclasses import asdict
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from oomdoctor.explain import patterns as P
from oomdoctor.explain.events import LogScanner
from oomdoctor.explain.read import iter_blocks

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"


class _ReferenceScanner(LogScanner):
    def _scan_readings(self, block: bytes, lo: int, hi: int, line0: int, index: object) -> None:
        text = block[lo:hi].decode("utf-8", errors="replace")
        base, pos, last = line0, 0, -1
        for m in P.READING_ANCHOR.finditer(text):
            ls = text.rfind("\n", 0, m.start()) + 1
            if ls == last:
                continue
            last = ls
            le = text.find("\n", m.end())
            line = text[ls:le if le >= 0 else len(text)]
            r = P.parse_reading(line)
            if r is None or P.classify_line(line) is not None:
                continue
            base += text.count("\n", pos, ls)
            pos = ls
            label, value, step = r
            if self.source:
                label = f"{self.source}:{label}"
            self._add_reading(label, float(step) if step is not None else float(base + 1), value)


def _same(data: bytes) -> None:
    for block in (len(data) or 1, 4096, 97):
        lines = data.splitlines(keepends=True)
        chunks, cur = [], b""
        for ln in lines:  # whole-line blocks of about `block` bytes
            cur += ln
            if len(cur) >= block:
                chunks.append(cur)
                cur = b""
        chunks.append(cur)
        fast, ref = LogScanner(), _ReferenceScanner()
        for s in (fast, ref):
            s.start_source("log")
            for c in chunks:
                s.feed(c)
        a, b = fast.finish(), ref.finish()
        assert [asdict(e) for e in a.events] == [asdict(e) for e in b.events]
        assert (a.readings, a.env, a.lines, a.bytes) == (b.readings, b.env, b.lines, b.bytes)


def _corpus_texts() -> list[bytes]:
    yaml = YAML(typ="safe")
    out = [yaml.load(p.read_text())["text"].encode() for p in sorted((ROOT / "tests" / "corpus" / "reports").glob("*.yaml"))]
    out += [p.read_bytes() for p in sorted((FIXTURES / "real-oom").glob("*.txt"))]
    out += [p.read_bytes() for p in sorted((FIXTURES / "seeds").glob("*.txt"))]
    return out


def test_corpus_fixtures_and_seeds_scan_identically():
    texts = _corpus_texts()
    assert len(texts) >= 68
    for t in texts:
        _same(t)


_READING_LINES = (
    "step {i} loss 0.{i} lr 3e-4 mem {g}.{i} GiB", "iter {i}: memory_allocated={m} MiB reserved: {g} GB",
    "Epoch [1][{i}/2000] lr: 1e-4, memory: {m}, loss: 0.3", "  {i}/300  {g}.52G  0.0415 0.02",
    "GPU_mem {g}.1G batch {i}", "max_memory_allocated (MB): {m}", "MEM {g} GiB CUDA out of memory here",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {g}.00 GiB", "allocated {m}MB at step={i}",
    "system item temperature {i}", "INFO processed batch {i} tokens/s {m}", "Reserved memory grows: {g} GB",
    "ALLOC {m} M", "2 GiB \u00e9\u00e8 memory {g} MiB", "",
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(_READING_LINES) - 1), st.integers(0, 9999)), max_size=80),
       st.binary(max_size=40))
def test_generated_logs_scan_identically(rows, noise):
    text = "\n".join(_READING_LINES[k].format(i=i, g=i % 80, m=i * 7) for k, i in rows) + "\n"
    _same(text.encode() + noise + b"\n" + text.encode("utf-8"))


def test_large_generated_log_through_the_reader_scans_identically(tmp_path):
    rnd = random.Random(1)
    rows = [_READING_LINES[rnd.randrange(len(_READING_LINES))].format(i=i, g=i % 80, m=i * 7)
            for i in range(120_000)]
    path = tmp_path / "big.log"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    results = []
    for cls in (LogScanner, _ReferenceScanner):
        s = cls()
        s.start_source(str(path))
        for buf, start, end in iter_blocks(str(path), block_size=1 << 20):
            s.feed(buf, start, end)
        scan = s.finish()
        results.append(([asdict(e) for e in scan.events], scan.readings, scan.env, scan.lines))
    assert results[0] == results[1]
    assert sum(len(v) for v in results[0][1].values()) > 100
