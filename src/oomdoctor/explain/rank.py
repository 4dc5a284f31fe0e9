"""`explain`: from OOM-like log text (and optional bundle facts) to ranked root-cause hypotheses.

Every event is scored on its own board (rules in explain_rules / explain_kinds); the log-wide context
(memory readings, sharing-layer lines, GPU names) feeds every board. The incident that the text
explains best is the answer; the other events add their categories at a discount, so a second
plausible cause still shows up second. Pure: no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from oomdoctor.explain.deciders import OLD_TORCH, OLDEST_TORCH, bundle_command, decider
from oomdoctor.explain.events import SAMPLE_HEAD, STDIN, LogScan, LogScanner, OomEvent
from oomdoctor.explain.framework import server_kind
from oomdoctor.explain.kinds import GPU_KINDS, MARKERS, RECOVERY, SELF_CONTAINED, category_hint
from oomdoctor.explain.listing import ERROR_LINE, source_listing
from oomdoctor.explain.mentions import cjk_article, reads_as_prose
from oomdoctor.explain.patterns import ENV_PATTERNS, MACHINE_HINTS, classify_line
from oomdoctor.explain.recovery import (
    bfc_crash,
    crashed_after,
    loop_went_on,
    recovered_events,
    retry_went_on,
    stepped_down_before,
    went_on,
)
from oomdoctor.explain.reported import LEANING_WORD, failure_statement
from oomdoctor.explain.rules import Board
from oomdoctor.explain.rules_by_kind import bundle_events, event_rules, fact_rules, leak_rules, prose_rules
from oomdoctor.explain.testrun import in_passing_session, passing_sessions
from oomdoctor.explain.textmodel import TAG_PREFIX

if TYPE_CHECKING:  # facts only come with --bundle; importing them costs ~14 ms of start-up
    from oomdoctor.explain.textmodel import TextModel
    from oomdoctor.facts import FactSet

# Markers of the environment are not failures; the failure of a GPU job is the GPU error when there
# is one (process exits follow from it). Both sets come from the kind table in parsers/oom_kinds.
_MARKERS = MARKERS
_GPU_KINDS = GPU_KINDS
_OTHER_EVENT_WEIGHT = 0.3
# How each constant below was chosen, with every figure: docs/explain-design.md, "The constants of rank.py".
# Confidence = softmax(score / TEMPERATURE) over the categories plus a "none of these" score of NONE_SCORE.
# Fitted out of fold on dev to the question the calibration table asks (is the top answer right).
TEMPERATURE = 1.0
NONE_SCORE = -0.6
# The words-only leaning (no failure line; PRIOR_WEIGHT * p plus the prose rules) has its own, fitted the same way.
TEMPERATURE_WORDS = 0.1
NONE_SCORE_WORDS = -0.4
# A leaning from words alone is never stated surer than this (out of fold, those stated at 0.85+ were right 87%,
# session 18); not re-checked since session 20's refit of the leaning's temperature.
WORDS_MAX_CONFIDENCE = 0.9
# A SIGKILL seen alone (exit 137, -9, the shell's `Killed`: the only kind of event, no machine facts) is stated no surer
# than this: the OOM killer sends it, but so do kill -9, preemption and deadlines, and the log cannot tell them apart
# (docs/explain.md: "137 alone is weaker"); below AMBIGUOUS_BELOW, so the deciding command (dmesg) is shown. A cap
# changes no ranking (top-1 and top-2 stay as they are). A walkthrough, session 27: `Killed` alone read 0.96.
SIGKILL_MAX_CONFIDENCE = 0.7
# An answer is ambiguous when its confidence is below this or the runner-up is within AMBIGUOUS_GAP.
AMBIGUOUS_BELOW = 0.8
AMBIGUOUS_GAP = 0.15
# The text prior (explain/textmodel.py): PRIOR_WEIGHT * p(category | words) is added to a category's
# score where p >= PRIOR_FLOOR. Above 0 the weight matters little: where a rule fires its score leads.
PRIOR_WEIGHT = 0.5
# Events whose wording says no more than "out of memory" (VAGUE_KINDS): the rules' defaults are guesses
# there, so the words weigh more.
PRIOR_WEIGHT_VAGUE = 4.0
# The driver's "CUDA error: out of memory" is not among them, though its reading is as uncertain: why, in
# rules.driver_oom's comment.
VAGUE_KINDS = frozenset({"generic_oom", "reported_failure", "torch_oom_legacy"})
# The least p(category | words) that makes a category a candidate.
PRIOR_FLOOR = 0.05
# No event and no failure statement: the words alone may still lean to a cause (an issue that describes
# the failure without quoting it), shown as a leaning (exit 0) when the top p reaches this; 0 turns it off.
WORDS_ONLY_MIN = 0.2
# A text that reads as documentation (explain/docsmodel.json) is not taken to report a failure when its
# only OOM wording is vague (DOCS_WEAK_KINDS): no known message, no numbers.
DOCS_MIN = 0.95
# ... nor, when the documentation model is surer still, one that quotes a known message, if no event carries
# the allocator's figures, a traceback or the machine (_documentation).
DOCS_MIN_ANY = 0.99
DOCS_WEAK_KINDS = frozenset({"generic_oom", "reported_failure", "slurm_oom_state", "slurm_oom_kill"})
# The event of a failure that the text reports in its own words (explain/reported.py): no scanner
# pattern names it, so doctor's oom_events never hold it.
REPORTED_KIND = "reported_failure"
_DEFAULT = object()


@dataclass
class Hypothesis:
    category: str
    confidence: float
    evidence: list[str]
    fixes: list[str]
    score: float = 0.0
    kind: str = ""  # the answer's event kind: whose allocator the deciding command asks (deciders.decider)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"category": self.category, "confidence": self.confidence, "evidence": self.evidence,
                               "fixes": self.fixes}
        d = decider(self.category, self.kind)
        if d is not None:
            out["decided_by"] = {"fact": d.fact, "command": d.command}
        return out


@dataclass
class Explanation:
    events: list[OomEvent]
    hypotheses: list[Hypothesis]
    primary: OomEvent | None = None
    event_categories: dict[int, str] = field(default_factory=dict)
    facts_used: list[str] = field(default_factory=list)
    scan: LogScan | None = None
    recovered: list[OomEvent] = field(default_factory=list)  # OOMs the job caught and went on from
    documentation: bool = False  # the text reads as documentation; its vague OOM wording was not a failure
    notes: list[str] = field(default_factory=list)  # what the reader should know that is no event (a BFC warning before a crash)
    facts_given: bool = False  # machine facts were read (--here, --bundle), whether or not they decided anything
    # a cause that only another event's board held (a JAX OOM beside PyTorch's): that event's kind, so its deciding
    # command asks that framework's allocator (review, session 25)
    category_kinds: dict[str, str] = field(default_factory=dict)
    bundle: str | None = None  # the facts came from this bundle (--bundle): deciding facts are read from it

    def __post_init__(self) -> None:
        for h in self.hypotheses:
            h.kind = self.category_kinds.get(h.category) or (self.primary.kind if self.primary is not None else "")
            if h.kind == "torch_oom" and self.primary is not None and self.primary.kind == "torch_oom" and \
                    self.primary.details.get("format") in ("1.4-2.0", "1.0-1.3"):
                # what decides is asked of that PyTorch (deciders.OLD_TORCH, OLDEST_TORCH)
                h.kind = OLDEST_TORCH if self.primary.details.get("format") == "1.0-1.3" else OLD_TORCH
            elif self.primary is not None and h.kind == self.primary.kind:
                h.kind = server_kind(h.kind, self.primary.text)  # TGI's, vLLM's, llama.cpp's own deciding command

    @property
    def category(self) -> str | None:
        return self.hypotheses[0].category if self.hypotheses else None

    @property
    def input_empty(self) -> bool:
        """Every log read held no byte (0 lines read)."""
        s = self.scan
        return s is not None and bool(s.sources) and len(s.empty_sources) == len(s.sources)

    @property
    def failures(self) -> list[OomEvent]:
        """The events that ended (or broke) the job: every event but the recovered ones."""
        ids = {id(e) for e in self.recovered}
        return [e for e in self.events if id(e) not in ids]

    @property
    def explained(self) -> bool:
        return bool(self.failures)

    @property
    def ambiguous(self) -> bool:
        h = self.hypotheses
        if not h:
            return False
        return h[0].confidence < AMBIGUOUS_BELOW or (len(h) > 1 and h[0].confidence - h[1].confidence < AMBIGUOUS_GAP)

    def to_decide(self) -> list[dict[str, str]]:
        """For an ambiguous answer: the fact that separates the leading causes, and how to read it."""
        if not self.ambiguous:
            return []
        out = []
        for h in self.hypotheses[:2]:
            d = decider(h.category, h.kind)
            if d is not None:
                out.append({"category": h.category, "fact": d.fact,
                            "command": bundle_command(d, self.bundle) if self.bundle else d.command,
                            "collected_by": "--here or --bundle" if d.keys else "not collected by explain"})
        return out

    def to_json(self) -> dict[str, Any]:
        events = []
        rec = {id(e) for e in self.recovered}
        for i, e in enumerate(self.events):
            d: dict[str, Any] = {"kind": e.kind, "line": e.line, "text": e.text, "numbers": dict(e.numbers)}
            d.update({"source": e.source, "count": e.count, "category": self.event_categories.get(i),
                      "primary": e is self.primary, "recovered": id(e) in rec, "details": e.details})
            events.append(d)
        out: dict[str, Any] = {"events": events, "hypotheses": [h.to_json() for h in self.hypotheses],
                               "failed": self.explained, "ambiguous": self.ambiguous}
        if self.hypotheses and not self.events:
            out["words_only"] = True  # a leaning from the words: no failure line was found
        if self.documentation:
            out["documentation"] = True  # OOM wording in documentation (rank.DOCS_MIN), not a failure
        if self.ambiguous:
            out["to_decide"] = self.to_decide()
        if self.facts_used:
            out["facts_used"] = self.facts_used
        if self.notes:
            out["notes"] = self.notes
        if self.scan is not None:
            out["scanned"] = {"lines": self.scan.lines, "bytes": self.scan.bytes,
                              "events_not_kept": self.scan.dropped_events,
                              "readings": {k: len(v) for k, v in self.scan.readings.items()}}
            if self.scan.empty_sources:  # logs that held no byte (a truncated file, an empty pipe)
                out["scanned"]["empty_sources"] = list(self.scan.empty_sources)
        return out


def explain_text(lines: Iterable[str], facts: FactSet | None = None, prior: Any = _DEFAULT) -> Explanation:
    """Explain every OOM-like event in `lines` (str lines, with or without newlines)."""
    scanner = LogScanner()
    scanner.feed_lines(lines)
    return explain_scan(scanner.finish(), facts, prior)


def _board_for(ev: OomEvent, scan: LogScan) -> Board:
    b = Board()
    event_rules(ev, b, scan.env)
    if ev.kind in _GPU_KINDS or ev.kind == "generic_oom":
        leak_rules(scan.readings, b, scan.env)
        prose_rules(ev, b, scan.env)
    return b


def _prior(prior: Any) -> TextModel | None:
    if prior is _DEFAULT:
        from oomdoctor.explain.textmodel import default_model

        return default_model()
    return prior


def _add_prior(board: Board, model: TextModel | None, scan: LogScan, events: list[OomEvent]) -> None:
    """The text prior's share of each category's score (module docstring of explain/textmodel.py)."""
    if model is None or PRIOR_WEIGHT <= 0:
        return
    text = model_text(scan, events)
    # Where the message gives the allocator's full breakdown (the request, the total and PyTorch's
    # cache), the rules have weighed every category those numbers allow: the words then reorder
    # those, and add none that the numbers ruled out. A message cut before the cache's figure rules
    # out nothing (fragmentation hides in the figure that is missing).
    nums = set(events[0].numbers) if events else set()
    numeric = {"requested_bytes", "total_bytes"} <= nums and bool(nums & {"reserved_unallocated_bytes", "reserved_bytes"})
    w = PRIOR_WEIGHT_VAGUE if events and events[0].kind in VAGUE_KINDS else PRIOR_WEIGHT
    for cat, p in sorted(model.posterior(text).items(), key=lambda kv: -kv[1]):
        if p >= PRIOR_FLOOR and (not numeric or board.scores.get(cat, 0.0) > 0):
            # a candidate the words alone bring in says so, rather than standing without a reason
            why = (f"the words of the text point to {cat} (p = {p:.2f}, a word model fitted on confirmed reports)"
                   if p >= 0.5 else "" if board.scores.get(cat, 0.0) > 0 else
                   f"only a faint hint: the log's wording is somewhat like confirmed reports of this cause "
                   f"({p:.0%} by the wording alone), and nothing in the message itself points to it")
            board.add(cat, w * p, why)


def model_text(scan: LogScan, events: list[OomEvent], tags: bool = True) -> str:
    """What the word models read (the prior and the documentation model, and bench/explain_textmodel.py
    when it fits them): each source's head and tail, and the events' text. With `tags` (the prior), one
    word per event for its kind and one for the category its wording points to (event_tags), first, so
    that the model's bounded read (textmodel.MAX_TEXT) always reaches them."""
    text = "\n".join([t for _, _, t in scan.samples] + [e.text for e in events[:20]])
    return event_tags(events) + "\n" + text if tags and events else text


