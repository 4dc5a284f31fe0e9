"""GIVEN secrets planted in many forms WHEN any command writes a report (text, JSON, HTML), a bundle or a
fleet summary THEN none of them is in it (docs/security.md lists exactly what is redacted).

The choke point is tested on its own too: a renderer that forgets redaction still emits nothing secret.
"""

from __future__ import annotations

import json
import os
import shutil
import tarfile
from pathlib import Path

import pytest

from oomdoctor.cli import main
from oomdoctor.redact import is_secret_name, redact_manifest, redact_rendered, redact_text

BUNDLES = Path(__file__).parent / "fixtures" / "bundles"
LAST_APPLIED = json.dumps({
    "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train"},
    "spec": {"containers": [{"name": "t", "env": [{"name": "DB_PASSWORD", "value": "annotpass12l"}],
                             "args": ["--api-key", "annotapikey17"]}]},
})
LAST_APPLIED_SECRET = json.dumps({"apiVersion": "v1", "kind": "Secret", "data": {"db": "YW5ub3RzZWNyZXQ18"}})

# (text containing a secret, the secret): the forms issue 20 found leaking, and the older ones
FORMS = [
    ("PGPASSWORD=pgsecret1a psql -h db", "pgsecret1a"),
    ("export GPG_KEY_PASSPHRASE='phrase2b'", "phrase2b"),
    ("MYSQL_PWD=mysqlpwd15o mysql", "mysqlpwd15o"),
    ("SMTP_PASS=smtppass19p", "smtppass19p"),
    ("notify https://hooks.slack.com/services/T0AAA/B0BBB/slacksecret3c done", "slacksecret3c"),
    ("post https://discord.com/api/webhooks/12345/discordsecret4d", "discordsecret4d"),
    ("post https://discordapp.com/api/webhooks/12345/discordsecret4e", "discordsecret4e"),
    ("https://acct.blob.core.windows.net/c/b?sv=2020-08-04&sr=b&sig=azuresig5e%2Bx%3D&se=2026", "azuresig5e"),
    ("curl -u alice:curlpass6f https://x", "curlpass6f"),
    ("curl --user 'bob:curlpass6g' https://x", "curlpass6g"),
    ("python train.py --password=argpass7g --lr 3", "argpass7g"),
    ("python train.py --token argtoken8h", "argtoken8h"),
    ("python train.py --db-pass=argpass7h", "argpass7h"),
    ("login hf_abcdefghijklmnopqrstuvwxyz123456 ok", "hf_abcdefghijklmnopqrstuvwxyz123456"),
    ("NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, token=kerntoken9i", "kerntoken9i"),
    ("-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBGpgpbody10j\n=abcd\n-----END PGP PRIVATE KEY BLOCK-----",
     "pgpbody10j"),
    ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktsshbody11k\n-----END OPENSSH PRIVATE KEY-----", "sshbody11k"),
    ("DATABASE_URL=postgres://user:urlpass13m@db:5432/x", "urlpass13m"),
    ("Authorization: Bearer bearertoken14n", "bearertoken14n"),
    ("aws AKIAABCDEFGHIJKLMNOP", "AKIAABCDEFGHIJKLMNOP"),
    ("ghp_abcdefghijklmnopqrstuvwxyz0123", "ghp_abcdefghijklmnopqrstuvwxyz0123"),
]
SECRETS = [s for _, s in FORMS] + ["annotpass12l", "annotapikey17", "YW5ub3RzZWNyZXQ18"]


@pytest.mark.parametrize("text,secret", FORMS)
def test_every_form_is_redacted_in_text(text, secret):
    out = redact_text(text)
    assert secret not in out and "***" in out


@pytest.mark.parametrize("name", ["PGPASSWORD", "KEY_PASSPHRASE", "GPG_PASSPHRASE", "REDIS_PASS", "MYSQL_PWD",
                                  "DB_PASSWD", "X_AMZ_SIGNATURE", "sig"])
def test_secret_names_with_any_prefix(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["PATH", "PWD", "OLDPWD", "PASSTHROUGH_MODE", "NCCL_P2P_DISABLE", "SIGTERM_GRACE",
                                  "TOKENIZERS_PARALLELISM", "PYTORCH_CUDA_ALLOC_CONF"])
