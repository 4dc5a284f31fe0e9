"""A failure that the text reports without any message explain knows: the no-event fallback.

Reports are often prose ("the backend ooms on a 4090", "it run out of my cuda memory", "fails with
message `killed`") or a traceback cut before its last line. The scanner's patterns need an error's
own words, so such a text has no event, and explain used to give no answer. Here a failure is
recognised by its shape, not by a product's wording: a Python traceback, or one line that puts a
memory word next to a failure word and is not advice, a negation, a quotation or a general statement
(mentions.is_mention, the test that already keeps docs and grep output from being failures). The
causes are then ranked from the text's evidence (rank.py: prose rules, readings, the text prior).
Pure: text in, the reporting line out.
"""

from __future__ import annotations

import re

from oomdoctor.explain.mentions import (
    CJK_HEDGE,
    GENERAL_STATEMENT,
    MODAL_AFTER,
    WARN_LEVEL,
    is_mention,
    underlines,
)
from oomdoctor.explain.patterns import _GATED_PATTERNS, SLURM_MEMORY_WARNING

_TRACEBACK = re.compile(r"^Traceback \(most recent call last\):", re.M)
# A memory word: OOM as people write it (also as a verb), memory of any kind, an allocation.
# Word edges are ASCII ones, so that a word next to CJK text counts ("cuda out of memory가 뜨는").
MEMORY_WORD = re.compile(r"(?i)(?<![A-Za-z0-9_])(?:OOM(?:s|ed|'d|ing)?|(?:GPU|CUDA|device|V?RAM|host|system|cpu|shared)?[ _-]?memory|"
                     r"V?RAM|HBM|allocat(?:e|es|ed|ing|ion|ions)|leak(?:s|ed|ing)?|"
                     # TensorRT's builder out of device memory for a layer: "Could not find any implementation for
                     # node ... due to insufficient workspace" (after skipped tactics: the build failed; session 10)
                     r"(?<=due to insufficient )workspace)(?![A-Za-z0-9_])"
                     # Chinese reports: video memory, memory
                     r"|显存|内存|(?<![A-Za-z0-9_.])OOM(?![A-Za-z0-9_]|\.[A-Za-z0-9_])")
# A failure word: what happened, in the past or present (not "may fail", which is_mention skips).
_FAILURE = re.compile(r"(?i)(?<![A-Za-z0-9_])(?:r[au]ns? out|running out|r[au]ns? through|used up|ate up|maxed out|filled up|fills up|blew up|crash(?:es|ed|ing)?|fail(?:s|ed|ing|ure)?|killed|"
                      r"exception|error|exhausted|"
                      # a platform's message with its limit: Hugging Face Spaces "Memory limit exceeded (16Gi)" (round z4)
                      r"(?<=[Mm]emory )limit exceeded(?= \(\d)|"
                      # Google Cloud Run's: "Memory limit of 512 MiB exceeded with 530 MiB used" (session 10)
                      r"(?<=[Mm]emory )limit of \d+(?:\.\d+)? ?[KMGT](?:i?B)? exceeded(?= with \d)|"
                      # a report's own words: "my job exceeded the memory limit after 2 hours and was cancelled" (not a
                      # definition: "jobs that exceeded ...", "indicates the job exceeded ..." (_DEFINES_BEFORE), nor
                      # Slurm's warning "... at some point", whose line failure_statement skips; second review, session 9)
                      r"(?<!\bthat )(?<!\bwho )(?<!\bwhich )exceeded (?:its |the |my |our |their )?memory limit|not (?:be )?possible|not enough|insufficient|(?:could ?not|cannot|can't|unable to) allocate|OOM(?:s|ed|'d|ing)?)(?![A-Za-z0-9_])"
                      # Chinese: reports an error, error, failed, crashed, not enough, blew up (memory)
                      r"|报错|错误|失败|崩溃|不足|不够|爆显存|溢出|(?<![A-Za-z0-9_.])OOM(?![A-Za-z0-9_]|\.[A-Za-z0-9_])")
