"""GIVEN bundles and inputs built by an attacker WHEN doctor/explain/diff/fleet/audit/bundle read them
THEN one line and exit 2, or a correct report saying what was skipped; bounded time and memory
(measured in the child, generous limits); nothing written outside the temporary directory; no
temporary files left behind; nothing of the reader's own machine read through the bundle.
"""

from __future__ import annotations

import io
import os
import tarfile

import pytest

import hostile
from hostile import CANARY, run_measured

MAX_CPU_SECONDS = 60  # generous: each case takes 1-5 s; before the fixes they took 15 s to hours
MAX_RSS_MIB = 400  # before the fixes: 1.5-6 GB


def _bounded(res: hostile.Result) -> None:
    assert res.cpu_seconds < MAX_CPU_SECONDS, res
    assert res.maxrss_mib < MAX_RSS_MIB, res
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr, res.stderr
    assert CANARY not in res.stdout + res.stderr


def _refused(res: hostile.Result, *words: str) -> None:
    _bounded(res)
    assert res.one_line_error, (res.rc, res.stderr)
    assert "oomdoctor-bundle-" not in res.stderr  # never the temporary path
    for w in words:
        assert w in res.stderr, res.stderr


def _reported(res: hostile.Result) -> None:
    _bounded(res)
    assert res.rc in (0, 1), (res.rc, res.stderr)
    assert res.stdout.strip()


@pytest.mark.parametrize("build,words", [
    (hostile.pax_header_bomb, ("PAX extended header",)),
    (hostile.pax_global_bomb, ("PAX extended header",)),
    (hostile.gnu_longname_bomb, ("GNU long-name header",)),
    (lambda p: hostile.gnu_longname_bomb(p, link=True), ("GNU long-name header",)),
])
@pytest.mark.parametrize("command", ["doctor", "explain"])
def test_header_bombs_are_refused_before_they_are_read(tmp_path, build, words, command):
    bundle = build(tmp_path / "b.tar.gz")
    assert bundle.stat().st_size < 200_000  # megabytes of header in kilobytes of archive
    args = ["doctor", "--bundle", str(bundle)] if command == "doctor" else ["explain", "--bundle", str(bundle)]
    _refused(run_measured(args, tmp_path), *words)


def test_many_headers_under_the_cap_are_stopped_by_the_stream_cap(tmp_path):
    bundle = hostile.many_small_pax_headers(tmp_path / "b.tar.gz", count=200)  # 12 MiB of headers
    res = run_measured(["doctor", "--bundle", str(bundle)], tmp_path, caps={"MAX_TOTAL_BYTES": 4 << 20})
    _refused(res, "once decompressed")


def test_gzip_bomb_is_stopped_by_the_decompressed_cap(tmp_path):
    bundle = hostile.gzip_bomb(tmp_path / "b.tar.gz", members=6, member_bytes=8 << 20)
    assert bundle.stat().st_size < 200_000
    res = run_measured(["doctor", "--bundle", str(bundle)], tmp_path, caps={"MAX_TOTAL_BYTES": 32 << 20})
    _refused(res, "MiB")


def test_member_larger_than_the_cap_is_refused_from_its_header(tmp_path):
    bundle = hostile.gzip_bomb(tmp_path / "b.tar.gz", members=1, member_bytes=16 << 20)
    res = run_measured(["doctor", "--bundle", str(bundle)], tmp_path, caps={"MAX_MEMBER_BYTES": 1 << 20})
    _refused(res, "larger than")


def test_pax_size_lie_is_refused(tmp_path):
    def build(tar):
        info = tarfile.TarInfo("oomdoctor-bundle/logs/huge.log")
        info.pax_headers = {"size": str(10**12)}
        tar.addfile(info)
    _refused(run_measured(["doctor", "--bundle", str(hostile.tgz(tmp_path / "b.tgz", build))], tmp_path))