def prior_text(scan: LogScan) -> str:
    """The prior's text for a log as explain_scan hands it over (the event it answers for first, then the
    others; none for a words-only leaning): bench/explain_textmodel.py fits on exactly this."""
    ex = explain_scan(scan, None, None)
    if ex.primary is None:
        return model_text(scan, [])
    rest = [e for e in ex.events if e is not ex.primary and all(e is not r for r in ex.recovered)]
    return model_text(scan, [ex.primary] + rest)


TAGGED = 5  # events whose kind and hint become words (event_tags)
_DIGITS = str.maketrans({d: w + "_" for d, w in zip("0123456789", "zero one two three four five six seven eight nine".split())})


def event_tags(events: list[OomEvent]) -> str:
    """Words the prior learns like any other: `oomdoctor_kind_<kind>` and `oomdoctor_hint_<category>`
    for the first TAGGED events (digits spelled out: the tokeniser cuts words at digits; textmodel.tokens
    makes no bigrams of them, the tfidf form's word_counts does, as it was fitted). The data then says how far each kind and each hint is to be trusted
    beside the words. Chosen in session 5 (2026-11-26): out of fold on dev the prior alone 373 -> 388
    of 577 right first; explain at the stored weights 434 -> 435, with the weights chosen per fold
    (bench/explain_cv.py) 435 -> 432, leave-ecosystem-out 428 -> 424 (the rules are in sample there);
    on the 103 m/n reports scored with the code they arrived to, explain 50 -> 53 right first, 65 -> 67
    in the top two."""
    out = []
    for e in events[:TAGGED]:
        out.append(f"{TAG_PREFIX}kind_{e.kind.translate(_DIGITS)}".rstrip("_"))
        hint = category_hint(e.kind, e.details, e.text)
        if hint:
            out.append(f"{TAG_PREFIX}hint_{hint}")
    return " ".join(out)


