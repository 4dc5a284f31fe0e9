"""GIVEN a log whose progress bar is redrawn with carriage returns for a whole epoch (one line of hundreds of
kilobytes, as tqdm writes into a file), with the OOM printed on that same line at its end WHEN explain reads it, from
a small file, through the threaded windows of a large one, or from a pipe THEN the OOM is found, and its text is the
message, not the bar.

A new user's walkthrough (session 25) found such a line gave no event: a line over 64 KiB kept only its first 64 KiB.
It is now read as its first and last 32 KiB (explain.read.HEAD/TAIL), in every reading mode."""

from __future__ import annotations

import io
import json

import pytest

from oomdoctor.cli import main
from oomdoctor.explain.events import LogScanner
from oomdoctor.explain.prefilter import index_block
from oomdoctor.explain.read import MAX_LINE, _spans, iter_prepared

MSG = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 "
       "GiB of which 1.20 GiB is free. Including non-PyTorch memory, this process has 77.90 GiB memory in use. Of the "
       "allocated memory 70.10 GiB is allocated by PyTorch, and 6.80 GiB is reserved by PyTorch but unallocated.")


def bar(n: int) -> str:
    return "".join(f"\r{i % 100:3d}%|{'#' * (i % 100 // 5):20s}| {i}/{n} [00:{i % 60:02d}<01:10, 3.1it/s]"
                   for i in range(n))


def log(updates: int, before: int = 3, after: str = "") -> bytes:
    head = "".join(f"step {i} loss 1.{i:03d}\n" for i in range(before))
    return (head + "Epoch 1\n" + bar(updates) + "\r" + MSG + "\n" + after).encode()


def scan(path: str, workers: int, block: int):
    sc = LogScanner()
    sc.start_source("x")
    for buf, s, e, index in iter_prepared(path, index_block, workers=workers, block_size=block):
        sc.feed(buf, s, e, index)
    return sc.finish()


@pytest.mark.parametrize("updates", [100, 3000, 40000])  # 5 KB, 170 KB, 2.3 MB of bar before the message
@pytest.mark.parametrize(("workers", "block"), [(1, 8 << 20), (1, 4096), (3, 4096), (3, 3 * (MAX_LINE + 1)),
                                                (4, 1 << 20)])
def test_the_oom_at_the_end_of_a_progress_bar_is_found(tmp_path, updates, workers, block):
    p = tmp_path / "train.log"
    p.write_bytes(log(updates, before=2000, after="".join(f"teardown {i}\n" for i in range(2000))))
    events = scan(str(p), workers, block).events
    assert len(events) == 1, [e.text[:80] for e in events]
    ev = events[0]
    assert ev.kind != "oom_caught" and ev.line == 2002  # 2000 step lines, "Epoch 1", the bar's line
    assert ev.text.startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    assert "it/s" not in ev.text  # the message, not the bar


def test_from_a_pipe_too():
    data = log(40000)
    spans = list(_spans(io.BytesIO(data), 1 << 16))
    sc = LogScanner()
    sc.start_source("<stdin>")
    for buf, s, e in spans:
        sc.feed(buf, s, e)
    events = sc.finish().events
    assert [e.text[:30] for e in events] == ["torch.OutOfMemoryError: CUDA o"]


def test_explain_answers_from_the_message_on_the_bar_line(tmp_path, capsys):
    p = tmp_path / "train.log"
    p.write_bytes(log(40000))
    assert main(["explain", "--format", "json", str(p)]) == 1
    out = json.loads(capsys.readouterr().out)
    text = json.dumps(out)
    assert "Tried to allocate 2.00 GiB" in text and "3.1it/s" not in text


def test_a_short_bar_line_gives_the_message_as_the_event_text(tmp_path):
    p = tmp_path / "short.log"
    p.write_bytes(log(100))
    (ev,) = scan(str(p), 1, 8 << 20).events
    assert ev.text.startswith("torch.OutOfMemoryError") and "|" not in ev.text


def test_windows_line_ends_are_not_pieces(tmp_path):
    p = tmp_path / "crlf.log"
    p.write_bytes(b"step 1\r\n" + MSG.encode() + b"\r\nstep 2\r\n")
    (ev,) = scan(str(p), 1, 8 << 20).events
    assert ev.text == MSG and ev.line == 2


def test_a_bar_alone_is_no_event(tmp_path):
    p = tmp_path / "healthy.log"
    p.write_bytes(("Epoch 1\n" + bar(40000) + "\n" + "done\n").encode())
    for workers, block in ((1, 8 << 20), (3, 4096)):
        assert scan(str(p), workers, block).events == []


# the review of session 26: the event's kind stays the whole line's; only its text is the failure's piece
def test_a_recovered_retry_on_one_redrawn_line_stays_recovered(tmp_path):
    p = tmp_path / "retry.log"
    p.write_bytes(b"Batch size 64 failed, trying batch size 32\rRuntimeError: CUDA out of memory. Tried to allocate "
                  b"2.00 GiB (GPU 0; 15.78 GiB total capacity; 13.1 GiB already allocated)\nstep 2 ok\n")
    assert main(["explain", str(p)]) == 0


def test_a_piece_of_another_kind_does_not_change_the_event(tmp_path):
    p = tmp_path / "k.log"
    p.write_bytes(MSG.encode() + b"\rKilled\n")
    (ev,) = scan(str(p), 1, 8 << 20).events
    assert ev.kind == "torch_oom" and ev.text.startswith("torch.OutOfMemoryError")


def test_pieces_are_tried_only_where_the_kinds_words_are(monkeypatch):
    from oomdoctor.explain import events as E

    calls = []
    real = E.P.classify_line
    monkeypatch.setattr(E.P, "classify_line", lambda line: calls.append(1) or real(line))
    text = MSG + "\ra" * 32000  # a hostile line: the failure first, then 32,000 pieces of nothing
    assert E._visible(text, "torch_oom") == MSG
    assert len(calls) <= 3
