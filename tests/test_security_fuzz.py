"""Hypothesis fuzzing of what reads strangers' input: the bundle reader (random archives and damaged
ones), budgeted YAML with anchors and aliases, JSON depth, the log scanner and redaction.

Example counts are modest so the suite stays fast; each property says what must always hold.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oomdoctor.collectors.bundle_safe import copy_bundle
from oomdoctor.errors import InputError
from oomdoctor.explain.events import LogScanner
from oomdoctor.parsers import k8s_manifest, yamldocs
from oomdoctor.parsers.budget import BudgetError, loads_json
from oomdoctor.redact import MASK, redact_rendered, redact_text

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_NAMES = st.one_of(
    st.sampled_from(["meta.json", "proc/meminfo", "logs/a.log", "k8s/p.yaml", "../x", "/abs", "a/../../b", ".",
                     "./proc/version", "a//b", "dir/", "oomdoctor-bundle/meta.json", "x" * 300, "é/ü\u202e.txt"]),
    st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40),
)
_TYPES = st.sampled_from([tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE,
                          tarfile.CHRTYPE, tarfile.BLKTYPE, tarfile.FIFOTYPE, tarfile.CONTTYPE, tarfile.GNUTYPE_SPARSE])
_MEMBERS = st.lists(st.tuples(_NAMES, _TYPES, st.binary(max_size=300), st.sampled_from(["", "../../etc/passwd", "/"]),
                              st.dictionaries(st.sampled_from(["comment", "path", "linkpath", "uname"]),
                                              st.text(max_size=50), max_size=2)),
                    max_size=12)


def _archive(members, fmt) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=fmt) as tar:
        for name, typ, data, link, pax in members:
            info = tarfile.TarInfo(name)
            info.type = typ
            info.linkname = link
            if fmt == tarfile.PAX_FORMAT:
                info.pax_headers = pax
            try:
                if typ in (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.CONTTYPE):
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                else:
                    tar.addfile(info)
            except (ValueError, UnicodeError):  # a name this format cannot hold
                continue
    return buf.getvalue()


def _copy(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as work:
        src, dest = Path(work, "b.tar.gz"), Path(work, "dest")
        src.write_bytes(data)
        dest.mkdir()
        try:
            copy_bundle(src, dest)
        except InputError as exc:
            assert "\n" not in exc.message and len(exc.message) < 600
        assert sorted(os.listdir(work)) == ["b.tar.gz", "dest"]  # nothing written beside the copy
        for here, dirs, files in os.walk(dest):
            for name in dirs + files:
                st_ = os.lstat(os.path.join(here, name))
                assert os.path.isdir(os.path.join(here, name)) or (st_.st_mode & 0o170000) == 0o100000
                assert not os.path.islink(os.path.join(here, name))


@SETTINGS
@given(_MEMBERS, st.sampled_from([tarfile.PAX_FORMAT, tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT]))
def test_random_archives_copy_only_plain_files_inside(members, fmt):
    _copy(_archive(members, fmt))


@SETTINGS
@given(_MEMBERS, st.lists(st.tuples(st.integers(0, 4000), st.integers(0, 255)), min_size=1, max_size=8),
       st.integers(0, 4000))
def test_damaged_archives_are_one_line_errors(members, flips, cut):
    data = bytearray(_archive(members, tarfile.PAX_FORMAT))
    for pos, value in flips:
        if data:
            data[pos % len(data)] = value
    _copy(bytes(data[: max(1, len(data) - cut % (len(data) or 1))]))


_SCALARS = st.sampled_from(["1", "x", "'q'", "null", "true", "{}", "[]", "2Gi", '"a: b"'])


@st.composite
def _yaml_with_aliases(draw) -> str:
    lines, anchors = [], []
    for i in range(draw(st.integers(1, 12))):
        parts = [draw(_SCALARS)]
        if anchors:
            parts += [f"*{a}" for a in draw(st.lists(st.sampled_from(anchors), max_size=12))]
        value = "[" + ", ".join(parts) + "]"
        if draw(st.booleans()):
            lines.append(f"k{i}: &a{i} {value}")
            anchors.append(f"a{i}")
        else:
            lines.append(f"k{i}: {value}")
    if anchors and draw(st.booleans()):
        lines.append(f"m:\n  <<: {{x: *{draw(st.sampled_from(anchors))}}}\n  y: 1")
    return "\n".join(lines) + "\n"


@SETTINGS
@given(st.one_of(_yaml_with_aliases(), st.text(max_size=300)))
def test_manifest_parsers_with_aliases_stay_within_budget(text):
    try:
        k8s_manifest.load_documents(text)
    except k8s_manifest.ManifestError as exc:
        assert "\n" not in str(exc)
    try:
        yamldocs.load_documents(text, "m.yaml")
    except InputError as exc:
        assert "\n" not in exc.message


@SETTINGS
@given(st.recursive(st.none() | st.integers() | st.text(max_size=5), lambda c: st.lists(c, max_size=3)
                    | st.dictionaries(st.text(max_size=3), c, max_size=3), max_leaves=30), st.integers(1, 150))
def test_json_depth_cap(value, extra):
    nested = value
    for _ in range(extra):
        nested = [nested]
    def depth(v):  # the reference: recursion is fine at these sizes
        kids = v.values() if isinstance(v, dict) else v if isinstance(v, list) else None
        return 0 if kids is None else 1 + max(map(depth, kids), default=0)

    try:
        assert loads_json(json.dumps(nested)) == nested
        assert depth(nested) <= 100
    except BudgetError:
        assert depth(nested) > 100


_LOG_LINES = st.lists(st.one_of(
    st.sampled_from([b"RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB", b"Killed",
                     b"NVRM: Xid (PCI:0000:3b:00): 79, pid=1, token=abc", b"torch.OutOfMemoryError:",
                     b"Memory cgroup out of memory: Killed process 1 (python)", b"\x00\xff" * 50, b"x" * 5000]),
    st.binary(max_size=200)), max_size=30)


@SETTINGS
@given(_LOG_LINES, st.integers(1, 64))
def test_log_scanner_takes_any_bytes_in_any_chunks(lines, chunk):
    data = b"\n".join(lines)
    scanner = LogScanner()
    scanner.start_source("fuzz.log")
    for i in range(0, len(data), chunk):
        scanner.feed(data[i:i + chunk])
    scanner.finish()


@SETTINGS
@given(st.text(max_size=400), st.sampled_from(["pgsecret1a", "curlpass6f", "argpass7g"]))
def test_redaction_of_planted_values_in_any_text(noise, secret):
    for form in (f"PGPASSWORD={secret}", f"curl -u al:{secret}", f"--password={secret}", f"token={secret}"):
        text = f"{noise} {form} {noise}"
        out = redact_text(text)
        assert secret not in out.replace(noise, "") or secret in noise
        assert MASK in out
    doc = json.dumps({"s": f"{noise} --password={secret}"}, indent=2)
    assert json.loads(redact_rendered(doc, "json"))["s"].endswith(MASK)


def test_a_secret_assignment_after_a_harmless_one_with_spaces_is_redacted():
    """Found by hypothesis: `A= PGPASSWORD=x` made `A` take `PGPASSWORD=x` as its value."""
    for text in ("A= PGPASSWORD=pgsecret1a ", "A: token=tok9secret", "x = y = HF_TOKEN=hfsecret77"):
        out = redact_text(text)
        assert "secret" not in out and MASK in out, out
    assert len(redact_text("a=" * 100_000)) == 200_000  # nested values are looked into a bounded number of times
