"""GIVEN a rotated, compressed log (`train.log.1.gz`, .bz2, .xz) WHEN explain reads it THEN it is decompressed and
read like the log itself; a corrupt or truncated one and one that decompresses past the cap stop with one line and
exit 2. A walkthrough (session 26) got "No OOM-like event found" (exit 0) for a .gz log."""

from __future__ import annotations

import bz2
import gzip
import lzma

import pytest

from oomdoctor.cli import main
from oomdoctor.explain import read

LOG = (b"step 1 ok\n" * 1000 + b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
       b"total capacity of 79.15 GiB of which 1.20 GiB is free.\n" + b"teardown\n" * 10)


@pytest.mark.parametrize(("ext", "compress"), [(".gz", gzip.compress), (".bz2", bz2.compress), (".xz", lzma.compress)])
@pytest.mark.parametrize("threads", ["1", "4"])
def test_a_compressed_log_is_read_like_the_log(tmp_path, capsys, ext, compress, threads):
    p = tmp_path / f"train.log{ext}"
    p.write_bytes(compress(LOG))
    assert main(["explain", "--threads", threads, "--format", "json", str(p)]) == 1
    out = capsys.readouterr().out
    assert "Tried to allocate 2.00 GiB" in out and '"line": 1001' in out


def test_a_truncated_one_is_one_line_and_exit_2(tmp_path, capsys):
    p = tmp_path / "cut.log.gz"
    p.write_bytes(gzip.compress(LOG)[:60])
    assert main(["explain", str(p)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot decompress" in err


def test_a_bomb_stops_at_the_cap(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(read, "MAX_DECOMPRESSED", 4096)
    p = tmp_path / "big.log.gz"
    p.write_bytes(gzip.compress(LOG))
    assert main(["explain", str(p)]) == 2
    assert "once decompressed" in capsys.readouterr().err


def test_a_plain_log_is_not_taken_for_a_compressed_one(tmp_path):
    p = tmp_path / "BZh.log"  # starts like bzip2's magic only in its name
    p.write_bytes(b"BZ: not bzip2\n" + LOG)
    assert read.compression(str(p)) is None