def _docs_p(scan: LogScan, events: list[OomEvent], model: TextModel | None) -> float:
    """p(documentation | words) from explain/docsmodel.json; 0 without the models."""
    if model is None:
        return 0.0
    from oomdoctor.explain.textmodel import docs_model

    docs = docs_model()
    if docs is None:
        return 0.0
    text = model_text(scan, events, tags=False)  # the documentation model reads the words alone
    return docs.posterior(text).get("docs", 0.0)


def job_output(events: list[OomEvent], env: dict[str, list[str]]) -> bool:
    """What a job's own output carries and documentation does not: an event with the allocator's figures or
    a traceback, or the machine named (patterns.MACHINE_HINTS)."""
    return (any(len(e.numbers) >= 2 or "traceback_line" in e.details for e in events)
            or bool(MACHINE_HINTS & env.keys()))


def _documentation(scan: LogScan, events: list[OomEvent], model: TextModel | None) -> bool:
    """The text is documentation, not a report (its events are mentions): the documentation model where
    the only OOM wording is vague (DOCS_MIN, DOCS_WEAK_KINDS) or, surer still, whatever the events' kinds
    (DOCS_MIN_ANY), a CJK article that quotes an error bare (mentions.cjk_article), or a listing of source
    code (listing.source_listing: tests, fixtures, exception classes). What a write-up of
    one's own incident carries and such texts do not: the machine (patterns.MACHINE_HINTS), the
    allocator's figures or a traceback (the seed case 000, a Chinese post-mortem of a real A100 incident,
    has them; the CJK articles of dev benign do not); these keep a text from the last three."""
    weak = DOCS_MIN < 1 and all(e.kind in DOCS_WEAK_KINDS for e in events)
    own_output = job_output(events, scan.env)
    p = _docs_p(scan, events, model) if weak or (not own_output and DOCS_MIN_ANY < 1) else 0.0
    if weak and p >= DOCS_MIN:
        return True
    if own_output:
        return False
    lines = [ln for _, _, t in scan.samples for ln in t.splitlines()]
    # a command's output pasted alone (`kubectl describe pod`: OOMKilled, exit code 137) is no page of
    # documentation, whatever its words: a page explains in sentences. An error as a program prints it, that the
    # scanner reads as a failure, is no sentence of the page's own (vLLM's KV-cache ValueErrors are sentences: a
    # log of three of them read as documentation, no failure; a new user's walkthrough, session 26)
    if DOCS_MIN_ANY < 1 and p >= DOCS_MIN_ANY and reads_as_prose(
            ln for ln in lines if not (ERROR_LINE.match(ln) and classify_line(ln) is not None)):
        return True
    if cjk_article(lines):
        return True
    # a listing of source code, read whole, none of whose events is an error as a program prints it
    return (scan.bytes <= SAMPLE_HEAD and not any(ERROR_LINE.match(e.text) for e in events)
            and source_listing(lines))