# What a words-only leaning needs (rank._words_only): the text speaks of memory or of a failure (a
# traceback, Korean "error" / "memory" as well). Session 6 (2026-11-27): memory words alone left 14 of
# 577 dev reports and 3 of 53 fresh ones (scored on arrival) without any answer; out of fold on dev this
# gate gave 434 -> 437 right first, 480 -> 486 in the top two (no gate at all: 442 / 491, but a leaning
# on 340 of 356 healthy dev logs against 257 with this gate).
LEANING_WORD = re.compile("|".join(f"(?:{p.pattern.removeprefix('(?i)')})" for p in (MEMORY_WORD, _FAILURE))
                          + r"|^Traceback \(most recent call|에러|오류|메모리", re.I | re.M)
_MAX_LINE = 2000
# What a definition says before "exceeded": "The OUT_OF_MEMORY state indicates the job exceeded its memory limit."
_DEFINES_BEFORE = re.compile(r"(?i)\b(?:indicates?|means?|denotes?|signals?|signifies)\b[^.!?\n]{0,60}$")
# A traceback the program printed and handled (a thread's, a server's request); after recovery lines it is not
# the job's failure (second review, session 9). Python's "Exception ignored in" is never one: _IGNORED_TB.
_HANDLED_TB = re.compile(r"(?:Exception in thread\b[^\n]*|^Thread [\w-]+:|Exception in ASGI application)\s*\n\Z", re.M)
# Python's report of an exception it swallowed (in __del__, a weakref callback, at interpreter exit) and went
# on from: never the job's failure, markers or not (a healthy run ending in DataLoader's
# "Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ ...>"; review-2 residual, session 9)
_IGNORED_TB = re.compile(r"^Exception ignored in\b[^\n]*\s*\n\Z", re.M)
_TRIPLE_QUOTE = re.compile(r'"""|\'\'\'')
# the line a docstring follows: a def or class header, or the close of a def's wrapped signature ("    ) -> None:");
# a triple quote anywhere else (a fence around a pasted error, a prompt template cut mid-string) opens nothing
_DEF_LINE = re.compile(r"^\s*(?:(?:async\s+)?def\s|class\s)[^#\n]*:\s*(?:#[^\n]*)?$"
                       # the end of a wrapped signature: "    ) -> None:", "            attention_mask=None):"
                       r"|^\s*\)(?:\s*->\s*[^:\n]+)?:\s*$|^\s+[\w=.,*\[\]\s:|'\"]*\)(?:\s*->\s*[^:\n]+)?:\s*(?:#[^\n]*)?$")
_DOC_OPEN = re.compile(r'[rRuU]?(?:"""|\'\'\')')
# A program's guess, asked ("was sent SIGKILL! Perhaps out of memory?", gunicorn for any SIGKILL of a
# worker): where the scanner found no failure line in it, the guess alone reports none.
_GUESS = re.compile(r"(?i)\b(?:perhaps|maybe|possibly|probably)\b[^.!?\n]{0,80}\?")


def _memory_words_within(line: str, spans: list[tuple[int, int]]) -> bool:
    """There are spans, and every memory word of the line lies inside one of them."""
    return bool(spans) and all(any(a <= m.start() and m.end() <= b for a, b in spans) for m in MEMORY_WORD.finditer(line))


def _only_guessed(line: str) -> bool:
    """Every memory word of the line is inside an asked guess ("Perhaps out of memory?"); a failure told
    before a guess about its cause ("fails with a memory error, possibly fragmentation?") is not."""
    g = _GUESS.search(line)
    return _memory_words_within(line, [g.span()] if g else [])


