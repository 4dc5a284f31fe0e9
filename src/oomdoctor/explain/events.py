"""Stream a log (blocks of bytes) into OOM-like events, memory readings and environment hints.

Bounded memory whatever the input: lines are capped (by the reader) and here at `MAX_LINE`, an event
keeps at most `MAX_EVENT_TEXT` characters, repeated events are counted not stored, readings are
decimated past `MAX_READINGS` per series, and look-back context is the tail of the last block.

Speed: the per-byte work (candidate lines, line counts) is in oom_prefilter, in C; only candidate
lines reach the detailed patterns here. Pure: bytes in, data out.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from oomdoctor.explain import patterns as P
from oomdoctor.explain.figures import gap_key
from oomdoctor.explain.framework import relabel_xla
from oomdoctor.explain.kubernetes import k8s_reasons
from oomdoctor.explain.mentions import (
    CJK_GENERAL,
    CJK_OWN_RUN,
    EXAMPLE_INTRO,
    TITLE_MAX,
    title_like,
    underlines,
)
from oomdoctor.explain.prefilter import (  # noqa: F401 - re-exported for benches and tests
    _PREFILTERS,
    CARET_ESCAPE,
    BlockIndex,
    _count_newlines,
    _Prefilter,
    _prefilter,
    index_block,
    prefilter_engine,
    reading_line_starts,
)

MAX_LINE = 64 * 1024
HEAD = MAX_LINE // 2  # as read.HEAD / read.TAIL (explain.read is the reader; this module does not import it)
TAIL = MAX_LINE - HEAD - 1
MAX_EVENT_TEXT = 8 * 1024
MAX_EVENTS = 500
MAX_READINGS = 4096
MAX_SERIES = 16
FULL_READING_BYTES = 2 << 20  # readings are parsed everywhere in the first 2 MiB ...
SAMPLE_READING_BYTES = 16 << 10  # ... then in 16 KiB from the first line start at or after each
SAMPLE_EVERY_BYTES = 8 << 20  # sample point: one per 8 MiB up to DENSE_SAMPLING_BYTES, then one per 64 MiB
DENSE_SAMPLING_BYTES = 64 << 20
LOOKBACK = 6 * 1024
# What the text prior and the no-event fallback read (explain/textmodel.py, rank.py): each source's
# first SAMPLE_HEAD bytes and its last LOOKBACK bytes, for at most MAX_SAMPLED_SOURCES sources.
SAMPLE_HEAD = 16 * 1024
MAX_SAMPLED_SOURCES = 8

# Kinds whose message continues on the next lines (old PyTorch messages wrap; kubectl folds lines).
MAX_WRAPPED_BFC = 20_000  # lines of wrapped BFC warnings remembered (LogScan.bfc_wrapped): the first half and the
# last half seen (readers look only at a log's head and tail samples), so memory stays bounded in any storm
_CONTINUED = {"torch_oom", "mps_oom", "tf_oom", "jax_oom", "hami_oom", "cupy_oom", "nccl_oom"}
_MSG_END = ("reserved by PyTorch but unallocated", "reserved in total by PyTorch", " cached)",
            "ALLOC_CONF", "Tried to allocate")
_NOT_CONTINUATION = ("Traceback", "File \"", "During handling", "The above exception", "[rank")
# What a wrapped allocator message goes on with (a terminal, a notebook or kubectl folds it): the
# message's own phrases, or a size near the start of the line. Anything else (the next log line, a
# progress bar, a warning) is not part of the event, whatever follows the message.
_CONTINUATION = re.compile(
    r"(?i)^[(\[]*(?:tried to allocate|gpu \d|of the allocated|including non-pytorch|process \d+ has|this process has|"
    r"if reserved|see documentation|documentation for memory|(?:pytorch_)?cuda_alloc_conf|pytorch_mps_|"
    r"use pytorch_mps|total capac|memory in use|reserved|allocated|free\b|cached\)|already allocated|"
    r"\{\{node|node \S+\}\}|hint: if you want|report_tensor_allocations|\[op:|op:|"
    r"cuda kernel errors|for debugging consider|compile with|and type \w+ on|on /job:|by allocator|"
    r"with shape|mps allocated|other allocations|max allowed|bytes\)|\(allocated so far|if the cause is memory fragmentation|"
    # the cudaMallocAsync backend's last figure, on the line after its label (patterns.ASYNC_OOM)
    r"pytorch limit \(set by user-supplied memory fraction\))"
    r"|^.{0,40}?[0-9][0-9.,]* ?(?:[KMGT]i?B|bytes)\b")



@dataclass
class OomEvent:
    kind: str
    line: int
    text: str
    numbers: dict[str, int] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    count: int = 1
    last_line: int = 0  # the last repeat's line (0: only one)
    # Repeats of one message that were kept apart because their figures leave different gaps on their cards
    # (figures.gap_key) share a group: rank.py reads them as one failure (the most repeated first).
    group: tuple = field(default=(), compare=False, repr=False)


@dataclass
class LogScan:
    """Everything the classifier needs from one or more logs."""

    events: list[OomEvent]
    readings: dict[str, list[tuple[float, int]]]  # label -> [(step or line, bytes)]
    env: dict[str, list[str]]
    lines: int = 0
    bytes: int = 0
    dropped_events: int = 0
    samples: list[tuple[str, int, str]] = field(default_factory=list)  # (source, first line, text): heads and tails
    # (source, line) of TF BFC warnings broken before "The caller indicates ...": both lines of each (_bfc_second_sentence),
    # which line-by-line readers (recovery, reported failures) would take for a tf_oom line and a stray sentence
    bfc_wrapped: frozenset[tuple[str, int]] = frozenset()
    # the sources read (LogScanner.start_source), those of them that held no byte, and those that look like binary data
    # rather than text (not_text: with the share of their sampled bytes that no text holds)
    sources: tuple[str, ...] = ()
    empty_sources: tuple[str, ...] = ()
    binary_sources: tuple[tuple[str, float], ...] = ()


# Bytes that no text log holds: the C0 controls but for BEL, backspace (Keras' progress bar), the whitespace ones and
# ESC (colour codes). Random bytes are 9% of them; text in a legacy encoding (Latin-1, cp1251, GBK, Shift-JIS) holds
# none, however much of it is not UTF-8, and UTF-16 is decoded by the reader. A source is binary data when its first
# SAMPLE_HEAD bytes and its last LOOKBACK bytes each hold BINARY_SHARE of them, BINARY_MIN at least, a run of NULs
# counting as one: a log that `logrotate copytruncate` left starting with NULs, or a crash left ending with them, is
# text. A sample of NULs alone is no text either (a file preallocated or zeroed).
_NOT_TEXT = bytes(range(0, 7)) + bytes(range(14, 27)) + bytes(range(28, 32))
_NUL_RUN = re.compile(rb"\x00{2,}")
STDIN = "<stdin>"  # the source name of standard input (cli.explain), "standard input" in what users read
BINARY_SHARE = 0.05
BINARY_MIN = 32


def not_text_share(sample: bytes) -> float:
    """The share of `sample`'s bytes that no text holds (_NOT_TEXT, a run of NULs as one); 0 for fewer than
    BINARY_MIN of them, 1 for NULs alone."""
    if not sample.strip(b"\x00"):
        return 1.0 if sample else 0.0
    sample = _NUL_RUN.sub(b"\x00", sample)
    n = len(sample) - len(sample.translate(None, _NOT_TEXT))
    return n / len(sample) if n >= BINARY_MIN else 0.0


def _decode(b: bytes) -> str:
    text = b[:MAX_LINE].decode("utf-8", errors="replace").rstrip("\r")
    return CARET_ESCAPE.sub("", text) if "^[[" in text else text  # "^[[31mRuntimeError^[[0m" (cat -v, less)


def _line_text(block: bytes, ls: int, le: int) -> str:
    """A line longer than MAX_LINE is read as its head and its tail, as the reader hands on one that goes on past its
    window (read.HEAD, read.TAIL): what was printed last on a progress bar's line is at its end."""
    if le - ls <= MAX_LINE:
        return _decode(block[ls:le])
    return _decode(bytes(block[ls:ls + HEAD]) + b"\r" + bytes(block[le - TAIL:le]))


