"""GIVEN any input WHEN `oomdoctor explain` reads it THEN one clear outcome: a report, or exit 2 with one line."""

from __future__ import annotations

import io
import json
import os
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oomdoctor.cli import main
from oomdoctor.explain.events import LogScanner
from oomdoctor.explain.rank import explain_text
from oomdoctor.explain.read import MAX_LINE, _spans

OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.95 GiB. GPU 0 has a total capacity of "
       "44.35 GiB of which 1.27 GiB is free. Including non-PyTorch memory, this process has 43.07 GiB memory in "
       "use. Of the allocated memory 30.02 GiB is allocated by PyTorch, and 12.46 GiB is reserved by PyTorch but "
       "unallocated.\n")


def _write(tmp_path, name, data: bytes):
    p = tmp_path / name
    p.write_bytes(data)
    return str(p)


def test_exit_1_with_oom_and_0_without(tmp_path, capsys):
    assert main(["explain", _write(tmp_path, "a.log", OOM.encode())]) == 1
    assert "fragmentation" in capsys.readouterr().out
    assert main(["explain", _write(tmp_path, "b.log", b"all good\n")]) == 0
    assert "No OOM-like event" in capsys.readouterr().out


def test_json_envelope_and_contract(tmp_path, capsys):
    assert main(["explain", "--format", "json", _write(tmp_path, "a.log", OOM.encode())]) == 1
    d = json.loads(capsys.readouterr().out)
    assert d["schema_version"] == 1 and "tool_version" in d
    assert d["hypotheses"][0]["category"] == "fragmentation"
    assert d["events"][0]["numbers"]["requested_bytes"] == round(1.95 * 1024**3)


def test_html_is_self_contained(tmp_path):
    out = tmp_path / "r.html"
    assert main(["explain", "--format", "html", "-o", str(out), _write(tmp_path, "a.log", OOM.encode())]) == 1
    html = out.read_text()
    assert html.startswith("<!doctype html>") and "fragmentation" in html
    assert "<script src" not in html and "<link" not in html


def test_stdin(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(OOM.encode())))
    assert main(["explain", "-"]) == 1
    assert "<stdin>" in capsys.readouterr().out


@pytest.mark.parametrize("kind", ["missing", "directory", "unreadable"])
def test_bad_input_exit_2_one_line(tmp_path, capsys, monkeypatch, kind):
    if kind == "missing":
        path = str(tmp_path / "nope.log")
    elif kind == "directory":
        path = str(tmp_path)
    else:
        from oomdoctor.explain import read

        path = _write(tmp_path, "secret.log", b"x")
        os.chmod(path, 0)
        if os.geteuid() == 0:  # root reads mode-0 files: let access() answer as it does for anyone else
            monkeypatch.setattr(read.os, "access", lambda p, mode: p != path and os.access(p, mode))
    assert main(["explain", path]) == 2
    err = capsys.readouterr().err.strip()
    assert path in err and "\n" not in err and "Traceback" not in err


