"""Lines that only mention a failure, not report one: advice, negations, quotations, docs' shapes.

The scanner's patterns (explain/patterns.py) find a failure's words; whether those words report a
failure that happened or only mention one (docs, FAQs, change logs, grep of source, a feature's
description) is judged here, on the text around each match. The no-event fallback
(explain/reported.py) asks the same question. Pure: a line and a span in, a verdict out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# Lines that only mention a failure: advice ("... to avoid out of memory errors", vLLM's 'Avoid "CUDA
# out of memory" by lowering max_num_seqs'), negation ("no OOM so far"), a quoted phrase (docs, grep of
# source: `if "out of memory" in str(e)`), TensorFlow's own hint ("If you want to see a list of
# allocated tensors when OOM happens"). Judged on the text just before each match (and a closing
# quote just after it): an error message puts "Error: " or a log prefix there, not these words.
_ADVICE_BEFORE = re.compile(
    r"(?i)(?:\b(?:avoid\w*|prevent\w*|reduc\w+ the (?:risk|chance)|to reduce|if you\b|in case of|consider\w*|"
    r"mitigat\w+|workaround|handl(?:e|es|ing)|catch(?:es|ing)?|recover\w* from|protect\w* against|"
    r"guard\w* against|troubleshoot\w*|when\s+(?:an?\s+)?(?:OOM|out of memory)|debug\w*|"
    r"detect\w*|estimat\w*|simulat\w*|retr(?:y|ies|ied|ying)|back(?:s|ing|ed)? off|see if|check\w* (?:if|whether|for))\b[^:!]{0,50}"
    r"|\b(?:would|could|might|may|will|can)\b(?:\s+[\w-]+){0,2}\s*(?:CUDA\s+|GPU\s+)?"
    # "instead of OOM", "Instead of crashing with CUDA out of memory, we ..." (a change's own words)
    r"|\b(?:instead of|rather than)\s+(?:[\w-]+ing\s+(?:with|on|from|due to|because of)\s+(?:an?\s+|the\s+)?)?(?:CUDA\s+|GPU\s+)?"
    # "you may be running into OOMs", "does not lead to out of memory errors", "if a CUDA OOM exception is raised"
    r"|\b(?:would|could|might|may|will|can)\s+(?:be\s+|also\s+|still\s+)?(?:running into|run into|getting|get|hitting|hit|"
    r"seeing|see|causing|cause|lead to|result in)\s+(?:an?\s+|the\s+|more\s+)?(?:CUDA\s+|GPU\s+)?"
    r"|\b(?:would|could|might|may|will|can)\b(?:\s+[\w-]+){0,5}\s+(?:lead to|result in|cause|trigger)\s+(?:an?\s+)?(?:CUDA\s+|GPU\s+)?"
    r"|\b(?:does|do|did|will|would|should)(?: not|n't) (?:lead to|cause|result in|trigger|produce|give)\s+(?:an?\s+|any\s+)?(?:CUDA\s+|GPU\s+)?"
    r"|\bif\s+(?:an?|the|any)\s+(?:[\w-]+\s+){0,2}"
    r"|\b(?:when(?:ever)?|upon|about|against|regarding)\s+(?:an?\s+|the\s+)?(?:[\w-]+\s+)?"
    r"|\bon an?\s+(?:[\w-]+\s+)?"
    # "only reduced the training batch size on OOM": what a mechanism does upon one
    r"|\b(?:reduc\w+|halv\w+|retr\w+|skip\w*|restart\w*|shrink\w*|decreas\w+|lower\w*)\b"
    r"(?:(?!\b(?:still|again|but|die[sd]?|dying|fail\w*|crash\w*|kill\w*|stops?|stopped|error)\b)[^.;:!?\n]){0,40}\bon\s+"
    # what a kind of thing does, in a relative clause: "batch sizes that succeed or lead to CUDA OOM"
    r"|\b(?:that|which)\s+(?:\w+\s+){0,3}?(?:lead|leads|cause|causes|result|results|trigger|triggers)\s+(?:to\s+|in\s+)?(?:an?\s+)?(?:CUDA\s+|GPU\s+)?"
    # source code quoted by grep or docs: the message is an argument, not something that happened
    r"|(?-i:\b(?:raise|except|assert|warnings\.warn|logger\.\w+|logging\.\w+|print)\b[^\n]{0,60})"
    # C++ code: "throw rmm::out_of_memory(...)", "catch (...)" (not CNTK's log "About to throw exception '...'")
    r"|(?-i:\b(?:throw\s+[\w:]+\(|catch\s*\()[^\n]{0,60})"
    # other languages' logging and error calls (session 18): C++ `LOG(ERROR) << "..."`, `std::cerr <<`, C's
    # `fprintf(stderr, "..."`, Go's `log.Printf("...` / `fmt.Errorf("...` / `errors.New("...`, Rust's `panic!("...`,
    # JavaScript's `console.error("...`: a program's source quoting the message, never a log of it
    r"|(?-i:(?:\bLOG\((?:INFO|WARNING|ERROR|FATAL|DFATAL)\)\s*<<|\bstd::c(?:err|out)\s*<<|\bf?printf\s*\(|"
    r"\b(?:log|fmt|errors|klog|glog)\.(?:Print\w*|Fatal\w*|Error\w*|Warn\w*|Info\w*|New|Sprintf)\(|"
    r"\b(?:panic|eprintln|println|format|bail|anyhow)!\(|\bconsole\.(?:log|error|warn)\()[^\n]{0,60})"
    # a status compared or switched on: `if (err == cudaErrorMemoryAllocation)`, `case CUDA_ERROR_OUT_OF_MEMORY:`
    # (not glog's "Check failed: err == CUBLAS_STATUS_SUCCESS", a log; not "will case an OOM", a typo of cause)
    r"|(?-i:(?:\b(?:if|elif|while|assert)\b\s*\(?\s*[\w.\->:\[\]]{1,60}\s*[=!]=|^\s*case)\s*(?:[\w:]+::)?)"
    # a string returned by code (an error-to-string switch: `case X: return "out of memory";`)
    r"|(?-i:(?:^\s*|[;{:]\s*)return\s+(?:[\w:]+\()?[\"'])"
    # "If you see `RuntimeError: CUDA out of memory`": what a reader might meet (docs), a name and colon allowed
    r"|\bif you\s+(?:see|get|encounter|hit|run into|receive|observe|experience|are seeing|are getting|still get)\s+"
    r"(?:an?\s+|the\s+|this\s+)?[`\"'\u201c]?(?:[\w.]+(?:Error|Exception):\s*)?"
    # a class definition: "class OutOfMemoryError(MemoryError):" (CuPy's memory.pyx; session 10, aa3 dev)
    r"|(?-i:^\s*(?:cdef\s+|cpdef\s+)?class\s+\w+\s*\([^\n]{0,60})"
    r"|\b(?:no|without|zero|never|not an?|avoids?|prevents?|each|every|any|per|potential|possible)\s+(?:more\s+|any\s+|further\s+|an?\s+|the\s+)?(?:CUDA\s+|GPU\s+)?"
    # "no late-epoch OOM", "without a single OOM": a negation with one word between
    r"|\b(?:no|without|never)\s+(?:an?\s+|single\s+)?[\w-]+\s+"
    # a purpose: "num_kv_blocks = 10 # Low cache size to trigger OOM quickly" (a test that provokes one);
    # what a situation can do to anyone: "resuming from a checkpoint can get a user out of memory"
    r"|(?:#[^#\n]{0,60}|\bin order |\bdeliberately |\bon purpose )\bto (?:trigger|provoke|induce|force|simulate|cause)\s+(?:an?\s+|the\s+)?(?:CUDA\s+|GPU\s+)?"
    r"|\b(?:would|could|might|may|can)\s+(?:get|put|drive|push)\s+(?:an?\s+|the\s+)?(?:user|users|you|people|someone|anyone)\s+)$")
_ERROR_VALUE = re.compile(r"(?:Error|Exception|error|msg|message|reason|what|Hint|detail|stderr)[\"']?\s*[:=(]\s*[\"']$")
_QUOTES = "\"'`\u201c\u2018"
_CLOSE = {"\u201c": "\u201d", "\u2018": "\u2019"}
# generic_oom ("out of memory" or "OOM" with no known source) is a failure only in an error's words.
ERROR_WORDS = re.compile(r"(?i)error|fail|exception|fatal|abort|killed|crash|cannot|can't|could not|unable|panic|"
                          r"terminat|exceed|exhaust|insufficient|\bran out\b|runs? out\b|went out\b|exit|died|\bdead\b|"
                          r"until|leads? to|leading to|caus\w+|results? in|resulting in|\bgot\b|\bgets?\b|getting|\bhit|"
                          r"throw|rais\w+|encounter|occur|happen|trigger|issue|problem|trouble|\bbug\b|leak|"
                          r"grow|increas|[Mm]emory (?:error|exception)")


# Prose about OOMs in general (docs, READMEs), not one that happened.
GENERAL_STATEMENT = re.compile(r"(?i)\b(?:often|usually|typically|commonly|generally|frequently|most likely|"
                                r"in general|for example|e\.g\.|essentially|basically|it'?s possible|it is possible)\b"
                                # the class, in the plural: "CUDA OOMs are Python exceptions", "OOMs can be caught"
                                r"|\bOOMs (?:are|aren't|can|cannot|can't|will|would|should|need|must|usually|often)\b"
                                # how a program behaves, in the present: "# OOM is raised when we try to bring data ..."
                                r"|\b(?:is|are|gets?) (?:raised|thrown|triggered) (?:when|if|whenever)\b(?![^.\n]*\b(?:I|my)\b)")


# Lines whose shape says that nothing failed, whatever words they quote (issue 17's benign logs):
# - a counter at zero: "OOM count: 0", "CUDA OOMs: 0", "OOM errors: 0 (0.00%)", "Skipped 0 batches due to OOM";
# - a test runner's verdict on a test that passed or was skipped: pytest "...::test_x[OOM-1] PASSED",
#   unittest "test_oom (tests.T) ... ok", GoogleTest "[  PASSED  ] OOMTest.Alloc";
# - a Markdown heading ("## CUDA out of memory": a section of docs or a FAQ, not a log line; a short
#   title with no colon, unlike a code comment that quotes an error);
# - a change-log entry or commit title that fixes or prevents it ("- Fixed CUDA out of memory when ...").
_ZERO_COUNT_AFTER = re.compile(r"(?i)s?(?:\s+(?:errors?|events?|counts?|kills?|failures?|retries|occurrences|exceptions))?"
                               r"\s*[:=|]\s*0+(?:\.0+)?(?![\d.]*\s*[%]?\s*[1-9])(?!\.?\d)")
_ZERO_COUNT_BEFORE = re.compile(r"(?i)(?:^|[\s(\[|,;])(?:0|zero|no)\s+(?:[\w-]+\s+){0,3}(?:due to|from|because of|caused by)\s+"
                                r"(?:an?\s+|the\s+)?(?:CUDA\s+|GPU\s+)?$")
_TEST_VERDICT = re.compile(r"(?:::\S+|\.\.\.)\s+(?:PASSED|SKIPPED|XFAIL|XPASS|ok|skipped|expected failure)(?:\s+\([^)\n]*\)|\s+\'[^\'\n]*\')?\s*(?:\[\s*\d+%\])?\s*$"
                           r"|^\s*(?:PASSED|SKIPPED|XFAIL|XPASS)\s+\S+::|^\s*\[\s+(?:OK|PASSED|SKIPPED)\s+\]\s")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+[^:#\n]{1,60}$"  # a short title, not "# <code comment>: <error>"
                      # a section title of two or more #s may quote the error: "## CUDA error: device-side assert triggered"
                      r"|^\s{0,3}#{2,6}\s+[^#\n]{1,80}$"
                      # or a FAQ's question as a section title: "### I am using ... 4GB VRAM ..., I get CUDA Out Of Memory"
                      r"|^\s{0,3}#{2,6}\s+(?=[^\n]*(?:\bI (?:get|got|see)\b|\bwhy\b|\bhow\b|\?))[^\n]{1,300}$")
_CHANGE_ENTRY = re.compile(r"(?i)^\s*(?:[-*+\u2022]\s+|\d+\.\s+)?(?:\[[\w ]+\]\s*)?"
                           r"(?:fix(?:e[sd])?|resolv(?:e[sd]?|ing)|prevent(?:s|ed)?|avoid(?:s|ed)?|reduc(?:e[sd]?|ing)|"
                           # a change log's or a guide's other verbs: "- Add OOM fail reason ...", "* Disable reporting OOM ..."
                           r"add(?:s|ed)?|revert(?:s|ed)?|support(?:s|ed)?|improv(?:e[sd]?|ing)|updat(?:e[sd]?|ing)|handl(?:e[sd]?|ing)|"
                           r"expos(?:e[sd]?|ing)|document(?:s|ed)?|implement(?:s|ed)?|introduc(?:e[sd]?|ing)|allow(?:s|ed)?|"
                           r"enabl(?:e[sd]?|ing)|disabl(?:e[sd]?|ing)|catch(?:es)?|raise[sd]?|refactor(?:s|ed)?|remov(?:e[sd]?|ing))\b")


# A section title underlined with one punctuation character repeated (reStructuredText; Markdown's setext "Title" over
# "-----"): a heading of documentation, as "## Title" is (_HEADING), not a log line. Only its next line tells, so the
# scanner (events.py) and the no-event fallback (reported.py) ask it with that line (a new user's walkthrough, session
# 28: a JAX docs diff's "Common causes of OOM failures" over dashes was a failure, exit 1). The title is short and
# hardly indented, the adornment about as long as it (reStructuredText asks at least as long; a log's separator of
# 70 dashes under a long error line is not one).
_ADORNMENT = re.compile(r"^([=\-~^\"'`*+#:.<>_])\1{2,}[ \t\r]*$")
TITLE_MAX = 80


def title_like(line: str) -> bool:
    body = line.strip()
    return 0 < len(body) <= TITLE_MAX and len(line) - len(line.lstrip()) <= 3


def underlines(title: str, line: str) -> bool:
    """`line` is the adornment under `title`, a section title (title_like)."""
    n, t = len(line.strip()), len(title.strip())
    return title_like(title) and _ADORNMENT.match(line) is not None and t - 2 <= n <= t + 8


def _line_says_no_failure(line: str, start: int, end: int) -> bool:
    return bool(_ZERO_COUNT_AFTER.match(line, end) or _ZERO_COUNT_BEFORE.search(line[max(0, start - 60):start])
                or _TEST_VERDICT.search(line) or _HEADING.match(line) or _CHANGE_ENTRY.match(line))


# Chinese/Japanese/Korean prose that speaks of the error in general (an article or a FAQ): "很多人都会遇到",
# "常见", "本文", "什么是", "意为"; "よくある", "一般的に"; "가장 많이 겪는", "일반적으로". Only in the clause
# around the match (fullwidth punctuation ends a clause), on a line of CJK prose, and not where the
# writer speaks of their own run ("我", "报错了", "出ます", "発生しました", "발생했"): a pasted log line has no
# CJK, and a report says what happened to the writer.
CJK_LETTERS = "\u3040-\u30ff\u4e00-\u9fff\uac00-\ud7af"  # kana, CJK ideographs, Hangul (a regex class body)
CJK_CHAR = re.compile(f"[{CJK_LETTERS}]")
# A Chinese clause that says what may happen, not what did: "如果", "可能", "一般", "建议" (reported.py, and
# with a few more words the CJK "Killed" of patterns.py)
CJK_HEDGE = "如果|假如|若|一旦|可能|通常|一般|例如|比如|建议|避免|防止"
CJK_GENERAL = re.compile(r"很多人|许多人|不少人|大多数人|常见|本文(?![件档本])|(?<!为)什么是|意为|指的是|一般来说|"
                         r"よくある|一般的に|であろう|가장 많이|흔히|일반적으로|경우가 많")
CJK_OWN_RUN = re.compile(r"我|自己|咱|报错了|出现了|出ます|出ました|発生しました|私|自分|(?<![\uac00-\ud7af])(?:제가|저는)|발생했|났습니다")
_CJK_CLAUSE_END = "，。！？；：、「」（）\n"


# A Chinese/Japanese/Korean article or FAQ that quotes an error inside its explanation: the issue reports
# in these languages hold at most four lines of CJK prose (dev, session 7: 17 of 706 reports; the 436
# silver excerpts), the articles that quoted an error five or more (dev benign: 6 of the 8 CJK pages read
# as failures). A line with a log's prefix (a chatbot's or a server's output) is no prose.
CJK_ARTICLE_LINES = 5
_CJK_PROSE_MIN = 8  # CJK letters on a line of prose
_LOG_PREFIX = re.compile(r"^\s*(?:[\[(]?\d{1,4}[-/:.]\d|\[?(?:INFO|WARN\w*|ERROR|DEBUG|TRACE|CRITICAL|FATAL)\b|[^\s|]+\s*\|)")


# A traceback's frame ('  File "D:\\桌面\\...\\train.py", line 120'), a path, a trailing code comment.
_CODE_LINE = re.compile(r'^\s*File "')
_NOT_PROSE_PART = re.compile(r"[A-Za-z]:\\\S*|(?:^|\s)[~.]?/\S+|\s#.*$")


def cjk_article(lines: Iterable[str]) -> bool:
    """True when the text holds CJK_ARTICLE_LINES lines of CJK prose and speaks of no run of the writer's
    own: an article, not a report. A traceback's frames, paths and code comments are no prose; a line in
    the first person (CJK_OWN_RUN: 我, 报错了, 발생했, ...) is a report's, and two
    of them make the text one."""
    n = own = 0
    for line in lines:
        if not CJK_CHAR.search(line) or _LOG_PREFIX.match(line) or _CODE_LINE.match(line):
            continue
        line = _NOT_PROSE_PART.sub(" ", line)  # a path's folder names, a code comment: not prose
        if CJK_OWN_RUN.search(line):
            own += 1
            if own >= 2:
                return False
        elif len(CJK_CHAR.findall(line)) >= _CJK_PROSE_MIN:
            n += 1
    return n >= CJK_ARTICLE_LINES


_WORD = re.compile(r"[A-Za-z][a-z]+(?:'[a-z]+)?")
PROSE_LINES_MIN = 3  # lines of prose a documentation page has, and a pasted command's output has not


def reads_as_prose(lines: Iterable[str]) -> bool:
    """Enough prose for a page of documentation: PROSE_LINES_MIN lines of it, or one or more that hold at least half
    of the text's words (a Markdown paragraph is one long line: a short FAQ entry has one or two; review, session 25).
    `kubectl describe`'s output pasted alone has neither."""
    lines = list(lines)
    n = prose_lines(lines)
    if n >= PROSE_LINES_MIN:
        return True
    if n == 0:
        return False
    total = in_prose = 0
    for line in lines:
        words = len(_WORD.findall(line)) + len(CJK_CHAR.findall(line)) // 2
        total += words
        if prose_lines([line], 1):
            in_prose += words
    return in_prose >= 0.5 * max(total, 1)


