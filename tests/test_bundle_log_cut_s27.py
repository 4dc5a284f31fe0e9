"""`bundle --log` of a log over the cap keeps its head and its tail (where the OOM is), with a marker between them,
a warning on stderr and a note in meta.json (walkthrough, session 27: the first 32 MiB were kept, the OOM lost)."""

from __future__ import annotations

import io
import json
import re
import tarfile

import pytest

from oomdoctor.cli import main
from oomdoctor.collectors import bundle_write, log_cut
from oomdoctor.collectors.bundle_write import BundleWriter, add_log
from oomdoctor.collectors.log_cut import read_head_and_tail

OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 768.00 MiB. GPU 0 has a total capacity of "
       "23.65 GiB of which 412.56 MiB is free.")


def _lines(n: int, start: int = 0) -> str:
    return "".join(f"step {i} loss 1.234 some padding text xxxxxxxx\n" for i in range(start, start + n))


@pytest.fixture
def small_caps(monkeypatch):
    monkeypatch.setattr(bundle_write, "MAX_LOG_BYTES", 64 << 10)
    monkeypatch.setattr(bundle_write, "LOG_HEAD_BYTES", 16 << 10)


def test_a_big_log_keeps_its_tail_and_explain_finds_the_oom_there(tmp_path, small_caps, capsys):
    log = tmp_path / "huge.log"
    log.write_text(_lines(20000) + "Traceback (most recent call last):\n" + OOM + "\n")
    oom_line = 20002  # in the original log
    out = tmp_path / "b.tar.gz"
    assert main(["bundle", "-o", str(out), "--log", str(log)]) == 0
    err = capsys.readouterr().err
    assert "warning" in err and "huge.log" in err and "left out" in err
    with tarfile.open(out) as tar:
        kept = tar.extractfile("oomdoctor-bundle/logs/huge.log").read().decode()
        meta = json.loads(tar.extractfile("oomdoctor-bundle/meta.json").read())
    assert kept.startswith("step 0 loss") and kept.rstrip("\n").endswith(OOM)
    note = meta["log_cuts"]["logs/huge.log"]
    lines = kept.split("\n")
    marker = lines[note["marker_line"] - 1]
    assert marker.startswith("[oomdoctor bundle:") and f"{note['omitted_lines']:,} lines" in marker
    assert re.fullmatch(r"step \d+ loss .*", lines[note["marker_line"] - 2])  # whole lines on both sides
    assert re.fullmatch(r"step \d+ loss .*", lines[note["marker_line"]])
    assert note["head_bytes"] + note["omitted_bytes"] + note["tail_bytes"] == note["original_bytes"] == log.stat().st_size
    assert len(kept.encode()) <= (64 << 10) + len(marker) + 2
    # the kept lines are the original's: the first after the marker is line marker + offset + 1 of the log
    first_after = int(lines[note["marker_line"]].split()[1]) + 1  # `step i` is line i + 1
    assert first_after == note["marker_line"] + 1 + note["tail_line_offset"]

    assert main(["explain", "--bundle", str(out)]) == 1  # an OOM explained
    report = capsys.readouterr().out
    shown = int(re.search(r"logs/huge\.log:(\d+)", report).group(1))
    assert shown + note["tail_line_offset"] == oom_line  # the marker says how to get the original number


def test_a_log_under_the_cap_is_kept_whole_with_no_marker(tmp_path, small_caps):
    log = tmp_path / "small.log"
    log.write_text(_lines(100) + OOM + "\n")
    w = BundleWriter()
    add_log(w, str(log))
    assert w.files["logs/small.log"].decode() == log.read_text()
    assert not w.log_cuts and not w.notes


def test_head_and_tail_are_cut_at_line_ends_and_count_what_is_left_out(tmp_path):
    data = _lines(5000).encode()
    path = tmp_path / "x.log"
    path.write_bytes(data)
    with open(path, "rb") as fh:
        cut = read_head_and_tail(fh, 20000, 5000)
    assert cut.head.endswith(b"\n") and len(cut.head) <= 5000 and data.startswith(cut.head)
    assert data.endswith(cut.tail) and cut.tail.startswith(b"step ") and len(cut.head) + len(cut.tail) <= 20000
    assert cut.omitted_bytes == len(data) - len(cut.head) - len(cut.tail)
    assert cut.omitted_lines == data[len(cut.head):len(data) - len(cut.tail)].count(b"\n")
    assert cut.total_bytes == len(data)


def test_a_stream_gets_the_same_cut_as_a_file(tmp_path):
    data = _lines(5000).encode()
    path = tmp_path / "x.log"
    path.write_bytes(data)
    with open(path, "rb") as fh:
        from_file = read_head_and_tail(fh, 20000, 5000)
    assert read_head_and_tail(io.BytesIO(data), 20000, 5000) == from_file


def test_past_the_scan_limit_a_file_seeks_to_its_end_and_a_stream_stops(tmp_path, monkeypatch):
    monkeypatch.setattr(log_cut, "MAX_SCAN_BYTES", 100_000)
    monkeypatch.setattr(log_cut, "CHUNK", 4096)
    data = _lines(20000).encode() + b"the end\n"
    path = tmp_path / "x.log"
    path.write_bytes(data)
    with open(path, "rb") as fh:
        cut = read_head_and_tail(fh, 20000, 5000)
    assert cut.tail.endswith(b"the end\n") and cut.omitted_lines is None  # the middle was skipped unread
    assert len(cut.head) + cut.omitted_bytes + len(cut.tail) == len(data) == cut.total_bytes
    assert "not the original log's" in cut.marker(3)
    stream = read_head_and_tail(io.BytesIO(data), 20000, 5000)
    assert stream.total_bytes is None and b"the end" not in stream.tail and "read no further" in stream.marker(3)


def test_a_tail_that_starts_inside_a_private_key_starts_after_it(tmp_path, small_caps):
    body = "".join(f"KEYBODY{i:04d}" + "A" * 56 + "\n" for i in range(400))  # ~26 KiB of key lines
    log = tmp_path / "k.log"
    log.write_text(_lines(1000) + "-----BEGIN RSA PRIVATE KEY-----\n" + body + "-----END RSA PRIVATE KEY-----\n"
                   + _lines(900, 5000) + OOM + "\n")
    w = BundleWriter()
    add_log(w, str(log))
    kept = w.files["logs/k.log"].decode()
    assert "KEYBODY" not in kept and kept.rstrip("\n").endswith(OOM)


def test_a_head_cap_over_the_limit_leaves_the_tail_at_least_half():
    cut = read_head_and_tail(io.BytesIO(b"\0" * 5000), 1000, 8000)  # no line end at all, head cap > limit
    assert len(cut.head) == 500 and len(cut.tail) == 500 and cut.omitted_bytes == 4000
