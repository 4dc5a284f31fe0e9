"""Split a YAML stream into documents that keep their exact bytes, and load them round-trip.

`audit --fix` must leave every document it does not change byte-identical, so the stream is split
on `---` lines here and only changed documents are re-emitted. Helm's `# Source: chart/templates/x`
comment names each document. Unrendered templates are refused with a one-line error, because a
`{{ .Values.x }}` value would otherwise be audited as if it were real.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from oomdoctor.errors import InputError
from oomdoctor.parsers.budget import BudgetError, budget_yaml

_DOC_START = re.compile(r"^---(?:[ \t].*)?$")
_DOC_END = re.compile(r"^\.\.\.[ \t]*$")
_HELM_SOURCE = re.compile(r"^#\s*Source:\s*(\S.*?)\s*$")
# Template actions that never survive `helm template` (Prometheus `{{ $labels.x }}` strings do).
_TEMPLATE = re.compile(
    r"\{\{-?\s*(?:\.Values|\.Release|\.Chart|\.Capabilities|\.Files|\.Template|include\b|template\b|toYaml\b"
    r"|if\b|else\b|end\b|range\b|with\b|define\b|tpl\b|required\b|default\b|nindent\b|indent\b|quote\b)"
)
MAX_BYTES = 20 * 1024 * 1024


@dataclass
class YamlDoc:
    index: int
    start_line: int  # 0-based line of the chunk's first line in the file
    text: str  # the exact chunk (without its `---` separator line)
    data: Any
    helm_source: str = ""


def new_yaml() -> YAML:
    y = budget_yaml("rt")  # aliases expanded within a node budget, nesting capped (parsers.budget)
    y.preserve_quotes = True
    y.width = 4096  # never re-wrap long lines
    return y


def split_chunks(text: str) -> list[tuple[int, str]]:
    """(start_line, chunk_text) for each document; separators are not part of any chunk."""
    lines = text.splitlines(keepends=True)
    chunks: list[tuple[int, str]] = []
    start, buf = 0, []
    for i, line in enumerate(lines):
        bare = line.rstrip("\r\n")
        if _DOC_START.match(bare) or _DOC_END.match(bare):
            chunks.append((start, "".join(buf)))
            start, buf = i + 1, []
            rest = bare[3:].strip()
            if _DOC_START.match(bare) and rest and not rest.startswith("#"):
                start, buf = i, [line]  # `--- {kind: Pod}`: the separator line carries content
        else:
            buf.append(line)
    chunks.append((start, "".join(buf)))
    return chunks


def find_unrendered_template(text: str) -> int | None:
    """1-based line of the first Helm/Go template action outside comments, else None."""
    for n, line in enumerate(text.splitlines(), 1):
        stripped = line.lstrip()
        if stripped.startswith("#"):
            continue
        if _TEMPLATE.search(line):
            return n
    return None


def load_documents(text: str, name: str) -> list[YamlDoc]:
    """Parse every document; raise InputError (one line naming `name`) for bad YAML or templates."""
    if len(text) > MAX_BYTES:
        raise InputError(f"{name}: file too large for a manifest ({len(text)} bytes)")
    tpl = find_unrendered_template(text)
    if tpl is not None:
        raise InputError(f"{name}: line {tpl}: unrendered template ({{{{ ... }}}}); "
                         "render it first, e.g. `helm template RELEASE CHART > out.yaml`")
    docs: list[YamlDoc] = []
    for start, chunk in split_chunks(text):
        if not chunk.strip() or all(not ln.strip() or ln.lstrip().startswith("#") for ln in chunk.splitlines()):
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # ReusedAnchorWarning and friends: not the user's concern here
                data = new_yaml().load(chunk)
        except BudgetError as exc:
            raise InputError(f"{name}: {exc} (document from line {start + 1})") from None
        except YAMLError as exc:
            raise InputError(f"{name}: malformed YAML{_where(exc, start)}: {_problem(exc)}") from None
        except (ValueError, TypeError, AttributeError, KeyError, IndexError, RecursionError) as exc:
            # ruamel raises plain errors for some pathological inputs (bad merge keys, deep nesting)
            if "{{" in chunk:
                raise InputError(f"{name}: unrendered template ({{{{ ... }}}}) near line {start + 1}") from None
            raise InputError(f"{name}: malformed YAML near line {start + 1}: {type(exc).__name__}") from None
        if data is None:
            continue
        source = ""
        for line in chunk.splitlines():
            m = _HELM_SOURCE.match(line.strip())
            if m:
                source = m.group(1)
                break
        docs.append(YamlDoc(len(docs), start, chunk, data, source))
    return docs


def _where(exc: YAMLError, start: int) -> str:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    if mark is None or getattr(mark, "line", None) is None:
        return ""
    return f" at line {mark.line + 1 + start}"


def _problem(exc: YAMLError) -> str:
    problem = getattr(exc, "problem", None) or getattr(exc, "context", None) or str(exc).splitlines()[0]
    text = " ".join(str(problem).split())
    if "{{" in text or "found character '{'" in text:
        text += " (an unrendered template?)"
    return text[:200]


def line_of(node: Any, key: Any = None) -> int | None:
    """0-based line of a round-trip node (or of one of its keys), relative to its chunk."""
    lc = getattr(node, "lc", None)
    if lc is None:
        return None
    try:
        if key is not None:
            pos = lc.key(key) if isinstance(key, str) else lc.item(key)
            return pos[0]
        return lc.line
    except (KeyError, IndexError, TypeError, AttributeError):
        return getattr(lc, "line", None)