def prose_lines(lines: Iterable[str], enough: int = PROSE_LINES_MIN) -> int:
    """Lines that read as sentences (eight words or more, nearly all of them words; or CJK_PROSE_MIN CJK letters),
    counted up to `enough`: `kubectl describe`'s output, a table, a log has none or one."""
    n = 0
    for line in lines:
        if _LOG_PREFIX.match(line) or _CODE_LINE.match(line):
            continue
        tokens = line.split()
        words = _WORD.findall(line)
        if (len(words) >= 8 and len(words) >= 0.7 * len(tokens)) or len(CJK_CHAR.findall(line)) >= _CJK_PROSE_MIN:
            n += 1
            if n >= enough:
                break
    return n


def _cjk_general_clause(line: str, start: int, end: int) -> bool:
    if not CJK_CHAR.search(line) or CJK_OWN_RUN.search(line):
        return False
    lo = max((line.rfind(c, 0, start) for c in _CJK_CLAUSE_END), default=-1) + 1
    his = [i for i in (line.find(c, end) for c in _CJK_CLAUSE_END) if i >= 0]
    return bool(CJK_GENERAL.search(line, lo, min(his) if his else len(line)))


def is_mention(line: str, start: int, end: int) -> bool:
    """True when the match line[start:end] is advice, a negation or a quotation, not a failure."""
    before = line[max(0, start - 80):start]
    if _cjk_general_clause(line, start, end):
        return True
    if _identifier_in_code(line, start, end):
        return True  # 'cuMemAllocResult = CUDA_ERROR_OUT_OF_MEMORY;', 'c.State.OOMKilled = true', a schema's "OOMKilled:"
    if _SHELL_COMMAND.match(line) or _CODE_COMMENT.search(line, 0, start) or (_HASH_COMMENT.match(line) and not _ANNOTATION.search(line)):
        return True  # a command typed at a prompt (grep's pattern), a C/C++/Go/JS comment ("///< Out of memory")
    if _TABLE_LITERAL.search(line, max(0, start - 300), start) and _TABLE_LITERAL_END.match(line, end):
        return True  # the first literal of a struct/table row in code: '{"cudaMalloc failed: out of memory", true},'
    if _ADVICE_BEFORE.search(before) or _line_says_no_failure(line, start, end):
        return True
    if _CONDITIONAL.search(line[max(0, start - 80):end + 30]):
        return True
    if line[start - 1:start] == "(" and line[end:end + 1] == ")" and line[start:end].isalpha() and line[start:end].isupper():
        return True  # an abbreviation being defined: "out-of-memory (OOM) errors"
    if _REGEX_AROUND.search(line, max(0, start - 6), start) or MODAL_AFTER.match(line, end):
        return True  # a regular expression that looks for the message (".*CUDA out of memory.*"), "OOM errors may occur"
    comment = _TRAILING_COMMENT.search(line, 0, start)
    if comment is not None and _HEDGE.search(line, comment.end(), start):
        return True  # "jobs_per_gpu: 1  # If each GPU has large memory, ... (until OOM)": a config's comment
    label = _BOLD_LABEL.match(line)
    if label is not None and not line[label.end():].strip() and _NAMED_ERROR.search(line):
        label = None  # a bolded error alone on its line ("**CUDA_ERROR_OUT_OF_MEMORY:**") is the error, not a label (review)
    if (_TABLE_ROW.match(line) or _ISSUE_ENTRY.match(line) or (label is not None and start < label.end()) or _TYPESET_QUOTE_LINE.match(line)
            or (_SYMPTOM_FIELD.match(line) and not _NAMED_ERROR.search(line))):
        return True  # a Markdown table of errors, or a bold label ("**Out of Memory (OOM):** try ..."): docs
    if (_CODE_SHAPE.search(line) or _THIS_CHANGE.search(line, max(0, start - 200), start) or _STRING_ASSIGNED.search(before)
            or ((lit := _SOURCE_LITERAL_LINE.match(line)) is not None and lit.end() <= start
                and line.find(line[lit.end() - 1], lit.end(), start) < 0)):  # inside that first literal, not a JSON value after a key
        return True  # a format string or grep of source ('"Out of memory error on GPU %d"'), a PR's own words
    if any(m.start(2) <= start and end <= m.end(2) for m in _MEMBERSHIP_TEST.finditer(line)):
        return True  # a literal tested against an exception in code: '"... out of memory" in exception.args[0]'
    if start <= 120 and (_KWARG_IN_CALL.search(line[:start]) or _FIRST_ARG_LITERAL.search(line[:start])):
        return True  # a keyword argument of a call in code: 'patch.object(ce, "read_log_tail", return_value="Traceback: OOM")'
    if _MECHANISM_AFTER.match(line, end):
        return True  # the name of a mechanism about OOMs: "OOM backoff logic", "the OOM memory summary"
    wide = line[max(0, start - 200):start]
    if _COMMON_ERROR_BEFORE.search(wide) and not _FIRST_PERSON.search(wide):
        return True  # an explainer's "a common error encountered is the OutOfMemoryError: ..." (not "I got the common error")
    # a short quotation that holds the match: "`CUDA out of memory`", "'GPU OOM' errors"
    qm = _QUOTE_OPEN.search(before)
    if qm and qm.group(1) in "\"`" and line.count(qm.group(1), 0, start - len(before) + qm.start()) % 2:
        qm = None  # that quote closes an earlier one ("`52%` with message killed"): the match is outside
    if qm and not _ERROR_VALUE.search(before[: qm.start() + 1]):
        q = qm.group(1)
        close = _CLOSE.get(q, q)
        j = line.find(close, end)
        # reported ("I get `...`") unless it names a kind of error in the plural, as a FAQ does
        # (not a line that is one code span and nothing else, "`srun: error: gpu001: task 0: Out Of Memory`": a
        # log line pasted in inline code; silver, session 19)
        whole = (not line[:start - len(before) + qm.start()].strip() and not line[j + len(close):].strip()
                 and _LOG_LINE_SHAPE.search(line, start - len(before) + qm.start(), j))
        if 0 <= j - end <= 40 and not (whole and q == "`") and (not _REPORTED_BEFORE.search(before[: qm.start()])
                                                               or _KIND_PLURAL.match(line, j + len(close))):
            return True
    return False