def _visible(text: str, kind: str) -> str:
    """Of a line redrawn with carriage returns (a progress bar, then the error printed over it), the last piece that
    is a failure line of the line's own kind: the event's text is the message, not the bar (a terminal would show
    the same). The kind stays the whole line's (review: a piece's kind turned a recovered run into a failure).
    Only pieces holding one of the kind's gate words are tried: a hostile line of 32,000 pieces costs one pass."""
    if "\r" not in text:
        return text
    gates = P.LINE_GATES.get(kind) or ("",)
    hi = len(text)
    while hi > 0:
        at = max(text.rfind(n, 0, hi) for n in gates)
        if at < 0:
            break
        a, b = text.rfind("\r", 0, at) + 1, text.find("\r", at)
        piece = text[a:len(text) if b < 0 else b]
        if piece != text and P.classify_line(piece) == kind:
            return piece
        hi = a - 1 if a > 0 else 0
    return text


def _wrapped_mention(before: str, text: str) -> bool:
    """A prose line wrapped mid-sentence (indented, starting in lower case, after a line that ends in a
    word): it is judged with the line before it, so "... which will prevent" + "memory leaking when
    ..." (a change log's wrapped entry) is the mention it is and not a report of a leak."""
    body = text.lstrip()
    if not (text[:1].isspace() and body[:1].islower()):
        return False
    prev = before.rstrip("\n").rsplit("\n", 1)[-1].rstrip()
    if not prev or not prev[-1:].isalpha():
        return False
    return P.classify_line(prev + " " + body.rstrip("\n")) is None