_NEGATED = re.compile(r"(?i)\bnot (?:a|an) (?:failure|error)\b|\bno (?:errors?|failures?)\b")
# A tool that could not read the memory's figures ("ERROR: GPU[0] : Unable to get GPU memory use.",
# rocm-smi on a healthy card): a query that failed, not memory that ran out.
_MEMORY_QUERY = re.compile(r"(?i)\b(?:unable to|failed to|fails to|could ?not|cannot|can't|couldn't)\s+(?:get|read|query|retrieve|display|fetch|obtain)\s+"
                           r"(?:the\s+)?(?:GPU\s+|device\s+|VRAM\s+|CPU\s+)?memory\s+(?:use|usage|info|information|stats|"
                           r"statistics|size|total|clock|type|vendor|partition)\b")


def _only_queried(line: str) -> bool:
    """Every memory word of the line is inside a failed query of the memory's figures."""
    return _memory_words_within(line, [m.span() for m in _MEMORY_QUERY.finditer(line)])


# A failure word that is denied in its clause: "... but do not cause job to fail", "it never crashed",
# "without failing" (a change that keeps jobs alive, not a job that failed).
_DENIED_BEFORE = re.compile(r"(?i)(?:\bnot|\bnever|n't|\bwithout)(?:\s+(?!(?:sure|know|knowing|clear|understand|certain|why|what|how|if|whether|idea|but)\b)[\w-]+){0,3}\s+$")
# A hypothetical in the same clause: "a batch can ... OOM", "this would fail" (not "will": bug reports say
# what the program will do, "Trainer will crash with a CUDA Memory Exception"); not "can't"/"cannot" and
# not across "but" or a comma ("I can load it, but training fails with OOM" is a report). The same right
# after the failure words is mentions.MODAL_AFTER.
_MODAL_BEFORE = re.compile(r"(?i)\b(?:can|could|may|might|would|should)\b(?!['\u2019]t| ?not)(?:(?!\bbut\b)[^.!?;:,])*$")
# Lines that are not prose reporting a run: a configuration's label ("- name: CUDA OOM", "pattern: ..."),
# a shell command ("$ cat .../memory.oom.group"), a docstring's first line, a Python import
# ("from torchtnt.utils.oom import (": a module's name is no report).
_NOT_PROSE = re.compile(r"(?i)^\s*(?:(?:-\s*)?(?:name|title|label|pattern|regex|description|summary|help)\s*:|[$#>]\s+\S|\"\"\"|\'\'\')"
                        r"|(?-i:^\s*(?:from\s+[\w.]+\s+)?import\s+[\w.(])")
# Advice to the reader: "so if your job gets killed on a cpu OOM ...".
_YOUR_CONDITION = re.compile(r"(?i)\b(?:if|when|whenever|unless|once)\s+(?:\w+\s+){0,3}?(?:you|your)\b")
# Chinese docs: if / may / usually / for example / suggest / avoid / prevent.
_ZH_NOT_REPORT = re.compile(CJK_HEDGE)
# Not an event: a counter ("oom 0", "CUDA OOMs: 0", "errors=3": a statistic of a healthy run) or a
# conditional clause ("When a run OOMs ...", "If it fails ...": docs describing what to do).
_COUNTER_AFTER = re.compile(r"\s*[:=|]?\s*\d")
# A remedy or a kind of failure, not one that happened: "this fixes fragmentation-induced OOM".
_REMEDY_BEFORE = re.compile(r"(?i)\b(?:fix(?:es|ed|ing)?|solv(?:e|es|ed|ing)|resolv\w+|prevent\w*|avoid\w*|mitigat\w+|"
                            r"\w+-(?:induced|related|caused))\b[^.!?;]{0,60}$")
_CONDITIONAL = re.compile(r"(?i)(?:^|[.!?;]\s+)[\W\d]*(?:when|whenever|if|in case|unless|should|once|before|after)\b[^.!?;]*$")


def _judged(line: str) -> bool:
    """A wording the scanner knows and found to be a mention (advice, a quotation, a negation)."""
    for _, gate, pat in _GATED_PATTERNS:
        if any(g in line for g in gate):
            ms = list(pat.finditer(line))[:4]
            if ms and all(is_mention(line, m.start(), m.end()) for m in ms):
                return True
    return False


