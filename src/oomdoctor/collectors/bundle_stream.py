"""The streaming half of the bundle reader: decompression with limits, and tar headers checked
before tarfile reads them (collectors/bundle_safe.py copies the members; docs/security.md).

tarfile reads a PAX (`x`/`g`) or GNU long-name (`L`/`K`) header's payload whole, and a sparse map
block by block, before any member limit applies: 1 MB of archive can hold 1 GiB of header. The
TarInfo subclass here refuses them from their 512-byte header block. The counting reader caps the
decompressed stream, headers included; xz gets a decoder memory limit (the archive chooses it).
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import tarfile
from typing import IO, Any

MAX_HEADER_BYTES = 64 * 1024  # a PAX or GNU long-name header; real ones are a few hundred bytes
MAX_XZ_MEMORY = 128 * 1024 * 1024  # liblzma's allocation for an .tar.xz (its dictionary)
NAME_SHOWN = 120  # characters of a member name in an error line

_GNU_LONG = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK)
_PAX = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE)


class Refused(Exception):
    """A budget or rule was broken; the message is one short line."""


def shown(name: str, limit: int = NAME_SHOWN) -> str:
    """A name as it may appear in an error line: printable, one line, at most `limit` characters."""
    text = "".join(c if c.isprintable() else "?" for c in str(name))
    return text if len(text) <= limit else text[: limit - 3] + "..."


class CappedReader:
    """A read-only stream that raises once more than `cap` bytes came through it."""

    def __init__(self, raw: IO[bytes], cap: int) -> None:
        self.raw, self.cap, self.count = raw, cap, 0

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0 or size > (1 << 20):
            size = 1 << 20  # never one unbounded read
        data = self.raw.read(size)
        self.count += len(data)
        if self.count > self.cap:
            raise Refused(f"more than {self.cap >> 20} MiB once decompressed")
        return data

    def close(self) -> None:  # tarfile closes what it was given; the caller closes the file
        pass


class SafeTarInfo(tarfile.TarInfo):
    """Refuses oversized extended headers from their 512-byte header block, before the payload is read."""

    def _proc_member(self, tarfile_: Any) -> Any:
        if self.type in _GNU_LONG + _PAX and self.size > MAX_HEADER_BYTES:
            kind = "GNU long-name" if self.type in _GNU_LONG else "PAX extended"
            raise Refused(f"{kind} header of {self.size} bytes (at most {MAX_HEADER_BYTES} allowed)")
        if self.type == tarfile.GNUTYPE_SPARSE:
            _no_sparse()
        return super()._proc_member(tarfile_)  # type: ignore[misc]

    # Sparse maps are read block by block, as many as the archive says: within the stream cap that is
    # millions of Python iterations. A bundle never holds sparse files, so they are refused outright.
    def _proc_gnusparse_00(self, *args: Any) -> Any:
        _no_sparse()

    def _proc_gnusparse_01(self, *args: Any) -> Any:
        _no_sparse()

    def _proc_gnusparse_10(self, *args: Any) -> Any:
        _no_sparse()


def _no_sparse() -> None:
    raise Refused("sparse file entries (never written by `oomdoctor bundle`)")


def decompressor(fh: IO[bytes]) -> IO[bytes]:
    head = fh.read(6)
    fh.seek(0)
    if head.startswith(b"\x1f\x8b"):
        return gzip.GzipFile(fileobj=fh, mode="rb")  # type: ignore[return-value]
    if head.startswith(b"BZh"):
        return bz2.BZ2File(fh, "rb")  # type: ignore[return-value]
    if head.startswith(b"\xfd7zXZ\x00"):
        return _Xz(fh)  # type: ignore[return-value]
    return fh


class _Xz:
    """xz with a memory limit: the archive chooses the dictionary size, and liblzma allocates it."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw, self.dec = raw, lzma.LZMADecompressor(memlimit=MAX_XZ_MEMORY)

    def read(self, size: int = -1) -> bytes:
        size = size if 0 < size <= (1 << 20) else 1 << 20
        while not self.dec.eof:
            data = b""
            if self.dec.needs_input:
                data = self.raw.read(1 << 16)
                if not data:
                    raise EOFError("xz stream ended early")
            out = self.dec.decompress(data, max_length=size)
            if out:
                return out
        return b""