@pytest.mark.parametrize("where", ["access", "open-1-thread", "open-threads"])
def test_unreadable_even_as_root_is_exit_2_one_line(tmp_path, capsys, monkeypatch, where):
    """The case above cannot run as root (CI is root), and root can still be refused: an NFS export
    with root_squash says EACCES at open() while access() said yes. Each path that opens the log is
    made to refuse it."""
    import builtins

    from oomdoctor.explain import read as logs

    path = _write(tmp_path, "secret.log", b"step 1 loss 0.5\n" * 700_000)  # ~11 MB: two blocks
    denied = PermissionError(13, "Permission denied")
    if where == "access":
        monkeypatch.setattr(logs.os, "access", lambda p, mode: p != path and os.access(p, mode))
    elif where == "open-1-thread":
        real_open = builtins.open
        monkeypatch.setattr(logs, "open", lambda p, *a, **k: (_ for _ in ()).throw(denied) if p == path
                            else real_open(p, *a, **k), raising=False)
    else:
        real_os_open = os.open

        def os_open(p, *a, **k):
            if p == path:
                raise denied
            return real_os_open(p, *a, **k)

        monkeypatch.setattr(logs.os, "open", os_open)
    threads = "2" if where == "open-threads" else "1"
    assert main(["explain", "--threads", threads, path]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert path in err and "ermission denied" in err and "\n" not in err and "Traceback" not in err
    assert captured.out == ""


def test_missing_file_fails_before_any_output(tmp_path, capsys):
    good = _write(tmp_path, "a.log", OOM.encode())
    assert main(["explain", good, str(tmp_path / "missing.log")]) == 2
    assert capsys.readouterr().out == ""


def test_bundle_unavailable_is_one_line(tmp_path, capsys):
    rc = main(["explain", "--bundle", str(tmp_path / "b.tar.gz"), _write(tmp_path, "a.log", OOM.encode())])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err and "Traceback" not in err


@pytest.mark.parametrize("data,binary", [
    (b"", False),                                                   # empty file
    (os.urandom(200_000), True),                                    # binary: exit 2, one line
    (b"\xff\xfe\xfa CUDA out of memory. \xc3\x28 Tried to allocate 2.00 MiB\n", False),  # invalid UTF-8 around an OOM
    (b"\x00" * 10_000 + b"\n" + OOM.encode(), False),               # NULs then an OOM
])
def test_hostile_bytes_never_traceback(tmp_path, capsys, data, binary):
    rc = main(["explain", "--format", "json", _write(tmp_path, "x.log", data)])
    out = capsys.readouterr()
    if binary:
        assert rc == 2 and out.out == "" and "\n" not in out.err.strip() and "Traceback" not in out.err
        return
    assert rc in (0, 1)
    json.loads(out.out)


def test_100mb_single_line_constant_memory(tmp_path, capsys):
    path = tmp_path / "one.log"
    with open(path, "wb") as f:
        f.write(b"CUDA out of memory. " + b"x" * (100 * 1024 * 1024) + b"\n" + OOM.encode())
    assert main(["explain", "--format", "json", str(path)]) == 1
    d = json.loads(capsys.readouterr().out)
    assert all(len(e["text"]) <= 64 * 1024 for e in d["events"])
    assert any(e["kind"] == "torch_oom" and e["line"] == 2 for e in d["events"])


# --- fuzzing (hypothesis) ---------------------------------------------------------------------------

_WORDS = st.sampled_from([
    "CUDA out of memory.", "Tried to allocate", "2.00 MiB", "GiB", "(GPU 0;", "total capacity", "free;",
    "reserved in total by PyTorch)", "Process 12 has", "memory in use.", "allowed;", "\n", "[HAMI-core ERROR (pid:1)]:",
    "Device 0 OOM 5 / 3", "Killed", "exit code 137", "NVRM: Xid (PCI:0000:01:00): 31,", "step 3 mem 1.2 GiB",
    "CUBLAS_STATUS_", "RESOURCE_EXHAUSTED: Out of memory", "\x00", "\udcff", "é", " ",
])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(_WORDS, st.text(max_size=40)), max_size=60))
def test_fuzz_explain_text_never_raises(parts):
    ex = explain_text("".join(parts).splitlines())
    for h in ex.hypotheses:
        assert 0 <= h.confidence <= 1
    json.dumps(ex.to_json(), default=str)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=20))
def test_fuzz_scanner_bytes_never_raises(blocks):
    s = LogScanner()
    for b in blocks:
        s.feed(b)
    s.finish()


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=5000), st.integers(min_value=1, max_value=700))
def test_fuzz_spans_preserve_short_lines(data, block):
    data = data.replace(b"\r", b"")
    out = b"".join(buf[s:e] for buf, s, e in _spans(io.BytesIO(data), block))
    if all(len(line) <= MAX_LINE for line in data.split(b"\n")):
        assert out == data


def test_prefilter_engines_agree_on_lines():
    from oomdoctor.explain.prefilter import ENGINES, _Prefilter

    data = (OOM + "step 1 ok\nexit code 137\nExit Code:    137\nbatch 137 done\n" * 3 + "NVRM: Xid (PCI:0): 31\n"
            "[HAMI-core ERROR (pid:1)]: Device 0 OOM 1 / 2\nOOMKilled\n").encode() * 5

    def lines(pf):
        return {data.rfind(b"\n", 0, max(e - 1, 0)) + 1 for e in pf.ends(data)}

    from oomdoctor.explain.prefilter import engine_installed

    slow = _Prefilter("find")
    assert slow.engine == "find"
    for engine in ENGINES:
        if engine_installed(engine):
            assert lines(_Prefilter(engine)) == lines(slow), engine
    assert not any(data[ls:].startswith(b"batch 137") for ls in lines(slow))


BUNDLES = os.path.join(os.path.dirname(__file__), "fixtures", "bundles")