def _reported(scan: LogScan, model: TextModel | None, after: dict[str, int] | None = None,
              sessions: dict[str, list[tuple[int, int]]] | None = None,
              skip: frozenset[tuple[str, int]] = frozenset(), handled: bool | None = None) -> tuple[OomEvent, Board] | None:
    """No event, no recovery (or only recovery lines, then what comes after them: `after`), but the text
    reports a failure (explain/reported.py): rank the causes from the text's own evidence (prose,
    readings, the text prior)."""
    hit = failure_statement(scan.samples, after, skip, handled)
    # a statement printed inside a passing test session (testrun.passing_sessions) is its test's own: look past it
    sessions = sessions or {}
    while hit is not None and (span := next((sv for sv in sessions.get(hit[0], []) if sv[0] < hit[1] < sv[1]), None)):
        after = {**(after or {}), hit[0]: max((after or {}).get(hit[0], -1), span[1])}
        hit = failure_statement(scan.samples, after, skip, handled)
    if hit is None:
        return None
    ev = OomEvent(REPORTED_KIND, hit[1], hit[2], source=hit[0])
    if _documentation(scan, [ev], model):
        return None
    b = Board()
    leak_rules(scan.readings, b, scan.env)
    prose_rules(ev, b, scan.env)
    _add_prior(b, model, scan, [ev])
    return ev, b