# "if the GPU runs out of memory", "when CUDA runs out of memory": what a program does in that case
# (change logs, docs), not a failure that happened
_CONDITIONAL = re.compile(r"(?i)\b(?:if|when(?:ever)?|in case|unless)\s+(?:the\s+|a\s+|your\s+|it\s+)?"
                          r"(?:[\w-]+\s+)?(?:runs?|goes|go|gets?)\s+out of (?:GPU |CUDA |device )?memory\b")
# What a program's line has and a phrase set in code in docs ("`OOMKilled`", "`CUDA out of memory`") has not: a
# "prefix: message" structure or a timestamp (review, session 19).
_LOG_LINE_SHAPE = re.compile(r"\w[\w.\])]*: \S|\d{2}:\d{2}:\d{2}")
_QUOTE_OPEN = re.compile("([\"'`\u201c\u2018])[\\w .-]{0,24}$")
# A quotation that a report puts after what happened to the job: "I get `CUDA out of memory`", "it crashes
# saying "CUDA driver version is insufficient..."", "fails with message `killed`". Not docs' quoting of
# a phrase ("the `out of memory` error means ..."), whose verbs are not the job's.
# "OOM" as the modifier of a mechanism's name (docs, PRs, changelogs), not a failure that happened.
# A line that is one quotation in typographic quotes: an article quoting the message (terminals and
# issue pastes use straight quotes or backticks).
_TYPESET_QUOTE_LINE = re.compile("^\\s*[\u201c\u2018][^\u201d\u2019\\n]{1,300}[\u201d\u2019][.!]?\\s*$")
_TABLE_ROW = re.compile(r"^\s*\|(?:[^|\n]*\|){3,}\s*$"
                        # a whitespace-aligned benchmark row with OOM in two or more cells ("gsplat v0.1.11  n/a
                        # OOM   OOM   OOM"): results, not a failure (a log's one State column is not matched)
                        r"|^.*\S(?:(?:\s{2,}|\s*\|\s*)(?:OOM|oom|out of memory)(?=\s{2,}|\s*\||\s*$)){2,}")