@pytest.mark.parametrize("bundle,expected,fact", [
    ("seed_a100_k8s", "context_or_driver", "sharing.vcuda"),
    ("other_processes", "other_process", "sharing.processes"),
    ("hami_slice", "gpu_sharing_limit", "sharing.hami"),
    ("docker_shm_64m", "shm_exhausted", "shm.size_bytes"),
    ("cgroup_oom_137", "host_oom", "cgroup.oom_kill"),     # the SIGKILLed job's own log has no error at all
    ("mig_slice", "gpu_sharing_limit", "sharing.mig"),      # the MIG instance's process is the job itself
    ("old_driver_new_torch", "context_or_driver", None),
])
def test_bundle_scenarios_read_the_bundles_logs(bundle, expected, fact, capsys):
    path = os.path.join(BUNDLES, bundle)
    if not os.path.isdir(path):
        pytest.skip("scenario bundles not present")
    assert main(["explain", "--bundle", path, "--format", "json"]) == 1
    d = json.loads(capsys.readouterr().out)
    assert d["hypotheses"][0]["category"] == expected
    if fact:
        assert fact in d["facts_used"]


def test_echoed_log_text_is_redacted(tmp_path, capsys):
    secret = "hf_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7"
    log = f"export HF_TOKEN={secret}\n{OOM.strip()} while loading https://user:{secret}@example.com/x\n"
    assert main(["explain", "--format", "json", _write(tmp_path, "s.log", log.encode())]) == 1
    assert secret not in capsys.readouterr().out


@pytest.mark.parametrize("block", [7, 64, 4096, 1 << 20])
def test_block_size_does_not_change_events(tmp_path, block):
    """Lines cut across reads are joined: events and line numbers do not depend on the block size."""
    from oomdoctor.explain.read import iter_blocks

    text = ("noise line\n" * 37 + OOM + "step 3 mem 1.5 GiB\n" * 11 + "NVRM: Xid (PCI:0000:01:00): 31, pid=1\n") * 3
    path = _write(tmp_path, "m.log", text.encode())
    s = LogScanner()
    for buf, a, b in iter_blocks(path, block):
        s.feed(buf, a, b)
    r = s.finish()
    assert [(e.kind, e.line, e.count) for e in r.events] == [("torch_oom", 38, 3), ("xid", 50, 3)]
    assert r.lines == text.count("\n")


@pytest.mark.parametrize("bad", ["0", "-1", "x", "65"])
def test_threads_out_of_range_is_exit_2(tmp_path, capsys, bad):
    with pytest.raises(SystemExit) as exc:
        main(["explain", "--threads", bad, _write(tmp_path, "a.log", OOM.encode())])
    assert exc.value.code == 2
    assert "threads" in capsys.readouterr().err


def test_threads_do_not_change_the_answer(tmp_path, capsys):
    """A log of several blocks: reader threads index ahead, the events and line numbers stay the same."""
    filler = b"".join(b"step %d loss 0.5 tokens/s 12000\n" % i for i in range(400_000))  # ~12 MB: 2 blocks
    path = _write(tmp_path, "big.log", filler + OOM.encode() + filler + b"Killed\n")
    outs = []
    for threads in ("1", "2", "3"):
        assert main(["explain", "--format", "json", "--threads", threads, path]) == 1
        d = json.loads(capsys.readouterr().out)
        outs.append(([(e["kind"], e["line"]) for e in d["events"]], [h["category"] for h in d["hypotheses"]]))
    assert outs[0] == outs[1] == outs[2]
    assert outs[0][0][0] == ("torch_oom", 400_001)


def test_large_logs_report_progress_without_changing_the_answer(tmp_path, capsys, monkeypatch):
    """Past PROGRESS_FROM bytes the CLI shows how far it is (cli.common.progress: stderr only, and
    nothing for --format json or pipes, tested in test_cli_progress); the report is the same."""
    import contextlib

    import oomdoctor.cli.explain as cli_explain

    filler = b"".join(b"step %d loss 0.5\n" % i for i in range(300_000))  # ~5.6 MB: 2 blocks in all
    path = _write(tmp_path, "big.log", filler + OOM.encode() + filler)
    assert main(["explain", "--format", "json", path]) == 1
    plain = capsys.readouterr().out
    seen: list[str] = []

    @contextlib.contextmanager
    def fake_progress(text, args):
        seen.append(text)
        yield seen.append

    monkeypatch.setattr(cli_explain, "PROGRESS_FROM", 1)
    monkeypatch.setattr(cli_explain, "progress", fake_progress)
    assert main(["explain", "--format", "json", "--threads", "2", path]) == 1
    assert capsys.readouterr().out == plain
    assert seen[0].startswith("explain: reading ") and "MiB" in seen[0]
    pcts = [int(s.rstrip("%")) for s in seen[1:]]
    assert len(pcts) >= 2 and pcts == sorted(pcts) and pcts[-1] == 99


