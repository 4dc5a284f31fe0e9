"""`oomdoctor doctor` wiring: formats, -o, exit codes, usage errors (collectors replaced by FactSets)."""

from __future__ import annotations

import importlib
import json
import sys
import types

import pytest

from builders import make_facts, seed_facts
from oomdoctor.cli import main
from oomdoctor.errors import InputError


@pytest.fixture
def collectors(monkeypatch):
    """Make collect_live / collect_bundle return chosen FactSets; records how they were called."""
    calls = []
    state = {"facts": make_facts()}

    def collect_live(*, probe=False, probe_attempts=5, import_torch=None):
        calls.append(("live", probe, probe_attempts) + (("torch",) if import_torch else ()))
        return state["facts"]

    def collect_bundle(path, notes=None):
        calls.append(("bundle", str(path)))
        if "missing" in str(path):
            raise InputError(f"cannot read bundle {path}: no such file or directory")
        return state["facts"]

    try:
        mod = importlib.import_module("oomdoctor.collectors.machine")
    except ModuleNotFoundError:
        mod = types.ModuleType("oomdoctor.collectors.machine")
        monkeypatch.setitem(sys.modules, "oomdoctor.collectors.machine", mod)
        import oomdoctor.collectors as pkg

        monkeypatch.setattr(pkg, "machine", mod, raising=False)
    monkeypatch.setattr(mod, "collect_live", collect_live, raising=False)
    monkeypatch.setattr(mod, "collect_bundle", collect_bundle, raising=False)
    state["calls"] = calls
    return state


def test_healthy_machine_exits_0_with_text(collectors, capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "Verdict" in out and "\x1b[" not in out
    assert collectors["calls"] == [("live", False, 5)]


def test_seed_bundle_exits_1_and_json_follows_contract(collectors, capsys):
    collectors["facts"] = seed_facts()
    assert main(["doctor", "--bundle", "examples/seed", "--format", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"]["category"] == "context_or_driver"
    assert doc["meta"]["source"] == "bundle" and collectors["calls"] == [("bundle", "examples/seed")]


def test_html_to_file(collectors, tmp_path, capsys):
    collectors["facts"] = seed_facts()
    out = tmp_path / "r" / "doctor.html"
    assert main(["doctor", "--probe", "--probe-attempts", "3", "--format", "html", "-o", str(out)]) == 1
    assert out.read_text().startswith("<!doctype html>")
    assert collectors["calls"] == [("live", True, 3)]
    assert "wrote" in capsys.readouterr().err


def test_probe_with_bundle_is_a_usage_error(collectors, capsys):
    assert main(["doctor", "--bundle", "x", "--probe"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--probe" in err


def test_torch_flag_asks_collect_live_to_import_torch(collectors, capsys):
    assert main(["doctor", "--torch", "--format", "json"]) == 0
    assert collectors["calls"] == [("live", False, 5, "torch")]
    assert json.loads(capsys.readouterr().out)["meta"]["torch"] is True


def test_torch_with_bundle_is_a_usage_error(collectors, capsys):
    assert main(["doctor", "--bundle", "x", "--torch"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--torch" in err and collectors["calls"] == []


def test_unreadable_bundle_is_one_line_exit_2(collectors, capsys):
    assert main(["doctor", "--bundle", "/missing/bundle.tar.gz"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "/missing/bundle.tar.gz" in err