# A change log's or release note's entry that opens with the linked issue it fixed ("|[#14407](https://github.com/
# NVIDIA/spark-rapids/issues/14407)|[BUG] ... executor OOM (exit code 137) ...|", "- [#123](...) Fix OOM in ..."): the
# title of a bug, not this job's failure (session 9, round z10 dev benign); unlinked too ("- #1234 Executor OOM ...",
# "| #14407 | [BUG] ... |"), with an issue number of three or more digits.
_ISSUE_ENTRY = re.compile(r"^\s*(?:\|\s*|[-*+]\s+)(?:\[#\d+\]\(https?://[^)\s]+\)|#\d{3,}\b\s*[|:\-\u2013]?\s)")
# a list item or paragraph that opens with a bold label: "*   **Out of Memory (OOM):** Try ...", or a label alone on
# its line over what follows ("**OOM (CUDA out of memory):**", a cuDF guide; found when session 19's refit moved it)
# A troubleshooting entry's field ("**Symptoms:** Model loading fails or the process is killed"): docs.
# Only the bold label, and only where the line quotes no error by name (an issue form's "Symptom:" field
# holding a pasted message is a report).
_SYMPTOM_FIELD = re.compile(r"(?i)^\s*(?:[-*+]\s+)?\*\*symptoms?(?::\*\*|\*\*:)")
_NAMED_ERROR = re.compile(r"\b\w*(?:Error|Exception)\b|CUDA error|Tried to allocate|[A-Z]+_[A-Z_]{3,}")
_BOLD_LABEL = re.compile(r"^\s*(?:[-*+]\s+)?\*\*[^*\n]{1,40}(?::\*\*|\*\*:)(?:\s|$)"  # or the label alone on its line
                         # or a list item that is only a bold title: "2. **Out of Memory Errors**"
                         r"|^\s*(?:[-*+]\s+|\d+\.\s+)\*\*[^*:\n]{1,60}\*\*:?\s*$")