_BFC_SECOND = b"The caller " + P.TF_NOT_A_FAILURE.encode()


def _bfc_second_sentence(block: bytes, pos: int, end: int) -> str:
    """The line at `pos` where it opens with TF's BFC warning's second sentence, "The caller indicates that this is
    not a failure" (a terminal or a paste broke the warning there; review, session 17), else "". Within this block;
    a head that ends a block waits for the next one (LogScanner._resolve_bfc_head)."""
    if pos >= end:
        return ""
    nxt = block[pos:min(end, pos + 200)].lstrip(b" \t")
    return _decode(nxt.split(b"\n", 1)[0]) if nxt.startswith(_BFC_SECOND) else ""


def _underlined(title: str, block: bytes, pos: int, end: int) -> bool:
    """The line at `pos` (within block[:end]) underlines `title` as a section title (mentions.underlines)."""
    return underlines(title, block[pos:min(end, pos + 4 * TITLE_MAX)].split(b"\n", 1)[0].decode("utf-8", errors="replace"))


_GUNICORN_KILL = re.compile(r"Worker \(pid:(\d+)\) was sent SIGKILL! Perhaps out of memory\?")


def _timeout_kill(before: str, text: str) -> bool:
    """gunicorn guesses "Perhaps out of memory?" for any SIGKILL of a worker, its own too: after a
    "WORKER TIMEOUT (pid:N)" for that worker the kill was the timeout's, not the OOM killer's."""
    m = _GUNICORN_KILL.search(text)
    return m is not None and f"WORKER TIMEOUT (pid:{m.group(1)})" in before


_FENCE = re.compile(r"^\s*(?:```|~~~)")


def _introduced_example(before: str) -> bool:
    """The line just before (over blank lines and one opening code fence) introduces an example."""
    lines = before.rstrip("\n").split("\n")[-4:]
    fences = 0
    for line in reversed(lines):
        if not line.strip():
            continue
        if _FENCE.match(line) and fences == 0:
            fences += 1
            continue
        return bool(EXAMPLE_INTRO.match(line)) or bool(_CJK_INTRO.search(line) and not CJK_OWN_RUN.search(line)
                                                         and "如下" not in line)
    return False