def _words_only(scan: LogScan, model: TextModel | None) -> list[Hypothesis]:
    """No event, no failure statement: the causes the words lean to, when they lean clearly
    (WORDS_ONLY_MIN). A leaning, not an answer: Explanation.explained stays False (exit 0)."""
    if model is None or WORDS_ONLY_MIN <= 0 or not scan.samples:
        return []
    text = "\n".join(t for _, _, t in scan.samples)
    if not LEANING_WORD.search(text):  # a log that speaks of neither memory nor a failure leans to nothing
        return []
    post = model.posterior(text)
    # What the reporter wrote about the memory (another holder, growth, fragmentation) leans as in a
    # report with a failure line (prose_rules), and lets the leaning stand even where the prior is flat.
    b = Board()
    leak_rules(scan.readings, b, scan.env)
    prose_rules(OomEvent(REPORTED_KIND, 0, ""), b, scan.env)
    if not b.scores and (not post or max(post.values()) < WORDS_ONLY_MIN):
        return []
    for cat, p in post.items():
        if p >= PRIOR_FLOOR:
            b.add(cat, PRIOR_WEIGHT * p, f"no failure line was found; the words of the text lean to {cat} "
                  f"(p = {p:.2f}, a word model fitted on confirmed reports)")
    # no failure was read: the words speak of a cause, they report none (a walkthrough, session 27: a README's "can help
    # with fragmentation" read as "the text reports fragmentation")
    return [replace(h, confidence=min(h.confidence, WORDS_MAX_CONFIDENCE),
                    evidence=[e.replace("the text reports", "the text speaks of", 1) for e in h.evidence])
            for h in _rank(b, TEMPERATURE_WORDS, NONE_SCORE_WORDS)]


def _where(source: str, line: int) -> str:
    return f"{source}:{line}" if source else f"line {line}"