_MECHANISM_AFTER = re.compile(r"(?i)[ _-](?:killer|debugging|back-?off|handl(?:ing|er)s?|retry|retries|recovery|detection|detector|protection|"
                              r"guard|safety|logic|tests?|testing|checks?|fallback|avoidance|prevention|mitigation|"
                              r"policy|memory summary|summary|reporting|monitor(?:ing)?|counter|score_adj|priority|behaviou?rs?|cases|scenarios?)\b")
_REGEX_AROUND = re.compile(r"\.[*+]\s*$")
# Source code, not a log: a printf/format placeholder no program leaves unfilled in what it prints
# ("Out of memory error on GPU %d. "), an HTML table cell (a docs page), or grep's "path.py:123:" before
# a line of a source or docs file (a warning or error printed at run time names its class there,
# ": UserWarning:", ": RuntimeError:"; grep of a log file quotes what happened and is left alone).
_CODE_SHAPE = re.compile(r"%[-+#0]*\d*(?:\.\d+)?(?:ll|l|z|h|j)?[dsuxXfi](?![A-Za-z])|<t[dh]\b"
                         # a Go/Jinja/Helm template's placeholder: an alert rule's "... has been OOMKilled {{ $value }}
                         # times" (session 11, round ac4 dev); a Markdown footnote's definition ("[^1]: transformers
                         # OOM for any batch size > 1", a README's note under a table)
                         r"|\{\{-?\s*[$.]\w|^\s*\[\^\w+\]:\s"
                         # a Prometheus rule's query ("expr: '... last_terminated_reason{reason="OOMKilled"}[10m]) == 1'")
                         r"|^\s*(?:-\s*)?expr:\s"
                         # (git grep over a revision prefixes it: "HEAD:ts/async_service.py:55:", a full commit id; not a short hex id,
                         # a pid, a host or an address, which logs put there too: review, session 11)
                         r"|^\s*(?:(?:HEAD|[0-9a-f]{40})(?:[~^]\d*)*:)?(?:\./)?[\w.@+-]+(?:/[\w.@+-]+)*\.(?:py|pyi|pyx|cc|cpp|cxx|cu|cuh|c|h|hpp|go|rs|java|scala|"
                         r"kt|js|ts|md|rst|yaml|yml|toml|cfg|ini|sh)[:-]\d+[:-](?!\s*[\w.]*(?:Warning|Error|Exception)\b)")