def test_traversal_absolute_links_devices_are_never_extracted(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text(f"secret of the reader {CANARY}\n")

    def build(tar):
        hostile._add(tar, "../../escape.txt", b"x")
        hostile._add(tar, "oomdoctor-bundle/../../../escape2.txt", b"x")
        hostile._add(tar, str(tmp_path / "abs.txt"), b"x")
        hostile._add(tar, "oomdoctor-bundle/proc/self/environ2", type=tarfile.SYMTYPE, linkname="/proc/self/environ")
        hostile._add(tar, "oomdoctor-bundle/logs/x.log", type=tarfile.LNKTYPE, linkname=str(outside))
        hostile._add(tar, "oomdoctor-bundle/dev/evil", type=tarfile.CHRTYPE, devmajor=1, devminor=5)
        hostile._add(tar, "oomdoctor-bundle/dev/fifo", type=tarfile.FIFOTYPE)
    bundle = hostile.tgz(tmp_path / "b.tar.gz", build)
    (tmp_path / "tmpdir").mkdir()
    before = sorted(os.listdir(tmp_path))
    res = run_measured(["explain", "--bundle", str(bundle), "--format", "json"], tmp_path)
    _reported(res)
    assert "skipped" in res.stderr and "absolute or escaping" in res.stderr and "links, devices" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert sorted(os.listdir(tmp_path)) == before  # abs.txt, escape.txt: never written
    assert not (tmp_path.parent / "escape.txt").exists() and not (tmp_path.parent / "escape2.txt").exists()


@pytest.mark.parametrize("pax", [None, {"GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.name": "x",
                                          "GNU.sparse.realsize": "10"},
                                  {"GNU.sparse.map": "0,10", "GNU.sparse.size": "10"}])
def test_sparse_entries_are_refused(tmp_path, pax):
    def build(tar):
        info = tarfile.TarInfo("oomdoctor-bundle/logs/sparse.log")
        if pax is None:
            info.type = tarfile.GNUTYPE_SPARSE
        else:
            info.pax_headers = pax
            info.size = 512
        tar.addfile(info, None if pax is None else io.BytesIO(b"1\n" + b"9" * 510))
    fmt = tarfile.GNU_FORMAT if pax is None else tarfile.PAX_FORMAT
    res = run_measured(["doctor", "--bundle", str(hostile.tgz(tmp_path / "b.tgz", build, fmt=fmt))], tmp_path)
    _refused(res, "sparse")


def test_member_names_with_newlines_and_long_names_give_one_bounded_line(tmp_path):
    def build(tar):
        hostile._add(tar, "oomdoctor-bundle/logs/" + "\n".join(["a" * 50000] * 1) + "\nnext", b"x" * 10,
                     )
        info = tarfile.TarInfo("oomdoctor-bundle/logs/x\nname" + "b" * 60000)
        info.size = 10**9  # a lie: the archive ends first
        tar.addfile(info)
    res = run_measured(["doctor", "--bundle", str(hostile.tgz(tmp_path / "b.tgz", build))], tmp_path)
    _refused(res)
    assert len(res.stderr) < 1200


def test_too_many_entries_is_refused_quickly(tmp_path):
    def build(tar):
        for i in range(700):
            hostile._add(tar, f"oomdoctor-bundle/x/{i}", b"")
    res = run_measured(["doctor", "--bundle", str(hostile.tgz(tmp_path / "b.tgz", build))], tmp_path,
                       caps={"MAX_MEMBERS": 500})
    _refused(res, "more than 500 entries")


def test_the_entry_cap_is_a_few_thousand():
    from oomdoctor.collectors import bundle_safe

    assert bundle_safe.MAX_MEMBERS <= 5000


@pytest.mark.parametrize("folder", ["logs", "k8s"])
def test_thousands_of_logs_or_manifests_are_capped_and_counted(tmp_path, folder):
    def build(tar):
        for i in range(3000):
            data = b"RuntimeError: CUDA out of memory.\n" if folder == "logs" else b"kind: Pod\nmetadata: {name: p}\n"
            hostile._add(tar, f"oomdoctor-bundle/{folder}/{i}.{'log' if folder == 'logs' else 'yaml'}", data)
    bundle = hostile.tgz(tmp_path / "b.tgz", build)
    res = run_measured(["explain", "--bundle", str(bundle)], tmp_path)
    _reported(res)
    assert f"in {folder}/ beyond the first 64" in res.stderr
    assert res.cpu_seconds < 30


def test_duplicates_and_file_dir_clashes(tmp_path):
    def build(tar):
        hostile._add(tar, "oomdoctor-bundle/proc/version", b"Linux version 9.9.9 (evil)\n")
        hostile._add(tar, "oomdoctor-bundle/meta.json/inner", b"x")
    res = run_measured(["doctor", "--bundle", str(hostile.tgz(tmp_path / "b.tgz", build))], tmp_path)
    _bounded(res)
    assert res.rc in (0, 1, 2)
    if res.rc == 2:
        assert res.one_line_error


# --- directory bundles: links and FIFOs are never followed or opened ---------------------------------


def test_directory_bundle_links_to_the_readers_files_and_dev_zero(tmp_path):
    secret = tmp_path / "reader-secret.log"
    secret.write_text(f"RuntimeError: CUDA out of memory. {CANARY}\n")
    root = hostile.dir_bundle(tmp_path / "bundle")
    for rel, target in (("proc/self/environ", "/proc/self/environ"), ("meta.json", "/dev/zero"),
                        ("commands/nvidia-smi-q.xml", "/dev/zero"), ("logs/x.log", str(secret)),
                        ("etc/os-release", "/etc/os-release")):
        (root / rel).unlink(missing_ok=True)
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, root / rel)
    os.symlink("/", root / "k8s" / "rootdir")
    os.symlink(str(tmp_path), root / "usr" / "up")
    for command in (["doctor", "--bundle", str(root), "--format", "json"],
                    ["explain", "--bundle", str(root), "--format", "html"],
                    ["diff", str(root), str(hostile.SEED)]):
        res = run_measured(command, tmp_path)
        _reported(res)
        assert "links, FIFOs" in res.stderr