# a Chinese/Japanese/Korean article's introduction of an example: "很多人都会遇到这个令人头疼的报错:" (the
# words that speak of the error in general, mentions.CJK_GENERAL, then a colon ending the line)
_CJK_INTRO = re.compile(f"(?:{CJK_GENERAL.pattern})[^\\n]{{0,40}}[:：]\\s*$")


class LogScanner:
    """Feed blocks of whole lines (bytes); `finish()` gives the LogScan."""

    def __init__(self, readings: bool = True) -> None:
        self._want_readings = readings  # doctor needs the events only: per-step readings cost most on dense logs
        self._events: dict[tuple[str, str, str], OomEvent] = {}
        self._readings: dict[str, list[tuple[float, int]]] = {}
        self._stride: dict[str, int] = {}
        self._skip: dict[str, int] = {}
        self._env: dict[str, list[str]] = {}
        self._line = 0  # lines consumed before the current block
        self._bytes = 0
        self._tail = b""  # end of the previous block, for look-back context
        self._head = b""  # this source's first SAMPLE_HEAD bytes
        self._samples: list[tuple[str, int, str]] = []
        self._sources: list[str] = []
        self._empty: list[str] = []
        self._binary: list[tuple[str, float]] = []
        self._judged = True  # (nothing to judge before a source is started)
        self._pending: tuple[OomEvent, int] | None = None  # (event, lines still to append)
        self._dropped = 0
        self._bfc_head: OomEvent | None = None  # a BFC warning's head that ended a block (_resolve_bfc_head)
        self._title_head: OomEvent | None = None  # a title-like event line that ended a block (_resolve_title_head)
        self._wrapped: set[tuple[str, int]] = set()  # the first MAX_WRAPPED_BFC // 2 lines
        self._wrapped_last: collections.deque[tuple[str, int]] = collections.deque(maxlen=MAX_WRAPPED_BFC // 2)
        self._skip_to = 0
        self._start = self._end = 0
        self._src_bytes = 0
        self._env_rescanned = 0  # the last line whose 40 lines before were read for hints (_line_hit)
        self._next_sample = FULL_READING_BYTES  # offsets in the log, not in spans: see _sample_readings
        self._sample_end = 0
        self.source = ""

    # -- input ----------------------------------------------------------------------------------
    def start_source(self, name: str) -> None:
        """The following blocks come from another file: line numbers restart, context is cut."""
        self._resolve_bfc_head(None, 0)
        self._resolve_title_head(None, 0)
        if self._pending is not None:
            ev, _ = self._pending
            self._pending = None
            self._finish_event(ev)
        self._keep_sample()
        self._judge_source()
        self._sources.append(name)
        self._judged = False
        self.source, self._line, self._tail, self._src_bytes, self._head = name, 0, b"", 0, b""
        self._next_sample, self._sample_end, self._env_rescanned = FULL_READING_BYTES, 0, 0

    def feed(self, block: bytes, start: int = 0, end: int | None = None, index: BlockIndex | None = None,
             offset: int | None = None, length: int | None = None) -> None:
        """Scan the whole lines in block[start:end] (offsets avoid copying a reader's buffer).

        `offset` is where block[start] stands in this source and `length` how many of its bytes the span stands
        for (read.iter_prepared_at: more than end - start when its last line, over MAX_LINE, is handed on as its
        head and tail). Without them the spans are taken as the source's bytes one after another. Places in the
        log (where readings are sampled, where its head ends, LogScan.bytes) are counted in them, so that they do
        not depend on which lines a reader shortened: the answer must not depend on --threads.
        `index` is `index_block(block, start, end, offset)`, computed ahead by a reader thread; without it (or if
        it was made for another offset) it is computed here."""
        end = len(block) if end is None else end
        if offset is not None and offset > self._src_bytes:  # the middle of an over-long line, skipped
            self._bytes += offset - self._src_bytes
            self._src_bytes = offset
        if end <= start:
            return
        length = end - start if length is None else max(length, end - start)
        if index is None or index.with_env != (self._src_bytes < P.ENV_BYTES):
            index = index_block(block, start, end, self._src_bytes)
        if index.clean is not None:  # read without its terminal escape sequences (its line numbers are the log's)
            block, start, end = index.clean, 0, len(index.clean)
        self._start, self._end = start, end
        self._skip_to = start
        if self._bfc_head is not None:  # (never with a pending continuation: a head line ends one)
            self._resolve_bfc_head(block, start)  # may open its event and read its continuation here
        elif self._title_head is not None:  # (nor with a BFC head or a continuation: it too ended the last block)
            self._resolve_title_head(block, start)
        elif self._pending is not None:
            self._skip_to = self._continue(block, start)
        if self._want_readings:
            self._sample_readings(block, start, end, index, length)
        for ls, before in index.lines:
            if ls < self._skip_to:
                continue
            le = block.find(b"\n", ls, end)
            le = end if le < 0 else le
            self._line_hit(block, ls, le, self._line + before + 1)
        if len(self._head) < SAMPLE_HEAD:
            self._head += block[start:min(end, start + SAMPLE_HEAD - len(self._head))]
        self._line += index.newlines
        if block[end - 1:end] != b"\n":
            self._line += 1
        self._bytes += length
        self._src_bytes += length
        if end - start >= LOOKBACK:
            self._tail = block[end - LOOKBACK:end]
        else:  # a short span (a pipe's short read): the tail is the stream's, whatever the spans
            self._tail = (self._tail + block[start:end])[-LOOKBACK:]

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
        text = _line_text(block, ls, le)
        self._env_scan(text)
        kind = P.classify_line(text)
        if kind is None:
            return
        text = _visible(text, kind)
        before = self._lookback(block, ls)
        if _wrapped_mention(before, text) or _introduced_example(before) or _timeout_kill(before, text):
            return
        title = title_like(text)
        if title and le + 1 < self._end and _underlined(text, block, le + 1, self._end):
            return  # a section title of documentation
        head = kind == "tf_oom" and "ran out of memory trying to allocate" in text and "summary follows" not in text
        wrapped = head and _bfc_second_sentence(block, le + 1, self._end)
        if wrapped:  # TF's BFC warning with its "The caller indicates ..." wrapped onto the next line: its text
            kind, text = "oom_caught", f"{text.rstrip()} {wrapped}"  # holds it, as recovery.bfc_crash expects
            self._remember_wrapped(lineno)
        ev = OomEvent(kind=kind, line=lineno, text=text[:MAX_EVENT_TEXT], source=self.source)
        ev.details.update(_context(before, text, lineno))
        if kind == "vllm_capacity" and (profile := P.vllm_profile(before)) is not None:
            ev.details["vllm_profile"] = profile  # the figures vLLM logged before its KV-cache check failed
        if self._src_bytes >= P.ENV_BYTES:  # past the head of the log: hints printed just before the error
            # each line once: in a storm of events (a TF retry storm prints thousands of BFC warnings) the 40
            # lines before one event were mostly read for the one before it (session 17: 60k lines took 11 s)
            fresh = 40 if not self._env_rescanned else min(40, lineno - self._env_rescanned - 1)
            if fresh > 0:
                for line in before.splitlines()[-fresh:]:
                    self._env_scan(line)
            self._env_rescanned = lineno
        if head and le + 1 >= self._end:  # the block ends here: the next block's first line decides (feed)
            self._bfc_head = ev
            return
        if title and le + 1 >= self._end:  # the same for a title's underline
            self._title_head = ev
            return
        self._open_event(ev, block, le + 1)

    def _open_event(self, ev: OomEvent, block: bytes, pos: int) -> None:
        """Finish `ev`, or read its continuation lines from `pos` first."""
        if ev.kind in _CONTINUED and not any(m in ev.text for m in _MSG_END[:4]):
            self._pending = (ev, 8)
            self._skip_to = self._continue(block, pos)
        else:
            self._finish_event(ev)

    def _remember_wrapped(self, lineno: int) -> None:
        for key in ((self.source, lineno), (self.source, lineno + 1)):
            if len(self._wrapped) < MAX_WRAPPED_BFC // 2:
                self._wrapped.add(key)
            else:
                self._wrapped_last.append(key)

    def _resolve_bfc_head(self, block: bytes | None, start: int) -> None:
        """A BFC warning's head that ended the previous block: the first line of this one (None: no more input)
        tells whether it was wrapped (review, session 18: the boundary fell inside long storms)."""
        ev, self._bfc_head = self._bfc_head, None
        if ev is None:
            return
        second = _bfc_second_sentence(block, start, self._end) if block is not None else ""
        if second:
            ev.kind = "oom_caught"
            ev.text = f"{ev.text.rstrip()} {second}"[:MAX_EVENT_TEXT]
            self._remember_wrapped(ev.line)
            self._finish_event(ev)
        elif block is None:
            self._finish_event(ev)
        else:
            self._open_event(ev, block, start)

    def _resolve_title_head(self, block: bytes | None, start: int) -> None:
        """A title-like event line that ended the previous block: dropped where this block's first line underlines
        it, else opened (None: no more input)."""
        ev, self._title_head = self._title_head, None
        if ev is None:
            return
        if block is None:
            self._finish_event(ev)
        elif not _underlined(ev.text, block, start, self._end):
            self._open_event(ev, block, start)

    def _env_scan(self, text: str) -> None:
        for name in P.env_gates_open(text):  # most candidate lines open none (gates.py: one pass a line)
            m = P.ENV_PATTERNS[name].search(text)
            if m:
                vals = self._env.setdefault(name, [])
                groups = [g for g in m.groups() if g] if m.groups() else []
                if name.startswith("smi_"):
                    v = " ".join(groups)  # "pid MiB" / "used free"
                elif name in P.ENV_CONTEXT_BEFORE:
                    v = (P.clause_before(text, m.start(), P.ENV_CONTEXT_BEFORE[name]) + m.group(0))[-120:]
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
            if (not line or line.startswith(_NOT_CONTINUATION) or (kind not in (None, "generic_oom") and not body)
                    or not (body or _CONTINUATION.search(line))):
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
        # Ranks whose messages account for their cards merge (count 8 for 8 ranks); a message that leaves a
        # gap on its card (a hidden co-tenant) keeps its own figures instead of merging under another rank's
        # numbers, which _norm's digit masking would do (review, session 15:
        # tests/test_review15_r6_two_ranks_merged_event.py). Such siblings share `group`.
        group = (ev.kind, _norm(ev.text), ev.source)
        key = group + (gap_key(ev.numbers, ev.details),)
        ev.group = group
        old = self._events.get(key)
        if old is not None:
            old.count += 1
            old.last_line = ev.line
        elif len(self._events) < MAX_EVENTS:
            self._events[key] = ev
        else:
            self._dropped += 1

    # -- readings -------------------------------------------------------------------------------
    def _sample_readings(self, block: bytes, start: int, end: int, index: BlockIndex, length: int) -> None:
        """Readings everywhere in the log's first FULL_READING_BYTES, then in SAMPLE_READING_BYTES from
        the first line start at or after each sample point. Points and windows are offsets in the
        log, so the same lines are sampled whatever spans the reader hands over (its threads, a pipe's
        short reads, the over-long lines it shortened): the answer must not depend on --threads.

        `index` already holds every line that can be an OOM message (the pre-filter's lines); only
        those are asked whether they are one, so that no OOM message counts as a reading."""
        src = self._src_bytes
        places = _Places(block, start, end, src, length)
        at, to = places.at, places.to
        if src < FULL_READING_BYTES:
            hi = min(end, to(FULL_READING_BYTES))
            self._scan_readings(block, start, hi, self._line, index)
        stop, cur = src + length, src  # this span's end, and how far sampling has looked, in the log
        while True:
            if self._sample_end > cur:  # a window that began earlier goes on from here (a line start)
                lo = to(cur)
            elif self._next_sample < stop:  # a sample point in this span: from its next line start
                lo = to(max(self._next_sample, cur))
                if lo > start and block[lo - 1:lo] != b"\n":
                    nl = block.find(b"\n", lo, end)
                    lo = end if nl < 0 else nl + 1
                self._sample_end = at(lo) + SAMPLE_READING_BYTES
                step = SAMPLE_EVERY_BYTES if self._next_sample < DENSE_SAMPLING_BYTES else 8 * SAMPLE_EVERY_BYTES
                self._next_sample = max(self._next_sample + step, self._sample_end)
            else:
                return
            hi = min(end, to(self._sample_end))
            if hi > lo:
                self._scan_readings(block, lo, hi, self._line + _count_newlines(block, start, lo), index)
            if hi >= end:
                return
            cur = at(hi)

    def _scan_readings(self, block: bytes, lo: int, hi: int, line0: int, index: BlockIndex) -> None:
        """Memory figures printed per step in block[lo:hi], whose first line is line `line0 + 1` of
        the log. Three stages: one C pass for literals that every READING_ANCHOR match contains, the
        anchor on those lines, then the full pattern. Running the anchor regex over the whole window
        cost ~0.1 s per log (its `\\d/` branch tries every digit). Lines are decoded one by one: a
        newline byte is never part of a UTF-8 sequence."""
        window = block[lo:hi]
        find = window.find
        candidates = {ls - lo for ls, _ in index.lines if lo <= ls < hi}  # lines that may be OOM messages
        base, pos = line0, 0  # lines of the log before `window`
        for ls in reading_line_starts(window):
            le = find(b"\n", ls)
            le = len(window) if le < 0 else le
            if le - ls > MAX_LINE:  # as the scanner reads it, whether or not the reader shortened it
                line = (window[ls:ls + HEAD] + b"\r" + window[le - TAIL:le]).decode("utf-8", errors="replace")
            else:
                line = window[ls:le].decode("utf-8", errors="replace")
            if not P.has_reading_anchor(line):
                continue
            r = P.parse_reading(line)
            if r is None or (ls in candidates and P.classify_line(line) is not None):
                continue  # an OOM message is not a reading
            base += window.count(b"\n", pos, ls)
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
        self._resolve_bfc_head(None, 0)
        self._resolve_title_head(None, 0)
        if self._pending is not None:
            ev, _ = self._pending
            self._pending = None
            self._finish_event(ev)
        events = sorted(self._events.values(), key=lambda e: (e.source, e.line))
        self._keep_sample()
        self._judge_source()
        relabel_xla(events, self._samples)  # XLA's allocator line in a JAX log is JAX's, not TensorFlow's
        k8s_reasons(events, self._samples)  # an exit 137 in Kubernetes' record: the reason it gives
        return LogScan(events=events, readings=self._readings, env=self._env, lines=self._line,
                       bytes=self._bytes, dropped_events=self._dropped, samples=self._samples,
                       bfc_wrapped=frozenset(self._wrapped) | frozenset(self._wrapped_last),
                       sources=tuple(self._sources), empty_sources=tuple(self._empty),
                       binary_sources=tuple(self._binary))

    def _judge_source(self) -> None:
        """Whether the source read last (start_source) was empty, or binary data (_NOT_TEXT): a CI gate given a
        truncated or a wrong file must not read "No OOM-like event found" as a pass."""
        if self._judged:
            return  # no source was started (feed_lines, explain_text), or this one was judged already
        self._judged = True
        if not self._src_bytes:
            self._empty.append(self.source)
        else:
            head, tail = not_text_share(self._head), not_text_share(self._tail)
            if head >= BINARY_SHARE and tail >= BINARY_SHARE:
                self._binary.append((self.source, min(head, tail)))

    def _keep_sample(self) -> None:
        """This source's head, and its tail past the head (a short log is all head)."""
        if not self._src_bytes or len(self._samples) >= 2 * MAX_SAMPLED_SOURCES:
            return
        self._samples.append((self.source, 1, self._head.decode("utf-8", errors="replace")))
        tail = self._tail[-min(len(self._tail), self._src_bytes - len(self._head)):] if self._src_bytes > len(self._head) else b""
        if tail:
            n = tail.count(b"\n") + (0 if tail.endswith(b"\n") else 1)
            self._samples.append((self.source, self._line - n + 1, tail.decode("utf-8", errors="replace")))


class _Places:
    """Between places in a span, block[start:end], and offsets in its log, where it starts at `src` and stands for
    `length` bytes: more than end - start when its last line, over MAX_LINE, was handed on as its first HEAD bytes,
    b"\\r" and its last TAIL bytes (read.py); the bytes after the b"\\r" stand `length - (end - start)` further on."""

    __slots__ = ("start", "end", "src", "skip", "cut")

    def __init__(self, block: bytes, start: int, end: int, src: int, length: int) -> None:
        self.start, self.end, self.src, self.skip = start, end, src, max(0, length - (end - start))
        self.cut = end
        if self.skip:
            last = block.rfind(b"\n", start, end - 1) + 1
            self.cut = max(last, start) + HEAD  # the b"\r" in place of the line's middle

    def at(self, pos: int) -> int:
        """The log's offset of block[pos] (of the span's end for `end`)."""
        return self.src + (pos - self.start) + (self.skip if pos > self.cut else 0)

    def to(self, offset: int) -> int:
        """Where the log's byte `offset` is in the span (past `end` for one after it); a byte of the skipped
        middle of the last line is at the b"\\r" past its head."""
        d = offset - self.src
        if d <= self.cut - self.start:
            return self.start + d
        return max(self.cut + 1, self.start + d - self.skip)


_DIGITS = re.compile(r"\d+")


def _norm(text: str) -> str:
    """Repeats of one error (per rank, per retry) differ only in pids/timestamps/prefixes."""
    i = text.find("Error")
    core = text[i:] if i >= 0 else text
    return _DIGITS.sub("#", core[:400])


EVAL_ACCUMULATION = "accumulating evaluation predictions on the GPU (the Trainer's nested_concat)"
_CALL_SITES = (
    # the HF Trainer's evaluate()/predict() keeps every step's predictions on the GPU and concatenates them
    # (transformers/trainer_pt_utils.py: nested_concat -> torch_pad_and_concatenate) unless eval_accumulation_steps is set
    (EVAL_ACCUMULATION, ("nested_concat", "torch_pad_and_concatenate")),
    ("context creation (torch.cuda.init / lazy init)", ("_lazy_init", "torch.cuda.init", "cudaGetDeviceCount", "in set_device", "torch._C._cuda_init", "cuDevicePrimaryCtxRetain", "CuDevicePrimaryCtxRetain", "cuCtxCreate")),
    ("pinned host memory (pin_memory)", ("pin_memory",)),
    ("NCCL communicator set-up", ("init_process_group", "ProcessGroupNCCL", "in barrier", "_new_process_group")),
    ("cuBLAS/cuDNN handle creation", ("cublasCreate", "cudnnCreate", "getCurrentCUDABlasHandle")),
    ("loading a checkpoint (torch.load)", ("torch.load(", "torch/serialization.py", "in _load\n", "in load_state_dict")),
    ("moving the model or a tensor to the GPU (.to() / .cuda())", ("in convert", "in _apply", "in to\n", ".to(", ".cuda(", "in cuda\n")),
)


def _context(before: str, text: str, lineno: int) -> dict[str, Any]:
    """Where the error was raised (from the traceback just above it), and the line its traceback began on
    (recovery.recovered_events: a crash after a recovery line is a new failure)."""
    out: dict[str, Any] = {}
    recent = before[-3000:]
    if "DataLoader worker process" in recent or "_worker_loop" in recent or "DataLoader worker" in text:
        out["in_dataloader_worker"] = True
    frames = ""
    if "Traceback" in recent:
        frames = recent[recent.rfind("Traceback"):] + "\n"
        out["traceback_line"] = lineno - frames.count("\n") + 1
    elif '  File "' in recent:  # a traceback pasted without its header line
        frames = recent[recent.find('  File "'):] + "\n"
    frames += text  # the message itself may name the call (cuDevicePrimaryCtxRetain, cublasCreate)
    for site, needles in _CALL_SITES:
        if any(n in frames for n in needles):
            out["call_site"] = site
            break
    return out