def test_torch_dsa_boilerplate_is_not_a_second_event(capsys):
    """Every CUDA error from torch ends with 'Compile with `TORCH_USE_CUDA_DSA` to enable device-side
    assertions.': that is advice, not a device-side assert (real text, tests/fixtures/real-oom)."""
    from pathlib import Path

    fixture = Path(__file__).resolve().parent / "fixtures" / "real-oom" / "bad_ordinal.txt"
    assert main(["explain", "--format", "json", str(fixture)]) == 1
    events = json.loads(capsys.readouterr().out)["events"]
    assert [(e["kind"], e["line"]) for e in events] == [("cuda_program_error", 3)]


@pytest.mark.parametrize("fmt", ["text", "json", "html"])
def test_a_note_quoting_the_crash_is_redacted_and_escaped(tmp_path, capsys, fmt):
    # session 18: the note after a BFC warning quotes the crash's line, so it passes the redactor like event text
    log = tmp_path / "tf.log"
    log.write_text("2019-03-01 10:00:00.000000: W tensorflow/core/common_runtime/bfc_allocator.cc:211] Allocator "
                   "(GPU_0_bfc) ran out of memory trying to allocate 2.26GiB. The caller indicates that this is not a "
                   "failure, but may mean that there could be performance gains if more memory were available.\n"
                   "Epoch 1/10\nFatal Python error: <b>x</b> token hf_abcdefghijklmnopqrstuvwxyz123456 Aborted\n")
    main(["explain", "--format", fmt, str(log)])
    out = capsys.readouterr().out
    assert "hf_abcdefghijklmnopqrstuvwxyz123456" not in out and "Fatal Python error" in out
    if fmt == "json":
        assert "Fatal Python error" in json.loads(out)["notes"][0]
    if fmt == "html":
        assert "<b>x</b>" not in out and "&lt;b&gt;x&lt;/b&gt;" in out


def test_a_missing_dependency_is_one_line_not_a_traceback(monkeypatch, capsys):
    """A device whose wheel install had failed printed a traceback for `report` (session 26): no ruamel."""
    import importlib

    real = importlib.import_module

    def broken(name, *a, **k):
        if name == "oomdoctor.cli.report":
            raise ModuleNotFoundError("No module named 'ruamel'", name="ruamel")
        return real(name, *a, **k)

    monkeypatch.setattr(importlib, "import_module", broken)
    monkeypatch.delenv("OOMDOCTOR_DEBUG", raising=False)
    assert main(["report", "somewhere"]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "No module named 'ruamel'" in err and "install it" in err


def test_a_package_missing_while_a_command_runs_is_named_in_one_line(monkeypatch, capsys):
    """Review: a dependency imported when the command runs (rich) still said "internal error ... please report it"."""
    import oomdoctor.cli.explain as cmd

    def run(args):
        raise ModuleNotFoundError("No module named 'rich'", name="rich")

    monkeypatch.setattr(cmd, "run", run)
    monkeypatch.delenv("OOMDOCTOR_DEBUG", raising=False)
    assert main(["explain", "x.log"]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "No module named 'rich'" in err and "internal error" not in err


def test_version_loads_no_command(monkeypatch, capsys):
    import importlib

    monkeypatch.setattr(importlib, "import_module", lambda *a, **k: (_ for _ in ()).throw(ImportError("no")))
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.startswith("oomdoctor ")


@pytest.mark.parametrize(("name", "start"), [("r.html", "<!"), ("r.HTM", "<!"), ("r.json", "{"), ("r.txt", "Answer")])
def test_the_output_files_extension_sets_the_format(tmp_path, name, start):
    """The README's `oomdoctor report RUN_DIR -o report.html` wrote text into report.html (a walkthrough)."""
    out = tmp_path / name
    assert main(["explain", "-o", str(out), _write(tmp_path, "a.log", OOM.encode())]) == 1
    assert out.read_text().lstrip().startswith(start)


def test_an_explicit_format_wins_over_the_extension(tmp_path):
    out = tmp_path / "r.html"
    main(["explain", "--format", "json", "-o", str(out), _write(tmp_path, "a.log", OOM.encode())])
    assert out.read_text().lstrip().startswith("{")
