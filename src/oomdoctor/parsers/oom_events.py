"""Stream a log (blocks of bytes) into OOM-like events, memory readings and environment hints.

Bounded memory whatever the input: lines are capped (by the reader) and here at `MAX_LINE`, an event
keeps at most `MAX_EVENT_TEXT` characters, repeated events are counted not stored, readings are
decimated past `MAX_READINGS` per series, and look-back context is the tail of the last block.

Speed: a 1 GB log must be explained within a few times the time of `grep -c` (bench/explain_stream.py).
So the per-byte work is one pre-filter pass in C: Hyperscan when installed (extra `fast`), else
Python's `re`; only candidate lines reach the detailed patterns. Pure: bytes in, data out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from oomdoctor.parsers import oom_patterns as P

MAX_LINE = 64 * 1024
MAX_EVENT_TEXT = 8 * 1024
MAX_EVENTS = 500
MAX_READINGS = 4096
MAX_SERIES = 16
FULL_READING_BYTES = 2 << 20  # readings are parsed everywhere in the first 2 MiB ...
SAMPLE_READING_BYTES = 16 << 10  # ... then in the first 16 KiB of later blocks:
SAMPLE_EVERY_BYTES = 8 << 20  # one sample per 8 MiB up to DENSE_SAMPLING_BYTES, then one per 64 MiB
DENSE_SAMPLING_BYTES = 64 << 20
LOOKBACK = 6 * 1024

# Kinds whose message continues on the next lines (old PyTorch messages wrap; kubectl folds lines).
_CONTINUED = {"torch_oom", "mps_oom", "tf_oom", "jax_oom", "hami_oom", "cupy_oom", "nccl_oom"}
_MSG_END = ("reserved by PyTorch but unallocated", "reserved in total by PyTorch", " cached)",
            "ALLOC_CONF", "Tried to allocate")
_NOT_CONTINUATION = ("Traceback", "File \"", "During handling", "The above exception", "[rank")

_PREFILTER_EXTRA = (rb"(?i:code|status)\W{0,8}137\b",)  # "Exit Code:    137" (kubectl describe)


@dataclass
class OomEvent:
    kind: str
    line: int
    text: str
    numbers: dict[str, int] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    count: int = 1


@dataclass
class LogScan:
    """Everything the classifier needs from one or more logs."""

    events: list[OomEvent]
    readings: dict[str, list[tuple[float, int]]]  # label -> [(step or line, bytes)]
    env: dict[str, list[str]]
    lines: int = 0
    bytes: int = 0
    dropped_events: int = 0


class _Prefilter:
    """Offsets of candidate matches in a block: Hyperscan if present, else one C `find` pass per literal."""

    def __init__(self, use_hyperscan: bool = True, literals: tuple[bytes, ...] = P.PREFILTER_LITERALS) -> None:
        self._literals = literals
        self._extra = re.compile(b"|".join(_PREFILTER_EXTRA))
        self._hs = None
        if not use_hyperscan:
            return
        try:  # optional accelerator (pip install 'oomdoctor[fast]')
            import hyperscan  # type: ignore[import-not-found]

            pats = [re.escape(x) for x in literals] + list(_PREFILTER_EXTRA)
            db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
            db.compile(expressions=[re.sub(rb"\(\?i:([^)]*)\)", rb"(?:\1)", p) for p in pats],
                       ids=list(range(len(pats))), elements=len(pats),
                       flags=[hyperscan.HS_FLAG_CASELESS if b"(?i" in p else 0 for p in pats])
            self._hs = db
        except Exception:  # noqa: BLE001 - no wheel for this platform, or an old library: fall back
            self._hs = None

    @property
    def engine(self) -> str:
        return "hyperscan" if self._hs is not None else "find"

    def ends(self, block: bytes, start: int = 0, end: int | None = None) -> list[int]:
        end = len(block) if end is None else end
        out: list[int] = []
        if self._hs is not None:
            self._hs.scan(memoryview(block)[start:end],
                          match_event_handler=lambda _i, _f, to, _fl, _c: out.append(to + start))
            out.sort()
            return out
        # bytes.find is a C two-way/memchr search (GB/s); a regex alternation of these literals in
        # Python's re is ~100x slower (bench/explain_stream.py --fallback).
        find = block.find
        for lit in self._literals:
            n = len(lit)
            pos = find(lit, start, end)
            while pos >= 0:
                out.append(pos + n)
                pos = find(lit, pos + n, end)
        pos = find(b"137", start, end)  # exit code/status 137: check the words just before
        while pos >= 0:
            ls = block.rfind(b"\n", start, pos) + 1
            if self._extra.search(block, max(start, ls, pos - 24), min(end, pos + 4)):
                out.append(pos + 3)
            pos = find(b"137", pos + 3, end)
        out.sort()
        return out


_PREFILTERS: dict[bool, _Prefilter] = {}


def prefilter_engine() -> str:
    return _prefilter().engine


def _prefilter(with_env: bool = True) -> _Prefilter:
    """The pre-filter for event lines, plus environment-hint lines when `with_env`."""
    pf = _PREFILTERS.get(with_env)
    if pf is None:
        pf = _PREFILTERS[with_env] = _Prefilter(
            literals=P.PREFILTER_LITERALS if with_env else P.EVENT_LITERALS)
    return pf


_NUMPY: list = []  # [numpy module or None, reusable bool buffer], filled on the first large block


def _count_newlines(buf: bytes, start: int, end: int) -> int:
    """Newlines in buf[start:end]. numpy's vectorised compare (into a reused buffer) is 3-5x faster
    than bytes.count on large blocks (bench/explain_stream.py); imported only for large logs, optional."""
    n = end - start
    if n >= 1 << 22:
        if not _NUMPY:
            try:
                import numpy

                _NUMPY.extend([numpy, numpy.empty(0, dtype=bool)])
            except ImportError:
                _NUMPY.extend([None, None])
        np, out = _NUMPY
        if np is not None:
            if out.size < n:
                out = _NUMPY[1] = np.empty(n, dtype=bool)
            view = out[:n]
            np.equal(np.frombuffer(buf, np.uint8, count=n, offset=start), 10, out=view)
            return int(np.count_nonzero(view))
    return buf.count(b"\n", start, end)


def _decode(b: bytes) -> str:
    return b[:MAX_LINE].decode("utf-8", errors="replace").rstrip("\r")


class LogScanner:
    """Feed blocks of whole lines (bytes); `finish()` gives the LogScan."""

    def __init__(self) -> None:
        self._events: dict[tuple[str, str, str], OomEvent] = {}
        self._readings: dict[str, list[tuple[float, int]]] = {}
        self._stride: dict[str, int] = {}
        self._skip: dict[str, int] = {}
        self._env: dict[str, list[str]] = {}
        self._line = 0  # lines consumed before the current block
        self._bytes = 0
        self._tail = b""  # end of the previous block, for look-back context
        self._pending: tuple[OomEvent, int] | None = None  # (event, lines still to append)
        self._dropped = 0
        self._skip_to = 0
        self._start = self._end = 0
        self._src_bytes = 0
        self._next_sample = 0
        self.source = ""

    # -- input ----------------------------------------------------------------------------------
    def start_source(self, name: str) -> None:
        """The following blocks come from another file: line numbers restart, context is cut."""
        if self._pending is not None:
            ev, _ = self._pending
            self._pending = None
            self._finish_event(ev)
        self.source, self._line, self._tail, self._src_bytes, self._next_sample = name, 0, b"", 0, 0

    def feed(self, block: bytes, start: int = 0, end: int | None = None) -> None:
        """Scan the whole lines in block[start:end] (offsets avoid copying a reader's buffer)."""
        end = len(block) if end is None else end
        if end <= start:
            return
        self._start, self._end = start, end
        self._skip_to = start
        if self._pending is not None:
            self._skip_to = self._continue(block, start)
        if self._src_bytes < FULL_READING_BYTES:
            self._scan_readings(block[start:min(end, start + FULL_READING_BYTES - self._src_bytes)])
        elif self._src_bytes >= self._next_sample:
            self._scan_readings(block[start:min(end, start + SAMPLE_READING_BYTES)])
            step = SAMPLE_EVERY_BYTES if self._src_bytes < DENSE_SAMPLING_BYTES else 8 * SAMPLE_EVERY_BYTES
            self._next_sample = self._src_bytes + step
        lineno, pos = self._line, start
        last_line_start = -1
        for hit in _prefilter(self._src_bytes < P.ENV_BYTES).ends(block, start, end):
            ls = max(block.rfind(b"\n", start, max(hit - 1, start)) + 1, start)
            if ls == last_line_start or ls < self._skip_to:
                continue
            last_line_start = ls
            lineno += _count_newlines(block, pos, ls)
            pos = ls
            le = block.find(b"\n", ls, end)
            le = end if le < 0 else le
            self._line_hit(block, ls, le, lineno + 1)
        self._line += _count_newlines(block, start, end)
        if block[end - 1:end] != b"\n":
            self._line += 1
        self._bytes += end - start
        self._src_bytes += end - start
        self._tail = block[max(start, end - LOOKBACK):end]

    def feed_lines(self, lines: Iterable[str], chunk: int = 1 << 20) -> None:
        buf: list[str] = []
        size = 0
        for line in lines:
            line = line if line.endswith("\n") else line + "\n"
            buf.append(line)
            size += len(line)
            if size >= chunk:
                self.feed("".join(buf).encode("utf-8", errors="replace"))
                buf, size = [], 0
        if buf:
            self.feed("".join(buf).encode("utf-8", errors="replace"))

    # -- per line -------------------------------------------------------------------------------
    def _line_hit(self, block: bytes, ls: int, le: int, lineno: int) -> None:
        text = _decode(block[ls:le])
        self._env_scan(text)
        kind = P.classify_line(text)
        if kind is None:
            return
        ev = OomEvent(kind=kind, line=lineno, text=text[:MAX_EVENT_TEXT], source=self.source)
        before = self._lookback(block, ls)
        ev.details.update(_context(before, text))
        if self._src_bytes >= P.ENV_BYTES:  # past the head of the log: hints printed just before the error
            for line in before.splitlines()[-40:]:
                self._env_scan(line)
        if kind in _CONTINUED and not any(m in text for m in _MSG_END[:4]):
            self._pending = (ev, 8)
            self._skip_to = self._continue(block, le + 1)
        else:
            self._finish_event(ev)

    def _env_scan(self, text: str) -> None:
        for name, pat in P.ENV_PATTERNS.items():
            m = pat.search(text)
            if m:
                vals = self._env.setdefault(name, [])
                groups = [g for g in m.groups() if g] if m.groups() else []
                if name.startswith("smi_"):
                    v = " ".join(groups)  # "pid MiB" / "used free"
                else:
                    v = (groups[0] if groups else m.group(0))[:120]
                if v not in vals and len(vals) < 8:
                    vals.append(v)

    def _continue(self, block: bytes, pos: int) -> int:
        """Append continuation lines of the pending event from `pos`; returns where it stopped."""
        assert self._pending is not None
        ev, left = self._pending
        while left > 0 and pos < self._end:
            le = block.find(b"\n", pos, self._end)
            le = self._end if le < 0 else le
            line = _decode(block[pos:le]).strip()
            kind = P.classify_line(line)
            body = line.startswith("Tried to allocate") and "Tried to allocate" not in ev.text  # 1.x wraps here
            if not line or line.startswith(_NOT_CONTINUATION) or (kind not in (None, "generic_oom") and not body):
                left = 0
                break
            self._env_scan(line)
            ev.text = (ev.text + " " + line)[:MAX_EVENT_TEXT]
            left -= 1
            pos = le + 1
            if any(m in line for m in _MSG_END[:4]):
                left = 0
        if left > 0 and pos >= self._end:
            self._pending = (ev, left)  # the message goes on in the next block
            return pos
        self._pending = None
        self._finish_event(ev)
        return pos

    def _lookback(self, block: bytes, ls: int) -> str:
        lo = max(self._start, ls - LOOKBACK)
        chunk = block[lo:ls]
        if lo == self._start and len(chunk) < LOOKBACK:
            chunk = self._tail[-(LOOKBACK - len(chunk)):] + chunk if self._tail else chunk
        return chunk.decode("utf-8", errors="replace")

    def _finish_event(self, ev: OomEvent) -> None:
        ev.numbers, det = P.extract(ev.kind, ev.text)
        ev.details.update(det)
        key = (ev.kind, _norm(ev.text), ev.source)
        old = self._events.get(key)
        if old is not None:
            old.count += 1
        elif len(self._events) < MAX_EVENTS:
            self._events[key] = ev
        else:
            self._dropped += 1

    # -- readings -------------------------------------------------------------------------------
    def _scan_readings(self, window: bytes) -> None:
        """Memory figures printed per step. Two stages: a literal anchor, then the full pattern on that line."""
        text = window.decode("utf-8", errors="replace")
        base, pos, last = self._line, 0, -1
        for m in P.READING_ANCHOR.finditer(text):
            ls = text.rfind("\n", 0, m.start()) + 1
            if ls == last:
                continue
            last = ls
            le = text.find("\n", m.end())
            line = text[ls:le if le >= 0 else len(text)]
            r = P.parse_reading(line)
            if r is None or P.classify_line(line) is not None:
                continue  # an OOM message is not a reading
            base += text.count("\n", pos, ls)
            pos = ls
            label, value, step = r
            if self.source:
                label = f"{self.source}:{label}"
            self._add_reading(label, float(step) if step is not None else float(base + 1), value)

    def _add_reading(self, label: str, x: float, value: int) -> None:
        series = self._readings.get(label)
        if series is None:
            if len(self._readings) >= MAX_SERIES:
                return
            series = self._readings[label] = []
            self._stride[label], self._skip[label] = 1, 0
        self._skip[label] += 1
        if self._skip[label] < self._stride[label]:
            return
        self._skip[label] = 0
        series.append((x, value))
        if len(series) > MAX_READINGS:  # keep every other reading: the trend survives, memory does not grow
            del series[1::2]
            self._stride[label] *= 2

    def finish(self) -> LogScan:
        if self._pending is not None:
            ev, _ = self._pending
            self._pending = None
            self._finish_event(ev)
        events = sorted(self._events.values(), key=lambda e: (e.source, e.line))
        return LogScan(events=events, readings=self._readings, env=self._env, lines=self._line,
                       bytes=self._bytes, dropped_events=self._dropped)


_DIGITS = re.compile(r"\d+")


def _norm(text: str) -> str:
    """Repeats of one error (per rank, per retry) differ only in pids/timestamps/prefixes."""
    i = text.find("Error")
    core = text[i:] if i >= 0 else text
    return _DIGITS.sub("#", core[:400])


_CALL_SITES = (
    ("context creation (torch.cuda.init / lazy init)", ("_lazy_init", "torch.cuda.init", "cudaGetDeviceCount", "in set_device", "torch._C._cuda_init", "cuDevicePrimaryCtxRetain", "cuCtxCreate")),
    ("pinned host memory (pin_memory)", ("pin_memory",)),
    ("NCCL communicator set-up", ("init_process_group", "ProcessGroupNCCL", "in barrier", "_new_process_group")),
    ("cuBLAS/cuDNN handle creation", ("cublasCreate", "cudnnCreate", "getCurrentCUDABlasHandle")),
    ("moving the model or a tensor to the GPU (.to() / .cuda())", ("in convert", "in _apply", "in to\n", ".to(", ".cuda(", "in cuda\n")),
)


def _context(before: str, text: str) -> dict[str, Any]:
    """Where the error was raised (from the traceback just above it)."""
    out: dict[str, Any] = {}
    recent = before[-3000:]
    if "DataLoader worker process" in recent or "_worker_loop" in recent or "DataLoader worker" in text:
        out["in_dataloader_worker"] = True
    frames = ""
    if "Traceback" in recent:
        frames = recent[recent.rfind("Traceback"):] + "\n"
    frames += text  # the message itself may name the call (cuDevicePrimaryCtxRetain, cublasCreate)
    for site, needles in _CALL_SITES:
        if any(n in frames for n in needles):
            out["call_site"] = site
            break
    return out