def _own_lines(m: OomEvent, scan: LogScan) -> set[tuple[str, int]]:
    """The lines of a recovery marker and of its repeats (lines between them that read as the same kind), not
    whatever else lies between its first and last repeat."""
    last = m.last_line or m.line
    out = {(m.source, m.line), (m.source, last)}
    out.update(k for k in scan.bfc_wrapped if k[0] == m.source and m.line <= k[1] <= last + 1)  # a wrapped warning's two lines
    for source, first, text in scan.samples:
        if source != m.source or first > last:
            continue
        lines = text.split("\n")
        for i in range(max(m.line, first), min(last, first + len(lines) - 1) + 1):
            if classify_line(lines[i - first]) == m.kind:
                out.add((source, i))
    return out


def explain_scan(scan: LogScan, facts: FactSet | None = None, prior: Any = _DEFAULT, *,
                 bundle: str | None = None) -> Explanation:
    """`bundle`: the path the facts were read from (--bundle), so that what decides points into it."""
    ex = _explain_scan(scan, facts, prior)
    ex.bundle = bundle
    if scan.empty_sources and (ex.events or not ex.input_empty):  # (else the answer itself says so)
        ex.notes += [f"{'standard input' if s == STDIN else s} is empty (0 lines read)" for s in scan.empty_sources]
    if facts is not None:
        ex.facts_given = True
        note = _facts_note(facts, ex)
        if note:
            ex.notes.append(note)
    return ex


def event_readings(scan: LogScan) -> dict[int, str]:
    """The category explain gives each event of the scan (the answer's for its primary event), by id of the event:
    what doctor's workload.oom_events fact records, so that it says what `explain` says of the same lines."""
    ex = explain_scan(scan)
    out = {id(e): c for i, e in enumerate(ex.events) if (c := ex.event_categories.get(i))}
    if ex.primary is not None and ex.hypotheses:
        out[id(ex.primary)] = ex.hypotheses[0].category
    return out


def _facts_note(facts: FactSet, ex: Explanation) -> str | None:
    """What the facts that decide between the leading causes said where they were read (--here, --bundle): a
    user who asked for them must not be left to guess whether they were found (a new user's walkthrough)."""
    if not ex.ambiguous:
        return None
    keys: list[str] = []
    for h in ex.hypotheses[:2]:
        d = decider(h.category, h.kind)
        keys += [k for k in (d.keys if d else ()) if k not in keys]
    if not keys:
        return None
    said = []
    for k in keys:
        entry = facts.get(k)
        if entry is None:
            said.append(f"{k}: not read")
        elif not entry.available:
            said.append(f"{k}: not available ({str(getattr(entry, 'reason', ''))[:160]})")
        else:
            said.append(f"{k}: read, " + ("used above" if k in ex.facts_used else "it settles neither cause"))
    return "the facts that decide, as read: " + "; ".join(said)