# The message as a string value in code: 'expect="""Error preparing computation: Out of memory allocating',
# 'msg = "CUDA out of memory"'. Only a triple-quoted value or an assignment spaced as code is: logfmt
# logs write 'error="CUDA error: out of memory"' (ollama, Go services), which is the failure itself.
_STRING_ASSIGNED = re.compile(r"\b[A-Za-z_]\w*(?:\s*=\s*[rbfuRBFU]?(?:\"\"\"|\'\'\')| = [rbfuRBFU]?[\"\'])[^\"\'\n]*$"
                              # an exception built in code and kept: 'cuda_oom_error_1 = RuntimeError("CUDA out of memory.'
                              # (a test's fixture; dev benign t5_torchtnt_test_oom_source)
                              # (spaced as code: logfmt's 'err=RuntimeError("...")' and asyncio's 'exception=OutOfMemoryError(...)'
                              # report the failure)
                              r"|\b[A-Za-z_]\w* = [\w.]*(?:Error|Exception)\(\s*[rbfuRBFU]?[\"\'][^\"\'\n]*$"
                              # a message built in C++/Go code: 'auto const msg = std::string("Maximum pool size exceeded
                              # (failed to allocate "', 'err := errors.New("out of memory")' (session 10, aa8 dev)
                              r"|\b[A-Za-z_]\w*\s*:?= (?:std::string|fmt\.Sprintf|fmt\.Errorf|errors\.New)\(\s*\"[^\"\n]*$")
# A continuation line of source code that is a string literal: '                f"Not enough memory to handle
# {len(batch.input_ids)} prefill tokens. "' (an f-string, or an indented literal with a {name}
# placeholder). A plain indented quoted message is not enough: a JSON array or a notebook's "traceback"
# list holds the real message that way.
_SOURCE_LITERAL_LINE = re.compile(r"^\s*(?:[fF][rR]?|[rR][fF])[\"\']|^\s+[rbuRBU]?[\"\'](?=[^\"\'\n]*\{[A-Za-z_][\w.\[\]()]*\})")
# A string literal tested for membership in code: 'if "out of memory" in str(e):', '"RuntimeError: cuda runtime
# error (2) : out of memory" in exception.args[0]' (torchtnt's OOM helper; session 10, aa3 dev)
# Code only: the literal follows a keyword or an opening bracket, or opens an indented continuation line, and
# the right side is an expression that ends there ("in str(e):", "in exception.args[0]", "in msg or ...", "in
# line and not retried:"), not prose ('I get "CUDA out of memory" in epoch 2', '"..." in trainer.py line 120',
# a quoted error at the start of an unindented line; second review, session 10). A notebook's JSON escapes
# the quotes (\"...\").
_MEMBERSHIP_TEST = re.compile(r"""(?:^\s{4,}|\b(?:if|elif|and|or|not|assert|return|while|any|all)\s+\(?|[(\[]\s*)\\?"""
                              r"""([\"\'])([^\"\'\n]{1,300}?)\\?\1\s+(?:not\s+)?in\s+"""
                              r"""[A-Za-z_]\w*(?:\.[A-Za-z_]\w*|\[[^\]\n]{0,40}\]|\([^()\n]{0,40}\))*"""
                              r"""(?=\s*(?:$|[:)\],]|\\n|\b(?:and|or|else|if|for)\b))""")