def failure_statement(samples: list[tuple[str, int, str]], after: dict[str, int] | None = None,
                      skip: frozenset[tuple[str, int]] = frozenset(),
                      handled: bool | None = None) -> tuple[str, int, str] | None:
    """(source, line, text) of the first line that reports a failure, or None; with `after`, only lines
    past that line of their source (what comes after a recovered OOM's line); `skip`: (source, line) pairs
    never read (a self-contained recovery line's own lines: it recovers nothing before or after it); `handled`:
    whether a thread's or server's handled traceback is passed over (a job that went on from an OOM;
    default: where `after` or `skip` is given)."""
    handled = bool(after or skip) if handled is None else handled
    after = after or {}
    for source, first, text in samples:
        for m in _TRACEBACK.finditer(text):
            n = first + text.count("\n", 0, m.start())
            if n > after.get(source, -1) and (source, n) not in skip:
                if _IGNORED_TB.search(text, max(0, m.start() - 300), m.start()) or (
                        handled and _HANDLED_TB.search(text, max(0, m.start() - 300), m.start())):
                    continue
                return source, n, m.group(0)
    for source, first, text in samples:
        prev = ""
        in_doc = False  # inside a docstring of pasted source: what code says of a failure, not one that happened
        lines = text.split("\n")  # "\n" only, as the scanner counts lines (not tqdm's "\r")
        for i, line in enumerate(lines):
            was_doc = in_doc
            odd = bool(len(_TRIPLE_QUOTE.findall(line[:_MAX_LINE])) % 2)
            if in_doc:
                in_doc = not odd and not line.lstrip().startswith("```")  # a fence ends a pasted, cut docstring
            elif odd and _DEF_LINE.match(prev) and _DOC_OPEN.match(line.lstrip()):
                in_doc = True
            if first + i <= after.get(source, -1) or was_doc or (source, first + i) in skip:
                prev = line[:_MAX_LINE].rstrip()
                continue
            line = line[:_MAX_LINE]
            # prose wrapped mid-sentence is read with the line before it ("such a batch can" + "lock in
            # ... or OOM"): a hypothetical there is one here
            # (a wrapped line may open with a quoted name: '"vm.builtin.alloc_storage" was unable to allocate')
            lead = prev if (line.lstrip()[:1].isalnum() or line.lstrip()[:1] in "\"'`") and prev[-1:].isalpha() else ""
            prev = line.rstrip()
            mem = MEMORY_WORD.search(line)
            if (mem is None or GENERAL_STATEMENT.search(line) or _NEGATED.search(line) or _ZH_NOT_REPORT.search(line)
                    or _only_guessed(line) or _only_queried(line)
                    or _NOT_PROSE.match(line) or _YOUR_CONDITION.search(line) or WARN_LEVEL.match(line)
                    or "``" in lead + line  # reStructuredText literals: docstrings and Sphinx docs
                    or SLURM_MEMORY_WARNING.search(line)
                    or (i + 1 < len(lines) and underlines(line, lines[i + 1]))  # a section title (reStructuredText)
                    or _judged(line)):
                continue
            for f in _FAILURE.finditer(line):
                lo, hi = min(mem.start(), f.start()), max(mem.end(), f.end())
                if (_COUNTER_AFTER.match(line, hi) or _COUNTER_AFTER.match(line, f.end())
                        or (f.group(0).lower().startswith("exceeded") and _DEFINES_BEFORE.search(line, max(0, f.start() - 80), f.start()))
                        or _DENIED_BEFORE.search(line, max(0, f.start() - 60), f.start())
                        or _MODAL_BEFORE.search(lead[-200:] + " " + line[max(0, lo - 200):lo]) or MODAL_AFTER.match(line, hi)
                        or _CONDITIONAL.search(line, max(0, lo - 300), lo) or _CONDITIONAL.search(line, max(0, f.start() - 300), f.start()) or _REMEDY_BEFORE.search(lead[-200:] + " " + line[:lo]) or is_mention(line, lo, hi) or is_mention(line, f.start(), f.end())):
                    continue
                return source, first + i, line.strip()[:400]
    return None
