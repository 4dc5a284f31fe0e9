"""The layout's rules that import-linter cannot state: nothing imports the package root (the public API
in oomdoctor/__init__.py imports the rooms, never the reverse), and there are no import cycles."""

from __future__ import annotations

import grimp
import pytest


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph("oomdoctor")


def test_no_module_imports_the_package_root(graph):
    importers = graph.find_modules_that_directly_import("oomdoctor") - {"oomdoctor.__main__"}
    assert importers == set(), f"modules importing the package root: {sorted(importers)}"


def test_no_import_cycles_between_modules(graph):
    cycles = []
    for module in sorted(graph.modules):
        for imported in graph.find_modules_directly_imported_by(module):
            if module != imported and graph.chain_exists(imported=module, importer=imported):
                if not (module.startswith(imported + ".") or imported.startswith(module + ".")):
                    cycles.append((module, imported))
    assert cycles == [], f"import cycles: {cycles[:10]}"


def test_each_room_is_one_package():
    """One room per capability: the modules the newcomer's guide (docs/architecture.md) points at exist."""
    import importlib

    for name in ("oomdoctor.explain.read", "oomdoctor.explain.events", "oomdoctor.explain.facts",
                 "oomdoctor.explain.rank", "oomdoctor.estimate.trace", "oomdoctor.estimate.allocator",
                 "oomdoctor.estimate.workspaces", "oomdoctor.injob.record", "oomdoctor.injob.fit",
                 "oomdoctor.trials.search", "oomdoctor.trials.max_batch", "oomdoctor.workload.step"):
        importlib.import_module(name)


def test_nothing_a_user_runs_or_reads_refers_to_files_outside_the_repository():
    """Users have the clone and nothing beside it: no `../shared`, no `shared/spec` or `shared/fixtures`."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    pattern = re.compile(r"\.\./shared|shared/(?:spec|fixtures|seeds|reference)/")
    places = [root / "README.md", root / "DEVELOPERS.md", root / "CHANGELOG.md", *root.glob("docs/**/*.md"),
              *root.glob("src/**/*.py"), *root.glob("examples/**/*"), *root.glob("deploy/**/*"),
              *root.glob("tests/**/*.py"), *root.glob("bench/*.py")]
    offenders = [str(p.relative_to(root)) for p in places
                 if p.is_file() and p.suffix in (".md", ".py", ".yaml", ".txt", "") and pattern.search(p.read_text(errors="replace"))]
    offenders = [o for o in offenders if o != "tests/test_architecture.py"]
    assert offenders == []
