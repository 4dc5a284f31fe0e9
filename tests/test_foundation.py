"""GIVEN the shared vocabulary WHEN used THEN it matches docs/contracts.md exactly."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from oomdoctor.cli import main
from oomdoctor.errors import UsageError
from oomdoctor.facts import CATEGORIES, LAYERS, Fact, FactSet, Unavailable
from oomdoctor.facts.keys import FACT_KEYS
from oomdoctor.render.envelope import dumps
from oomdoctor.units import format_bytes, parse_size, torch_size_to_bytes


def test_layers_are_the_contract_names_in_order():
    assert LAYERS == ("resources", "runtime", "gpu_sharing", "cuda", "driver", "storage", "framework", "workload")


def test_categories_are_the_contract_names():
    assert set(CATEGORIES) == {
        "true_capacity", "fragmentation", "other_process", "leak_in_code", "context_or_driver",
        "shm_exhausted", "host_oom", "gpu_sharing_limit", "not_oom", "unknown",
    }


def test_every_fact_key_belongs_to_a_layer():
    assert all(k.layer in LAYERS for k in FACT_KEYS.values())


@pytest.mark.parametrize("text,expected", [
    ("8GiB", 8 * 1024**3), ("8192MiB", 8 * 1024**3), ("8GB", 8 * 10**9), ("123", 123), ("1.5 GiB", 3 * 2**29),
])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["", "eight", "8 parsecs", "-1GiB", "GiB"])
def test_parse_size_rejects(bad):
    with pytest.raises(UsageError):
        parse_size(bad)


def test_torch_sizes_are_binary():
    assert torch_size_to_bytes("1.95", "GiB") == round(1.95 * 2**30)
    assert format_bytes(12.46 * 2**30) == "12.46 GiB"
    assert format_bytes(512) == "512 bytes"


def test_factset_refuses_unknown_keys():
    with pytest.raises(KeyError):
        FactSet([Fact("no.such.key", 1, "test")])


def test_factset_prefers_available_and_round_trips():
    fs = FactSet([Unavailable("driver.version", "no NVML", "nvml"), Fact("driver.version", "535.129.03", "/proc")])
    assert fs.value("driver.version") == "535.129.03"
    again = FactSet.from_json(json.loads(json.dumps(fs.to_json())))
    assert again.value("driver.version") == "535.129.03" and again.source("driver.version") == "/proc"


def test_envelope_carries_schema_and_tool_version():
    doc = json.loads(dumps({"x": 1}))
    assert doc["schema_version"] == 1 and doc["tool_version"] and doc["x"] == 1


def test_cli_version_and_unknown_command(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    with pytest.raises(SystemExit) as exc:
        main(["no-such-command"])
    assert exc.value.code == 2


def test_python_dash_m_works():
    out = subprocess.run([sys.executable, "-m", "oomdoctor", "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "oomdoctor" in out.stdout


def test_core_import_does_not_import_torch():
    code = "import sys, oomdoctor.cli as c; c.build_parser(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr
