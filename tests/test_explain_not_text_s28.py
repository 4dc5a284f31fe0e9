"""GIVEN a log that is empty, or binary data WHEN `oomdoctor explain` reads it THEN it says so, and a CI gate that runs
explain on a truncated or a wrong file is not silently green (a walkthrough: both answered "No OOM-like event found.",
exit 0).

Empty: exit 0 (no failure in it), the answer says "the log is empty (0 lines read)", JSON lists it under
scanned.empty_sources. Binary: exit 2 with one line naming it, as any other unreadable input (docs/explain.md).
"""

from __future__ import annotations

import gzip
import io
import json
import random
import sys

import pytest

from oomdoctor.cli import main
from oomdoctor.explain.events import BINARY_SHARE, not_text_share

OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.95 GiB. GPU 0 has a total capacity of "
       "44.35 GiB of which 1.27 GiB is free. Including non-PyTorch memory, this process has 43.07 GiB memory in "
       "use. Of the allocated memory 30.02 GiB is allocated by PyTorch, and 12.46 GiB is reserved by PyTorch but "
       "unallocated.\n")
RANDOM = random.Random(28).randbytes(200_000)  # as `head -c 200K /dev/urandom`, the same bytes in every run


def _write(tmp_path, name: str, data: bytes) -> str:
    p = tmp_path / name
    p.write_bytes(data)
    return str(p)


def _stdin(monkeypatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))


# -- empty --------------------------------------------------------------------------------------------------------

def test_an_empty_log_says_it_is_empty(tmp_path, capsys):
    assert main(["explain", _write(tmp_path, "train.log", b"")]) == 0
    assert capsys.readouterr().out.strip() == "No OOM-like event found: the log is empty (0 lines read)."


def test_empty_standard_input_says_it_is_empty(monkeypatch, capsys):
    _stdin(monkeypatch, b"")
    assert main(["explain", "-"]) == 0
    assert "the log is empty (0 lines read)" in capsys.readouterr().out


def test_json_names_the_empty_logs(tmp_path, capsys):
    path = _write(tmp_path, "train.log", b"")
    assert main(["explain", "--format", "json", path]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["failed"] is False and d["events"] == []
    assert d["scanned"]["lines"] == 0 and d["scanned"]["empty_sources"] == [path]


def test_one_empty_log_among_others_is_a_note(tmp_path, capsys):
    empty = _write(tmp_path, "rank1.log", b"")
    assert main(["explain", _write(tmp_path, "rank0.log", OOM.encode()), empty]) == 1
    out = capsys.readouterr().out
    assert "Answer: fragmentation" in out and f"Note: {empty} is empty (0 lines read)" in out
    assert main(["explain", empty, _write(tmp_path, "ok.log", b"step 1 loss 0.5\n")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("No OOM-like event found.\n") and f"{empty} is empty (0 lines read)" in out


def test_a_log_with_text_has_no_empty_key(tmp_path, capsys):
    assert main(["explain", "--format", "json", _write(tmp_path, "ok.log", b"step 1 loss 0.5\n")]) == 0
    assert "empty_sources" not in json.loads(capsys.readouterr().out)["scanned"]


def test_html_says_it_too(tmp_path):
    out = tmp_path / "r.html"
    assert main(["explain", "--format", "html", "-o", str(out), _write(tmp_path, "a.log", b"")]) == 0
    assert "No OOM-like event found: the log is empty (0 lines read)." in out.read_text()


# -- binary -------------------------------------------------------------------------------------------------------

def _exit_2_one_line(capsys, name: str) -> str:
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert captured.out == "" and "\n" not in err and "Traceback" not in err
    assert f"{name}: does not look like text" in err
    return err


def test_random_bytes_are_refused_in_one_line(tmp_path, capsys):
    path = _write(tmp_path, "bin.log", RANDOM)
    assert main(["explain", path]) == 2
    _exit_2_one_line(capsys, path)
    assert main(["explain", "--format", "json", path]) == 2  # no JSON for input that is no log
    _exit_2_one_line(capsys, path)


def test_binary_standard_input_is_refused(monkeypatch, capsys):
    _stdin(monkeypatch, RANDOM)
    assert main(["explain", "-"]) == 2
    _exit_2_one_line(capsys, "standard input")


def test_a_binary_log_among_text_logs_is_named(tmp_path, capsys):
    bad = _write(tmp_path, "core.1234", RANDOM)
    assert main(["explain", _write(tmp_path, "rank0.log", OOM.encode()), bad]) == 2
    _exit_2_one_line(capsys, bad)


def test_compressed_binary_is_judged_after_decompression(tmp_path, capsys):
    path = _write(tmp_path, "x.log.gz", gzip.compress(RANDOM))
    assert main(["explain", path]) == 2
    _exit_2_one_line(capsys, path)
    assert main(["explain", _write(tmp_path, "ok.log.gz", gzip.compress(OOM.encode()))]) == 1  # gzip itself is fine


def test_a_file_of_nul_bytes_is_no_log(tmp_path, capsys):
    path = _write(tmp_path, "zeroed.log", b"\x00" * 50_000)
    assert main(["explain", path]) == 2
    assert "100%" in _exit_2_one_line(capsys, path)


# -- text that holds odd bytes is still text ------------------------------------------------------------------------

@pytest.mark.parametrize("data", [
    b"\x00" * 300_000 + b"step 1 loss 0.5\n" + OOM.encode(),   # logrotate copytruncate: NULs, then the log goes on
    b"step 1 loss 0.5\n" * 2000 + OOM.encode() + b"\x00" * 300_000,  # a crash left the file ending in NULs
    b"\x00" * 10_000 + b"\n" + OOM.encode(),                    # both at once, in one small file
    b"x\x00y " + OOM.encode(),                                  # a stray NUL or two
    ("Эпоха 1, потеря 0.5\n" * 3000).encode("cp1251") + OOM.encode(),  # a legacy encoding: not UTF-8, still text
    ("训练第1轮 损失 0.5\n" * 3000).encode("gbk") + OOM.encode(),
    b"1/10 [==>......] - ETA: 3s" + b"\x08" * 60 + b"\r" * 2 + OOM.encode(),  # Keras' progress bar backspaces
    ("step 1 \x1b[32mok\x1b[0m\a\n" * 3000).encode() + OOM.encode(),  # colour codes and bells
])
def test_text_with_odd_bytes_is_read(tmp_path, capsys, data):
    assert main(["explain", _write(tmp_path, "x.log", data)]) == 1
    assert "Answer:" in capsys.readouterr().out


def test_the_share_counts_what_no_text_holds():
    assert not_text_share(RANDOM[:16384]) > 1.5 * BINARY_SHARE  # ~9% of random bytes
    assert not_text_share(b"plain text\n" * 1000) == 0.0
    assert not_text_share(b"\x00" * 5000 + b"text\n" * 100) == 0.0  # a run of NULs is one byte
    assert not_text_share(b"\x00" * 10) == 1.0 and not_text_share(b"") == 0.0
    assert not_text_share(b"\x01" * 31 + b"a" * 10) == 0.0  # fewer than BINARY_MIN: a stray byte or two