# An explainer naming the error as a kind people meet: "a common error encountered is the OutOfMemoryError".
_COMMON_ERROR_BEFORE = re.compile(r"(?i)\b(?:a|the|one|another)\s+(?:of\s+the\s+)?(?:very\s+|most\s+|really\s+)?(?:common|frequent|typical|classic|well[- ]known)\s+"
                                  r"(?:[\w-]+\s+){0,2}?(?:errors?|issues?|problems?|exceptions?|failures?|pitfalls?)\s+(?:that\s+)?"
                                  r"(?:encountered|(?:people|users|you|developers|many)\s+(?:\w+\s+)?(?:encounter|see|get|hit|face|run into|meet))\b[^.!?]{0,80}$")
# A source line that is a call, and the string value of one of its keyword arguments: a test's mock
# ('patch.object(ce, "read_log_tail", return_value="Traceback: OOM"),'). Not an object's repr in a log
# ('ERROR ... HTTPException(status_code=500, detail=\'CUDA out of memory ...\')', 'Result(error=...)':
# the line does not start with the call, or the keyword names an error), not logfmt's 'err="..."'.
_KWARG_IN_CALL = re.compile(r"^\s*[A-Za-z_][\w.]*\([^()\n]{0,60}\b(?!(?:error|err|detail|message|msg|stderr|stdout|reason|exception|exc|output|log|text|what)=)"
                            r"[A-Za-z_]\w*=[rbfuRBFU]?[\"'][^\"'\n]{0,40}$")
# The first argument of a call that opens a line of code, a string literal: a test's name ('TEST_CASE("ScratchAllocator
# reports OOM at capacity", "[memory]")', 'it("throws on OOM", ...)'), any function's message argument (the
# logger/print/raise calls _ADVICE_BEFORE names, generalised). Not an exception's repr, which a log prints whole
# ("OutOfMemoryError('CUDA out of memory. ...')").
_FIRST_ARG_LITERAL = re.compile(r"^\s*(?:[A-Za-z_][\w.:]*\.)?(?![\w]*(?:Error|Exception|Warning|Exit|Interrupt|Failure)\()"
                                # a function or a macro, not a CamelCase class: an object's repr in a log names its class
                                # ("EnforceNotMet('...')", "ResourceExhausted(...)", Rust's "Some(...)"; review, session 11)
                                r"(?![A-Z][a-z])[A-Za-z_]\w*\(\s*[rbfuRBFU]?[\"'][^\"'\n]{0,100}$")
# A change described by its author: "This PR aims to fix the graph capturing OOM" (not a report of a
# regression: "since this commit training fails with CUDA out of memory")
_THIS_CHANGE = re.compile(r"(?i)\bthis (?:PR|pull request|patch|commit|change|MR)\s+(?:\w+\s+){0,2}"
                          r"(?:fix|fixes|prevents?|avoids?|resolves?|address(?:es)?|reduces?|adds?|handles?|removes?)\b")
# right after the match, in the same clause: "Out Of Memory (OOM) errors may occur if ...", "OOM can happen"
# (not across " - " or a closing quote, and not "may be due to": error messages explain their own cause that way)
# The no-event fallback (explain/reported.py) asks the same of a failure word: "Running out of memory
# during training can be both frustrating and costly".
MODAL_AFTER = re.compile(r"(?i)(?:(?! - | \u2014 )[^.!?;:,\n`\"]){0,40}?\b(?:may|might|can|could|would|should)\b"
                         r"(?!['\u2019]t| not| be (?:due|caused|because|related))")
_TRAILING_COMMENT = re.compile(r"\S\s+#\s")
# Session 10 (rounds aa8/aa9 dev, source files of repository snapshots, and the third review of them):
# - a command typed at a shell prompt (grep's pattern), not TH's own "$ Torch: not enough memory: ..." (a
#   "$ Word:" opens a message);
# - a C-family comment at the line's start or after a statement's end, or a member's doxygen "///<" anywhere;
#   not a URL's "//", nor "train // epoch 3 // step 1200 // RuntimeError: ..." used as a separator in a log;
# - the first literal of a table row in Go/C/C++ code ("{" then a string then ","; a JSON object's first
#   string is a key, followed by ":").
_SHELL_COMMAND = re.compile(r"^\s*\$ (?![A-Z][\w ]{0,20}:)\S")
# Session 11 (round ab dev, TorchServe's worker source): an indented "#" comment in Python or shell source
# ("            # Case B: CUDA out of memory (OOM)"); a traceback shows the line that raised, never a comment, and
# a prompt or a Markdown heading starts the line.
# Not a reporter's note in a pasted repro ("        # crashes here with CUDA out of memory", a comment that quotes a
# run's figures, "# RuntimeError: ... Tried to allocate 1.50 GiB"): _ANNOTATION (review, session 11).
_CODE_COMMENT = re.compile(r"(?:^\s*|[;{},]\s*)(?://|/\*)|//[/!]<")
_HASH_COMMENT = re.compile(r"^\s{2,}#\s")
_ANNOTATION = re.compile(r"\bhere\b|\bthis line\b|->|<-|\u2190|\u2192|\d\s?[KMGT]i?B\b")
_TABLE_LITERAL = re.compile(r"\{\s*\"[^\"\n]*$")
_TABLE_LITERAL_END = re.compile(r"[^\"\n]*\",\s*\S")
_IDENTIFIER = re.compile(r"[A-Za-z_][\w:]*")
# what code puts before a value in a statement: "x = CONST;", "f(CONST);", "g(a, CONST);", "return CONST;"
_CODE_BEFORE = re.compile(r"(?: = |\(|, |\breturn |\bcase )\s*$")
# what follows a field that code assigns, compares or passes: "c.State.OOMKilled = true", "(s.OOMKilled)"
_FIELD_USE = re.compile(r"\s*(?:[=!<>]=?|\)|,)")


