"""QA pass: bad input gets one line on stderr naming the input and exit 2 (docs/contracts.md §3), never exit 3."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import pytest

from oomdoctor.cli import main
from oomdoctor.errors import InputError, UsageError
from oomdoctor.units import parse_size

ROOT = Path(__file__).resolve().parents[1]
SEED = ROOT / "examples" / "seed-a100-k8s"
REPORTS = ROOT / "tests" / "fixtures" / "reports"


def _one_line_exit_2(capsys, argv: list[str], name: str) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert name in err[0]
    assert "Traceback" not in err[0] and "internal error" not in err[0]
    return err[0]


@pytest.mark.parametrize("text,expected", [
    ("8GiB", 8 << 30), ("8192MiB", 8 << 30), ("8GB", 8 * 10**9), ("8589934592", 8 << 30),
    ("9007199254740993", 9007199254740993),  # above 2**53: a float would round it
    ("1.5GiB", 3 << 29),
])
def test_sizes_are_exact(text, expected):
    assert parse_size(text) == expected


def test_absurd_size_is_a_usage_error_not_an_overflow():
    with pytest.raises(UsageError, match="larger than any memory"):
        parse_size("9" * 400)


def test_estimate_absurd_memory_limit_exits_2(capsys):
    _one_line_exit_2(capsys, ["estimate", "x.py", "--batch-size", "1", "--memory-limit", "9" * 400], "invalid size")


@pytest.mark.parametrize("content", [b"\x00\x01binary", b"\xff\xfe not utf-8", b"", b'{"hello": 1}', b"[1, 2]"])
def test_fleet_bad_only_input_is_one_line(tmp_path, capsys, content):
    bad = tmp_path / "node.json"
    bad.write_bytes(content)
    for argv in (["fleet", str(bad)], ["fleet", "--strict", str(bad)]):
        _one_line_exit_2(capsys, argv, "node")


def test_fleet_strict_with_one_bad_input_is_one_line(tmp_path, capsys):
    bad = tmp_path / "broken.json"
    bad.write_bytes(b"\x00garbage")
    _one_line_exit_2(capsys, ["fleet", "--strict", str(REPORTS), str(bad)], "broken")


def test_fleet_non_strict_still_warns_about_skipped_inputs(tmp_path, capsys):
    bad = tmp_path / "broken.json"
    bad.write_bytes(b"\x00garbage")
    assert main(["fleet", str(REPORTS), str(bad)]) in (0, 1)
    assert "skipped broken" in capsys.readouterr().err


@pytest.mark.parametrize("cmd", [["doctor", "--bundle"], ["diff"], ["explain", "--bundle"]])
def test_a_directory_that_is_not_a_bundle_is_rejected(tmp_path, capsys, cmd):
    """A mistyped path (an empty or unrelated directory) must not be diagnosed as a healthy machine."""
    empty = tmp_path / "not-a-bundle"
    empty.mkdir()
    (empty / "notes.txt").write_text("hello\n")
    argv = [*cmd, str(empty)]
    if cmd == ["diff"]:
        argv.append(str(SEED))
    if cmd[0] == "explain":
        log = tmp_path / "x.log"
        log.write_text("nothing\n")
        argv.append(str(log))
    line = _one_line_exit_2(capsys, argv, "not-a-bundle")
    assert "not an oomdoctor bundle" in line


def test_tarball_with_nothing_of_a_bundle_is_rejected(tmp_path, capsys):
    tgz = tmp_path / "evil.tar.gz"
    with tarfile.open(tgz, "w:gz") as tar:
        info = tarfile.TarInfo("proc/meminfo")
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/shadow"
        tar.addfile(info)
    _one_line_exit_2(capsys, ["doctor", "--bundle", str(tgz)], "evil.tar.gz")


def test_bundle_fifo_and_dangling_link_are_named_correctly(tmp_path, capsys):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert "not a regular file" in _one_line_exit_2(capsys, ["doctor", "--bundle", str(fifo)], "pipe")
    link = tmp_path / "gone"
    link.symlink_to(tmp_path / "nowhere")
    assert "dangling" in _one_line_exit_2(capsys, ["doctor", "--bundle", str(link)], "gone")


def test_workload_calling_sys_exit_on_import_is_an_input_error(tmp_path):
    from oomdoctor.workload.load import load_workload

    script = tmp_path / "train.py"
    script.write_text("import sys\nsys.exit(5)\n")
    with pytest.raises(InputError, match=r"train.py: importing it called sys.exit\(5\)"):
        load_workload(script)


def test_workload_build_calling_sys_exit_is_an_input_error(tmp_path):
    from oomdoctor.workload.load import load_workload

    wl = tmp_path / "wl.py"
    wl.write_text("import sys\ndef build(batch_size):\n    sys.exit('no GPU')\n")
    with pytest.raises(InputError, match=r"build\(4\) called sys.exit"):
        load_workload(wl).spec(4)


def test_estimate_script_style_workload_exits_2_not_its_own_code(tmp_path, capsys):
    pytest.importorskip("torch")
    script = tmp_path / "train.py"
    script.write_text("import sys\nsys.exit(5)\n")
    _one_line_exit_2(capsys, ["estimate", str(script), "--batch-size", "2"], "train.py")


@pytest.mark.parametrize("out", ["/proc/oomdoctor-nope/x.json", "{tmp}/file/sub/x.json", "{tmp}"])
def test_output_that_cannot_be_written_exits_2(tmp_path, capsys, out):
    (tmp_path / "file").write_text("")
    out = out.format(tmp=tmp_path)
    _one_line_exit_2(capsys, ["doctor", "--bundle", str(SEED), "--format", "json", "-o", out], out)


def test_bundle_manifest_with_unrendered_template_says_so(tmp_path):
    from oomdoctor.collectors.bundle_write import BundleWriter, add_manifest

    tpl = tmp_path / "deploy.yaml"
    tpl.write_text("apiVersion: v1\nkind: Pod\nmetadata:\n  name: {{ .Values.name }}\n")
    with pytest.raises(InputError, match=r"deploy.yaml: line 4: unrendered template.*helm template"):
        add_manifest(BundleWriter(), str(tpl))


def test_fleet_stdin_survives_a_stray_non_utf8_byte_between_reports(monkeypatch, capsys):
    import io

    good = (REPORTS / "seed-good.json").read_bytes()
    bad = (REPORTS / "seed-bad.json").read_bytes()
    stream = bad + b"\npod/other-node garbage \xff\xfe from a crashing pod\n" + good
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(stream)))
    assert main(["fleet", "-", "--format", "json"]) in (0, 1)
    import json

    assert json.loads(capsys.readouterr().out)["nodes"] == 2


def test_fleet_stdin_binary_is_one_line(monkeypatch, capsys):
    import io

    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"\x7fELF\x00\x00\x01" * 100)))
    _one_line_exit_2(capsys, ["fleet", "-"], "<stdin>")