def test_directory_bundle_fifos_do_not_hang(tmp_path):
    root = hostile.dir_bundle(tmp_path / "bundle")
    for rel in ("proc/meminfo", "logs/seed-traceback.txt", "meta.json"):
        (root / rel).unlink()
        os.mkfifo(root / rel)
    res = run_measured(["explain", "--bundle", str(root)], tmp_path, timeout=60)
    _reported(res)


def test_directory_bundle_hard_link_to_a_readers_file_is_skipped(tmp_path):
    secret = tmp_path / "secret.log"
    secret.write_text(f"RuntimeError: CUDA out of memory. {CANARY}\n")
    root = hostile.dir_bundle(tmp_path / "bundle")
    os.link(secret, root / "logs" / "hard.log")
    res = run_measured(["explain", "--bundle", str(root)], tmp_path)
    _reported(res)
    assert "hard-linked" in res.stderr


def test_directory_bundle_nested_too_deep(tmp_path):
    root = hostile.dir_bundle(tmp_path / "bundle")
    deep = root / "logs"
    for _ in range(40):
        deep = deep / "d"
    deep.mkdir(parents=True)
    _refused(run_measured(["doctor", "--bundle", str(root)], tmp_path), "deeper than")


# --- file contents: huge, deep or wrongly typed JSON ---------------------------------------------------


@pytest.mark.parametrize("files", [
    {"meta.json": hostile.deep_json(100_000)},
    {"meta.json": b"[1, 2, 3]"},
    {"meta.json": b'{"pid": "x", "nvml_error": 5, "cpu_count": {"a": 1}, "hostname": [1]}'},
    {"commands/torch.json": hostile.deep_json(5_000)},
    {"commands/torch.json": b'"just a string"'},
    {"commands/torch.json": b'{"version": 5, "cuda": [], "devices": "many", "cudnn": {"x": []}}'},
    {"commands/shm.json": b'{"torch_segments": "many", "size": [], "used": {}}'},
    {"commands/shm.json": hostile.wide_json(20)},
    {"commands/nvidia-smi-q.xml": b"<nvidia_smi_log>" + b"<gpu>" * 50_000},
    {"commands/nvidia-smi-q.xml": b'<!DOCTYPE x [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;">'
                                  b'<!ENTITY c "&b;&b;&b;&b;&b;&b;&b;">]><nvidia_smi_log>&c;&c;&c;</nvidia_smi_log>'},
    {"k8s/bomb.yaml": hostile.yaml_alias_bomb().encode()},
    {"k8s/deep.yaml": b"a: " + b"[" * 5000 + b"]" * 5000},
    {"proc/self/environ": b"A=" + b"x" * (6 << 20)},
])
def test_hostile_file_contents_give_a_report_or_one_line(tmp_path, files):
    root = hostile.json_bundle(tmp_path / "bundle", files)
    res = run_measured(["doctor", "--bundle", str(root), "--format", "json"], tmp_path)
    _bounded(res)
    assert res.rc in (0, 1) or res.one_line_error, (res.rc, res.stderr)


# --- fleet, diff, audit, bundle inputs ---------------------------------------------------------------


def test_fleet_directory_with_fifo_symlink_and_deep_json(tmp_path):
    reports = tmp_path / "reports"
    reports.mkdir()
    os.mkfifo(reports / "x.json")
    os.symlink("/etc/passwd", reports / "passwd.json")
    (reports / "deep.json").write_bytes(hostile.deep_json(50_000))
    (reports / "deep2.json").write_text("{" + '"a":{' * 500 + "}" * 501)
    res = run_measured(["fleet", str(reports)], tmp_path, timeout=60)
    _refused(res, "no doctor reports found")


