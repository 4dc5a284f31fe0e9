"""Generate the docs that must not drift from the code: CLI reference, fact keys, check pages.

`python -m oomdoctor.docsgen` writes them; `--check` fails (exit 1) when a committed page is stale.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _cli_page() -> str:
    import os

    from oomdoctor.cli import build_parser

    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal; pin it so the page is stable
    parser = build_parser()
    lines = ["# Command-line reference", "", "Generated from the argument parser by `python -m oomdoctor.docsgen`.", ""]
    lines += ["```", parser.format_help().rstrip(), "```", ""]
    for action in parser._subparsers._group_actions if parser._subparsers else []:  # noqa: SLF001
        for name, sub in action.choices.items():
            lines += [f"## `oomdoctor {name}`", "", "```", sub.format_help().rstrip(), "```", ""]
    return "\n".join(lines)


def _facts_page() -> str:
    from oomdoctor.facts.keys import FACT_KEYS
    from oomdoctor.facts.model import LAYERS

    lines = ["# Fact keys", "", "Every fact a collector may report, by layer. `weight` ranks differences in",
             "`oomdoctor diff`; `fingerprint` facts group nodes in `oomdoctor fleet`.", ""]
    for layer in LAYERS:
        lines += [f"## {layer}", "", "| key | weight | fingerprint | meaning |", "|---|---|---|---|"]
        for key in sorted((k for k in FACT_KEYS.values() if k.layer == layer), key=lambda k: k.name):
            doc = key.doc.replace("|", "\\|")
            lines.append(f"| `{key.name}` | {key.weight} | {'yes' if key.fingerprint else ''} | {doc} |")
        lines.append("")
    return "\n".join(lines)


_REFERENCES = {  # the docstrings cite these by name; the pages link the copies in docs/reference/
    "environment-facts.md": "[environment-facts.md](../reference/environment-facts.md)",
    "memory-tools-and-papers.md": "[memory-tools-and-papers.md](../reference/memory-tools-and-papers.md)",
}


def _linked(doc: str) -> str:
    for name, link in _REFERENCES.items():
        doc = doc.replace(name, link)
    return doc


def _check_pages() -> dict[str, str]:
    for module in ("oomdoctor.checks.all", "oomdoctor.checks.audit"):  # audit rules: AUDIT_CHECKS
        try:
            importlib.import_module(module)
        except ModuleNotFoundError:
            pass
    from oomdoctor.checks.registry import AUDIT_CHECKS, CHECKS

    specs = [*CHECKS.values(), *AUDIT_CHECKS.values()]
    if not specs:
        return {}
    pages = {}
    index = ["# Checks", "", "| id | layer | title |", "|---|---|---|"]
    for spec in sorted(specs, key=lambda s: s.id):
        pages[f"checks/{spec.id}.md"] = (
            f"# {spec.id}: {spec.title}\n\nLayer: `{spec.layer.value}`\n\n{_linked(spec.doc)}\n"
        )
        index.append(f"| [{spec.id}]({spec.id}.md) | {spec.layer.value} | {spec.title} |")
    pages["checks/index.md"] = "\n".join(index) + "\n"
    return pages


def pages() -> dict[str, str]:
    out = {"cli.md": _cli_page(), "facts.md": _facts_page()}
    out.update(_check_pages())
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m oomdoctor.docsgen")
    ap.add_argument("--check", action="store_true", help="fail if a generated page is stale")
    ap.add_argument("--docs", default=str(ROOT / "docs"))
    args = ap.parse_args(argv)
    docs = Path(args.docs)
    stale = []
    for rel, text in pages().items():
        path = docs / rel
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(rel)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    if stale:
        print("stale generated docs (run `python -m oomdoctor.docsgen`): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