def _explain_scan(scan: LogScan, facts: FactSet | None = None, prior: Any = _DEFAULT) -> Explanation:
    logged = [e for e in scan.events if e.kind not in _MARKERS]
    crashes = {id(e): bfc_crash(e, scan) for e in scan.events if e.kind in RECOVERY}
    # (a recovery line the job crashed right after recovered nothing: recovery.crashed_after)
    recovered = recovered_events(logged, [e for e in scan.events if e.kind in RECOVERY and crashes[id(e)] is None
                                          and not crashed_after(e, scan)])
    # a BFC warning followed by a crash is no caught shortage, and no failure by itself either: said, not scored
    notes = [f"TensorFlow's allocator ran short at {_where(e.source, e.line)} (a warning its caller can do without: "
             f"by itself no failure); then the job crashed at {_where(e.source, c[0])}: {c[1]}"
             for e in scan.events if (c := crashes.get(id(e))) is not None][:3]
    notes += collective_timeout_note(scan)
    recovered += [e for e in logged if all(e is not r for r in recovered) and (went_on(e, scan) or loop_went_on(e, scan)
                                                                                     or retry_went_on(e, scan)
                                                                                     or stepped_down_before(e, scan, logged))]
    rec_ids = {id(e) for e in recovered}
    events = [e for e in logged if id(e) not in rec_ids]
    # a test session whose runner said every test passed: the OOMs printed inside it were its tests' own
    sessions = passing_sessions(scan.samples)
    events = [e for e in events if not in_passing_session(e.line, e.last_line or e.line, e.details.get("traceback_line"),
                                                          sessions.get(e.source, []))]
    model = _prior(prior)
    documentation = bool(events) and facts is None and _documentation(scan, events, model)
    if documentation:
        events = []  # documentation that only mentions OOMs in passing: no failure, as for mentions
    events += bundle_events(facts)
    # recovery lines alone (no OOM line of the job's was caught): a failure told after the last of them is
    # a new one ("... preempted ... not enough KV cache space", then vLLM's swap-space abort; review, session 9)
    bare = not events and bool(recovered) and all(e.kind in RECOVERY for e in recovered)
    if not events and (not recovered or bare):
        after: dict[str, int] = {}
        skip: set[tuple[str, int]] = set(scan.bfc_wrapped)  # a wrapped BFC warning reports no failure, caught or not
        for m in recovered:
            if m.kind in SELF_CONTAINED:
                # a library's own caught shortage (every kinds.SELF_CONTAINED kind: TF's BFC warning, a skipped
                # TensorRT tactic, Detectron2's CPU fallback, vLLM's preemption) recovers no other event: a failure
                # before it still counts, only its own lines are not read (review, session 17: a traceback pasted
                # above a BFC warning had read as "no failure"); a handled traceback near it stays handled
                # (reported._HANDLED_TB, as with `after`)
                skip.update(_own_lines(m, scan))
                continue
            after[m.source] = max(after.get(m.source, -1), m.last_line or m.line)
        # a handled traceback is passed over only beside a recovery (not for a wrapped BFC warning a crash followed)
        got = _reported(scan, model, after, sessions, frozenset(skip), handled=bool(recovered))
        if got is not None:
            ev, b = got
            used = fact_rules(facts, b, {ev.kind}, ev)
            hyps = _rank(b)
            return Explanation(events=[ev], hypotheses=hyps, primary=ev,
                               event_categories={0: hyps[0].category}, facts_used=used, scan=scan, notes=notes)
    if not events:
        every = sorted(recovered, key=lambda e: (e.source, e.line))
        leaning = _words_only(scan, model) if not recovered else []
        return Explanation(events=every, hypotheses=leaning, scan=scan, recovered=recovered,
                           documentation=documentation, notes=notes)
    boards = [_board_for(e, scan) for e in events]
    cats = {}
    for i, b in enumerate(boards):
        if b.scores:
            cats[i] = max(b.scores.items(), key=lambda kv: kv[1])[0]

    def rank(i: int) -> tuple[float, int]:
        top = max(boards[i].scores.values(), default=0.0)
        return (top + (1.0 if events[i].kind in _GPU_KINDS else 0.0) + (1.5 if _incident(events[i], events) else 0.0)
                - (2.0 if _TEARDOWN.search(events[i].text) else 0.0), i)

    p = max(range(len(events)), key=rank)
    # Repeats of one message kept apart by their gaps (events.OomEvent.group) are one failure: the most repeated
    # (then the first) is read, the others add their categories at the discount, shared among them (review,
    # session 16: the answer must not depend on which rank printed last).
    sib = [i for i, e in enumerate(events) if e.group and e.group == events[p].group]
    if len(sib) > 1:
        p = max(sib, key=lambda i: (events[i].count, -i))
    final = Board()
    _merge(final, boards[p], 1.0)
    for i, b in enumerate(boards):
        if i != p and events[i].kind != events[p].kind:
            _merge(final, b, _OTHER_EVENT_WEIGHT)
        elif i != p and i in sib:
            _merge(final, b, _OTHER_EVENT_WEIGHT / (len(sib) - 1))
    _add_prior(final, model, scan, [events[p]] + [e for e in events if e is not events[p]])
    kinds = {e.kind for e in events}
    used = fact_rules(facts, final, kinds, events[p])
    hyps = _rank(final)
    if kinds == {"exit_137"} and not used:
        hyps = [replace(h, confidence=min(h.confidence, SIGKILL_MAX_CONFIDENCE)) for h in hyps]
    return Explanation(events=events + recovered, hypotheses=hyps, primary=events[p], event_categories=cats,
                       facts_used=used, scan=scan, recovered=recovered, notes=notes,
                       category_kinds=_category_kinds(boards, events, p))