def test_diff_deep_json_is_one_line(tmp_path):
    (tmp_path / "a.json").write_bytes(hostile.deep_json(50_000))
    (tmp_path / "b.json").write_text("{" + '"a":{' * 500 + "}" * 501)
    _refused(run_measured(["diff", str(tmp_path / "a.json"), str(tmp_path / "b.json")], tmp_path), "nested deeper")


@pytest.mark.parametrize("command", [["audit"], ["bundle", "-o", "out.tgz", "--manifest"]])
def test_yaml_alias_bomb_is_refused_fast(tmp_path, command):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(hostile.yaml_alias_bomb())
    assert bomb.stat().st_size < 1000
    res = run_measured([*command, str(bomb)], tmp_path)
    _refused(res)
    assert "nodes" in res.stderr or "alias" in res.stderr
    assert res.cpu_seconds < 20


def test_yaml_self_referencing_alias_and_deep_nesting(tmp_path):
    for text in ("a: &a [*a]\n", "a: " + "[" * 3000 + "]" * 3000 + "\n", "a:\n" + "".join(" " * i + "- \n" for i in range(1, 400))):
        f = tmp_path / "m.yaml"
        f.write_text(text)
        res = run_measured(["audit", str(f)], tmp_path)
        _bounded(res)
        assert res.rc in (0, 1) or res.one_line_error, (res.rc, res.stderr)


@pytest.mark.parametrize("option", ["--log", "--manifest"])
def test_bundle_inputs_are_read_capped(tmp_path, option):
    big = tmp_path / "big"
    with open(big, "wb") as fh:
        fh.truncate(256 << 20)  # 256 MiB of sparse zeros; caps patched to 1 MiB: cheap on disk, expensive if read whole
    caps = {"oomdoctor.collectors.bundle_write.MAX_LOG_BYTES": 1 << 20,
            "oomdoctor.collectors.bundle_write.MAX_MANIFEST_BYTES": 1 << 20}
    res = run_measured(["bundle", "-o", str(tmp_path / "out.tgz"), option, str(big)], tmp_path, caps=caps)
    assert res.maxrss_mib < 200  # the 48 MiB file was never read whole
    _bounded(res)
    if option == "--manifest":
        assert res.one_line_error and "larger than" in res.stderr
    (tmp_path / "out.tgz").unlink(missing_ok=True)


def test_the_reader_never_calls_extract():
    """Regression guard: members are copied one by one, never with tarfile's extract/extractall."""
    src = (hostile.ROOT / "src" / "oomdoctor" / "collectors" / "bundle_safe.py").read_text()
    assert "extractall" not in src and ".extract(" not in src


@pytest.mark.parametrize("argv", [["explain", "--bundle"], ["doctor", "--bundle"]])
def test_a_bundle_is_copied_once_per_command(monkeypatch, capsys, argv):
    from oomdoctor.cli import main
    from oomdoctor.collectors import bundle_read

    calls = []
    real = bundle_read.copy_bundle
    monkeypatch.setattr(bundle_read, "copy_bundle", lambda p, d: calls.append(p) or real(p, d))
    assert main([*argv, str(hostile.SEED)]) in (0, 1)
    assert len(calls) == 1


@pytest.mark.parametrize("dict_mib,refused", [(1536, True), (8, False)])
def test_xz_dictionary_size_is_limited(tmp_path, dict_mib, refused):
    import lzma

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        hostile.seed_members(tar)
    data = lzma.compress(buf.getvalue(), filters=[{"id": lzma.FILTER_LZMA2, "dict_size": dict_mib << 20}])
    (tmp_path / "b.tar.xz").write_bytes(data)
    res = run_measured(["doctor", "--bundle", str(tmp_path / "b.tar.xz")], tmp_path)
    if refused:
        _refused(res, "Memory usage limit")
    else:
        _reported(res)


def test_fleet_stdin_of_zeros_is_refused_from_its_first_bytes(tmp_path):
    res = run_measured(["fleet", "-"], tmp_path, stdin=bytes(128 << 20))
    _refused(res, "binary data")
    assert res.maxrss_mib < 100  # the 128 MiB were not read


def test_report_of_a_run_dir_with_fifo_and_links(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    os.mkfifo(run / "timeline-0.jsonl")
    os.symlink("/dev/zero", run / "outside.jsonl")
    os.symlink("/dev/zero", run / "run.json")
    (run / "oom-1.json").write_bytes(hostile.deep_json(50_000))
    res = run_measured(["report", str(run)], tmp_path, timeout=60)
    _refused(res, "not an oomdoctor run directory")