def test_ordinary_names_are_kept(name):
    assert not is_secret_name(name)


def test_uid_gid_is_not_a_password():
    assert redact_text("docker run -u 1000:1000 img") == "docker run -u 1000:1000 img"


def test_last_applied_configuration_is_redacted_inside_its_json():
    doc = {"metadata": {"annotations": {"kubectl.kubernetes.io/last-applied-configuration": LAST_APPLIED + "\n"}},
           "kind": "Pod"}
    out = redact_manifest(doc)
    text = out["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
    assert "annotpass12l" not in text and "annotapikey17" not in text
    assert json.loads(text)["spec"]["containers"][0]["env"][0] == {"name": "DB_PASSWORD", "value": "***"}
    secret = redact_manifest({"metadata": {"annotations": {"a": LAST_APPLIED_SECRET}}})
    assert "YW5ub3RzZWNyZXQ18" not in json.dumps(secret)


def test_rendered_json_stays_valid_and_is_unchanged_without_secrets():
    clean = json.dumps({"a": "b", "n": [1, 2]}, indent=2) + "\n"
    assert redact_rendered(clean, "json") is clean
    dirty = json.dumps({"cmd": 'x --password=ab\\"cd', "k": "PGPASSWORD=pgsecret1a"}, indent=2) + "\n"
    out = redact_rendered(dirty, "json")
    assert "pgsecret1a" not in out and json.loads(out)["k"] == "PGPASSWORD=***"


def test_rendered_html_is_redacted_inside_escapes_and_attributes():
    html = ('<p title="PGPASSWORD=pgsecret1a">MYSQL_PWD=&quot;mysqlpwd15o&quot; &amp; '
            '<b>--password=argpass7g</b></p>')
    out = redact_rendered(html, "html")
    for s in ("pgsecret1a", "mysqlpwd15o", "argpass7g"):
        assert s not in out
    assert out.startswith('<p title="') and "<b>" in out and "&amp;" in out


# --- end to end over every command and format --------------------------------------------------------


def _planted_bundle(tmp_path: Path) -> Path:
    root = tmp_path / "bundle"
    shutil.copytree(BUNDLES / "docker_shm_64m", root)
    text = "\n".join(t for t, _ in FORMS) + "\n"
    (root / "logs").mkdir(exist_ok=True)
    (root / "logs" / "train.log").write_text(
        "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n" + text
        + "torch.OutOfMemoryError: CUDA out of memory. PGPASSWORD=pgsecret1a\n")
    (root / "commands" / "dmesg.txt").write_text(
        "[ 1.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, token=kerntoken9i "
        "hf_abcdefghijklmnopqrstuvwxyz123456\n[ 2.0] Out of memory: Killed process 99 (python --password=argpass7g)\n")
    xml = (root / "commands" / "nvidia-smi-q.xml").read_text()
    (root / "commands" / "nvidia-smi-q.xml").write_text(xml.replace(
        "<process_name>python</process_name>",
        "<process_name>python train.py --password=argpass7g --token argtoken8h PGPASSWORD=pgsecret1a</process_name>"))
    env = b"".join(f"{k}={v}".encode() + b"\0" for k, v in [
        ("PGPASSWORD", "pgsecret1a"), ("GPG_KEY_PASSPHRASE", "phrase2b"), ("MYSQL_PWD", "mysqlpwd15o"),
        ("SLACK_URL", "https://hooks.slack.com/services/T0AAA/B0BBB/slacksecret3c"),
        ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")])
    (root / "proc" / "self").mkdir(parents=True, exist_ok=True)
    (root / "proc" / "self" / "environ").write_bytes(env)
    (root / "k8s").mkdir(exist_ok=True)
    (root / "k8s" / "pod.yaml").write_text(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: train\n  annotations:\n"
        f"    kubectl.kubernetes.io/last-applied-configuration: {json.dumps(LAST_APPLIED)}\n"
        "spec:\n  containers:\n  - name: t\n    image: img\n    args: [--api-key, annotapikey17]\n")
    return root


def _no_secrets(text: str, where: str) -> None:
    leaked = [s for s in SECRETS if s in text]
    assert not leaked, f"{where}: leaked {leaked}"


@pytest.mark.parametrize("fmt", ["text", "json", "html"])
def test_no_planted_secret_in_any_report(tmp_path, capsys, fmt):
    root = _planted_bundle(tmp_path)
    runs = {
        "doctor": ["doctor", "--bundle", str(root)],
        "explain --bundle": ["explain", "--bundle", str(root)],
        "explain log": ["explain", str(root / "logs" / "train.log")],
        "diff": ["diff", str(root), str(BUNDLES / "healthy_node"), "--all"],
    }
    for name, argv in runs.items():
        rc = main([*argv, "--format", fmt])
        out, err = capsys.readouterr()
        assert rc in (0, 1), (name, err)
        _no_secrets(out + err, f"{name} --format {fmt}")
    main(["explain", str(root / "logs" / "train.log"), "--format", fmt])
    assert "***" in capsys.readouterr().out  # the echoed lines are there, redacted


def test_no_planted_secret_in_fleet(tmp_path, capsys):
    root = _planted_bundle(tmp_path)
    reports = tmp_path / "reports"
    reports.mkdir()
    main(["doctor", "--bundle", str(root), "--format", "json", "-o", str(reports / "a.json")])
    doc = json.loads((reports / "a.json").read_text())
    doc.setdefault("host", {})["name"] = "node --password=argpass7g"
    doc["planted"] = [t for t, _ in FORMS]
    (reports / "b.json").write_text(json.dumps(doc))
    capsys.readouterr()
    for fmt in ("text", "json", "html"):
        main(["fleet", str(reports), "--format", fmt])
        out, err = capsys.readouterr()
        _no_secrets(out + err, f"fleet --format {fmt}")


def test_renderer_that_forgets_redaction_is_caught_by_the_choke_point(tmp_path, capsys, monkeypatch):
    leaky = "\n".join(t for t, _ in FORMS)
    import oomdoctor.render.doctor_html as h
    import oomdoctor.render.doctor_json as j
    import oomdoctor.render.doctor_text as t

    monkeypatch.setattr(t, "render_text", lambda report, **kw: "report\n" + leaky)
    monkeypatch.setattr(j, "render_json", lambda report: json.dumps({"lines": leaky.splitlines()}, indent=2))
    monkeypatch.setattr(h, "render_html", lambda report: "<html><pre>" + leaky.replace("&", "&amp;") + "</pre></html>")
    for fmt in ("text", "json", "html"):
        main(["doctor", "--bundle", str(BUNDLES / "healthy_node"), "--format", fmt])
        out = capsys.readouterr().out
        _no_secrets(out, f"leaky renderer {fmt}")
        if fmt == "json":
            json.loads(out)
    out_file = tmp_path / "r.txt"
    main(["doctor", "--bundle", str(BUNDLES / "healthy_node"), "-o", str(out_file)])
    _no_secrets(out_file.read_text(), "-o file")


def test_no_planted_secret_in_a_written_bundle(tmp_path, monkeypatch):
    from oomdoctor.collectors import bundle_write
    from oomdoctor.collectors.context import CollectContext, NoCommands
    from oomdoctor.collectors.nvml import BundleSmiBackend

    root = _planted_bundle(tmp_path)
    ctx = CollectContext(root=root, env={"PGPASSWORD": "pgsecret1a", "MYSQL_PWD": "mysqlpwd15o",
                                         "HOOK": "https://hooks.slack.com/services/T0AAA/B0BBB/slacksecret3c"},
                         gpu=BundleSmiBackend((root / "commands" / "nvidia-smi-q.xml").read_text(), "", None),
                         runner=NoCommands(), bundle=True)
    log = tmp_path / "job.log"
    log.write_text("\n".join(t for t, _ in FORMS) + "\n")
    w = bundle_write.build_bundle(logs=[str(log)], manifests=[str(root / "k8s" / "pod.yaml")], ctx=ctx)
    w.add("commands/extra.txt", "curl -u alice:curlpass6f x\n")  # whatever a producer forgets
    w.add("commands/extra.json", json.dumps({"cmd": "--password=argpass7g"}))
    out = tmp_path / "out.tar.gz"
    w.write(out)
    with tarfile.open(out) as tar:
        for member in tar.getmembers():
            if member.isfile():
                data = tar.extractfile(member).read().decode("utf-8", "replace")
                _no_secrets(data, member.name)
    json.loads(w.files["commands/extra.json"])


def test_report_of_a_recording_with_raw_secrets(tmp_path, capsys):
    from oomdoctor.facts import recording

    run = tmp_path / "run"
    run.mkdir()
    (run / recording.RUN_META).write_text(json.dumps({
        "schema_version": recording.SCHEMA_VERSION, "format": recording.FORMAT, "argv": [
            "python", "train.py", "--password=argpass7g", "PGPASSWORD=pgsecret1a"], "start": 1.0, "returncode": 0}))
    for fmt in ("text", "json", "html"):
        main(["report", str(run), "--format", fmt])
        out, err = capsys.readouterr()
        _no_secrets(out + err, f"report --format {fmt}")


def test_environment_canary_never_in_a_live_report(capsys, monkeypatch):
    monkeypatch.setenv("PGPASSWORD", "pgsecret1a")
    monkeypatch.setenv("SERVICE_PASSPHRASE", "phrase2b")
    os.environ["CI_HOOK"] = "https://hooks.slack.com/services/T0AAA/B0BBB/slacksecret3c"
    try:
        main(["doctor", "--format", "json"])
    finally:
        del os.environ["CI_HOOK"]
    out, err = capsys.readouterr()
    _no_secrets(out + err, "live doctor")


def test_error_lines_are_one_bounded_line():
    from oomdoctor.cli import _one_line

    line = _one_line("bundle x: entry\nname \x1b[31m" + "n" * 100_000)
    assert "\n" not in line and "\x1b" not in line and len(line) <= 1000


def test_every_text_of_a_written_bundle_is_redacted_once(tmp_path, monkeypatch):
    """The writer is the one place a bundle's text is redacted: a log, the kernel log and nvidia-smi's text each pass
    the redactor once (a log redacted by its producer and again by the writer cost two passes), cut logs too."""
    from oomdoctor import redact
    from oomdoctor.collectors import bundle_write
    from oomdoctor.collectors.context import CollectContext, CommandResult, NoCommands
    from oomdoctor.collectors.nvml import BundleSmiBackend

    class SmiText(NoCommands):
        def run(self, argv, timeout=10.0, env=None):
            if list(argv) == ["nvidia-smi"]:
                return CommandResult(tuple(argv), 0, "| 0 python --password=smipass4k 1000MiB |\n", "")
            return super().run(argv, timeout, env)

    seen: list[str] = []
    real = redact.redact_text

    def spy(text: str) -> str:
        seen.append(text)
        return real(text)

    monkeypatch.setattr(redact, "redact_text", spy)
    monkeypatch.setattr(bundle_write, "redact_text", spy)
    root = _planted_bundle(tmp_path)
    ctx = CollectContext(root=root, env={}, gpu=BundleSmiBackend((root / "commands" / "nvidia-smi-q.xml").read_text(),
                                                                 "", None), runner=SmiText(), bundle=True)
    whole, cut = tmp_path / "whole.log", tmp_path / "cut.log"
    whole.write_text("".join(f"whole line {i} password: wholepass{i}\n" for i in range(50)))
    cut.write_text("".join(f"cut line {i} token: cuttoken{i}x\n" for i in range(4000)))
    monkeypatch.setattr(bundle_write, "MAX_LOG_BYTES", 32 << 10)
    monkeypatch.setattr(bundle_write, "LOG_HEAD_BYTES", 8 << 10)
    w = bundle_write.build_bundle(logs=[str(whole), str(cut)], ctx=ctx)
    assert "logs/cut.log" in w.log_cuts
    kept = w.files["logs/cut.log"].decode()
    for i in (0, 3999):
        assert sum(t.count(f"cut line {i} token: ") for t in seen) == 1, i  # head and tail, each once
        assert f"cut line {i} token: ***" in kept
    assert sum(t.count("whole line 7 password: ") for t in seen) == 1
    assert sum(t.count("| 0 python --password=") for t in seen) == 1
    assert sum(t.count("Killed process 99") for t in seen) == 1  # the kernel log
    for rel, data in w.files.items():
        _no_secrets(data.decode("utf-8", "replace"), rel)
        assert "smipass4k" not in data.decode("utf-8", "replace") and "wholepass" not in data.decode()