def _category_kinds(boards: list[Board], events: list[OomEvent], p: int) -> dict[str, str]:
    """The event kind each cause came from: the primary event's where its board holds the cause, else that of the
    other event whose board gave it the most."""
    out = {cat: events[p].kind for cat in boards[p].scores}
    for cat in {c for b in boards for c in b.scores} - out.keys():
        i = max((i for i in range(len(boards)) if i != p), key=lambda i: boards[i].scores.get(cat, 0.0))
        out[cat] = events[i].kind
    return out


def collective_timeout_note(scan: LogScan) -> list[str]:
    """A rank that waited in a collective until the timeout did not fail by itself: a rank it waited for stopped,
    hung or fell behind. Said as a note, never as an event or a cause (no labelled report holds one yet). Read from
    the whole-log hints, and from each log's sampled tail, where a long run's timeout is (hints stop at 8 MiB)."""
    seen = list(scan.env.get("collective_timeout") or [])
    if not seen:
        pat = ENV_PATTERNS["collective_timeout"]
        seen = [m.group(0) for _, _, text in scan.samples if (m := pat.search(text))]
    if not seen:
        return []
    op = _OP_TYPE.search(seen[0])
    what = f"a collective ({op.group(1)}) timed out" if op else "a collective timed out"
    return [f"{what}: a rank in this log waited for a rank of the job that had stopped, hung or fallen behind (an "
            "OOM or another error on that rank, uneven work such as evaluation or saving on one rank only or ranks "
            "with different numbers of batches, or the network). The timeout itself is no cause: keep every rank's "
            "output (torchrun --log-dir DIR --tee 3, or each Slurm task's file) and run `oomdoctor explain` on the "
            "rank that stopped first"]


_OP_TYPE = re.compile(r"OpType=(\w{1,40})")


def _sticky(ev: OomEvent) -> bool:
    """A device-side assert or an illegal address leaves the CUDA context unusable: every later CUDA call
    fails too (cuBLAS handle creation, allocations), so the program error is the incident, not those."""
    return ev.kind == "cuda_program_error" and ("ssert" in ev.text or "llegal" in ev.text.lower()
                                                  or "ILLEGAL" in ev.text)


# A library's status from tearing down what failed to come up ("could not destroy cudnn handle:
# CUDNN_STATUS_BAD_PARAM" after "could not create cudnn handle"): a consequence, never the incident (session 10)
_TEARDOWN = re.compile(r"(?i)\b(?:could not|failed to|unable to) destroy\b|\b(?:cudnn|cublas)Destroy\b")


def _incident(ev: OomEvent, events: list[OomEvent]) -> bool:
    """The error the later ones follow from: a sticky program error (_sticky), unless the driver failed before
    it, then that driver error ("CUDA driver version is insufficient for CUDA runtime version", then an
    illegal address: nothing on the GPU could work; session 10)."""
    if ev.kind == "driver_error":
        return any(_sticky(e) and e.source == ev.source and e.line > ev.line for e in events)
    return _sticky(ev) and not any(d.kind == "driver_error" and d.source == ev.source and d.line < ev.line for d in events)


def _merge(into: Board, b: Board, w: float) -> None:
    for layer, h in b.layer_hints.items():
        into.layer_hints[layer] = into.layer_hints.get(layer, 0.0) + h * w
    for cat, s in b.scores.items():
        ev = b.evidence.get(cat, [])
        fixes = b.fixes.get(cat, [])
        into.add(cat, s * w, ev[0] if ev else "")
        for e in ev[1:]:
            into.add(cat, 0.0, e)
        for f in fixes:
            into.add(cat, 0.0, "", f)


def _rank(b: Board, temperature: float | None = None, none: float | None = None) -> list[Hypothesis]:
    items = [(c, s) for c, s in b.scores.items() if s > 0]
    if not items:
        return [Hypothesis("unknown", 0.5, ["no rule matched the events' wording"], [], 0.0)]
    t = TEMPERATURE if temperature is None else temperature
    n = NONE_SCORE if none is None else none
    hyps = []
    top = max(n, max(s for _, s in items))  # shifted by the largest: exp() of a large score at a small temperature overflows
    z = sum(math.exp((s - top) / t) for _, s in items) + math.exp((n - top) / t)
    for c, s in sorted(items, key=lambda kv: -kv[1]):
        conf = round(max(0.01, min(0.99, math.exp((s - top) / t) / z)), 2)
        hyps.append(Hypothesis(c, conf, b.evidence.get(c, []), b.fixes.get(c, []), round(s, 3)))
    return hyps