def _identifier_in_code(line: str, start: int, end: int) -> bool:
    """The match is one identifier (a constant, a type, a field) in a line of code: a C-family statement
    spaced as code, a field access, or a key that a schema defines ("      OOMKilled:" alone on its line).
    A log prints the constant after a colon ("...: CUDA_ERROR_OUT_OF_MEMORY;", ONNX Runtime's "failure 3:
    CUBLAS_STATUS_ALLOC_FAILED ; GPU=0 ; ...;", logfmt's "reason=OOMKilled;"), and a raised exception's
    qualified name ends in a colon ("numpy.core._exceptions._ArrayMemoryError: ...")."""
    if not _IDENTIFIER.fullmatch(line, start, end):
        return False
    tail = line[end:].rstrip()
    statement = line.rstrip().endswith(";") and _CODE_BEFORE.search(line, max(0, start - 40), start) is not None
    field = start > 1 and line[start - 1] == "." and line[start - 2].isalnum() and _FIELD_USE.match(tail) is not None
    return statement or field or (tail == ":" and line[:start].strip() == "" and start > 0)
_HEDGE = re.compile(r"(?i)\b(?:if|can|may|might|could|should|would|until)\b")
_IF_CLAUSE = re.compile(r"(?i)(?:^|[.!?;]\s+|\b)(?:if|when(?:ever)?|in case|unless|once)\b[^.!?;]*$")
_KIND_PLURAL = re.compile(r"(?i)\s*(?:errors|exceptions|issues|problems|messages|failures)\b")
_REPORTED_BEFORE = re.compile(
    r"(?i)(?:\b(?:I|we|it|this|that|which|script|job|run|training|code|program|process|model|command)\s+"
    r"(?:\w+\s+){0,2}(?:get|gets|got|getting|see|saw|am seeing|keep getting|hit|hits|encounter(?:ed)?)"
    r"|\b(?:say(?:s|ing)?|with (?:the |this |an? )?(?:message|error|exception)|throws?|threw|thrown|raises?|raised|"
    r"shows?|showed|gives?|gave|returns?|returned|fails? with|failed with|crash(?:es|ed)? with|died with|"
    r"exit(?:s|ed)? with|printed|prints|reports?|reported|following error|error (?:is|was)|message (?:is|was)))"
    r"\s*(?:an?\s+|the\s+)?(?:error|exception|message|hint\s+of)?\s*[:,-]?\s*$")


def docs_clause(line: str, start: int) -> bool:
    """The match sits in a conditional clause with no first person: "if the process is killed by the
    OOM killer", "when the batch is too large you get an OOM" (docs), not "when I run it I get OOM"."""
    c = _IF_CLAUSE.search(line, max(0, start - 200), start)
    return c is not None and not _FIRST_PERSON.search(line, c.start(), start)


_FIRST_PERSON = re.compile(r"\b(?:I|I'm|I've|we|my|our|me|us|it)\b")


# A line logged at warning level: glog "W0812 ...", PyTorch's "[W812 16:00:28 ...]", TensorRT's "[TRT] [W]",
# "WARNING: ...". Vague OOM words and TensorRT's "Requested amount of GPU memory ... could not be
# allocated" are warnings of allocations that the library handles itself (a pinned-memory fallback,
# the caching allocator's retry, a tactic skipped while building an engine); the failure that stops a
# job is logged as an error.
WARN_LEVEL = re.compile(r"^\s*(?:\[rank\d+\]:?\s*)?(?:\[[^\]\n]{0,40}\]\s*){0,3}?"
                         r"(?:WARNING\b|WARN\b|\[W(?:ARN(?:ING)?)?\]|\[W\d{3,4}\s|W\d{4}\s)")

# Docs introduce an example of an error: "If you got this error while running a script", "For example:",
# "you may see something like:" (then a fenced block or a quote). The error that follows is that example
# (events._introduced_example), and the introduction's own OOM word is no failure (patterns._failure_match).
EXAMPLE_INTRO = re.compile(r"(?i)^(?:\s*(?:if|when(?:ever)?)\s+you(?:'ve| have)?\s+(?:\w+\s+){0,2}"
                            r"(?:got|get|see|saw|encounter\w*|run into|ran into|hit|receive\w*)\b.*"
                            r"|.*\b(?:for example|for instance|such as|something like|looks? like this|like the following)\s*:?"
                            # "... it fails with the OOM error like:" (not "I get an error like this:", a report)
                            r"|(?!.*\b(?:I|I'm|I've|we|my|our)\b).*\b(?:error|message|exception|output)s?\s+like(?:\s+this)?\s*:"
                            # "The new error message now looks like (from Python):" (a change's description; a
                            # report's "The error looks like:" is not one)
                            r"|(?!.*\b(?:I|I'm|I've|we|my|our)\b).*\bnew\b.*\b(?:error|message|exception|output)s?\s+"
                            r"(?:now\s+)?looks?\s+like(?:\s*\([^)\n]{0,40}\))?\s*:"
                            # hedged, to the reader: "A common error you may encounter when the GPU runs out of memory is:"
                            r"|(?!.*\b(?:I|I'm|I've|we|my|our)\b).*\byou\s+(?:may|might)\s+(?:also\s+)?(?:\w+\s+)?"
                            r"(?:see|get|encounter\w*|run into|hit|receive\w*|come across|face)\b.*[:.])\s*$")


__all__ = ["cjk_article", "docs_clause", "is_mention", "CJK_CHAR", "CJK_GENERAL", "CJK_HEDGE", "CJK_LETTERS", "CJK_OWN_RUN", "ERROR_WORDS", "EXAMPLE_INTRO", "GENERAL_STATEMENT", "MODAL_AFTER", "WARN_LEVEL"]
