"""QA pass: planted secrets never reach a bundle or a report (DEVELOPERS.md: secrets never leave the machine)."""

from __future__ import annotations

import json

import pytest

from oomdoctor.cli import main
from oomdoctor.collectors.bundle_write import BundleWriter, add_log, add_manifest
from oomdoctor.redact import redact_manifest, redact_text

PEM_BODY = "MIIEowIBAAKCAQEAPEMBODYSECRETLINE1xxxxxxxxxxxxxxxxxxxx"
PLAIN_KEY = "PlainApiKeyValue123"


@pytest.mark.parametrize("line,secret", [
    (f"python train.py --api-key {PLAIN_KEY} --lr 3", PLAIN_KEY),
    ("torchrun --nproc 8 train.py --hf-token abcdefgh12345", "abcdefgh12345"),
    ('mysql --password "two words" -h db', "two words"),
    ("deploy --secret 's3cr3t value'", "s3cr3t value"),
])
def test_secret_flag_values_on_command_lines_are_hidden(line, secret):
    out = redact_text(line)
    assert secret not in out and "***" in out


def test_ordinary_flags_keep_their_values():
    line = "docker run -p 8080:80 --shm-size 8g --gpus all img python train.py --batch-size 64"
    assert redact_text(line) == line


def test_manifest_args_hide_the_word_after_a_secret_option():
    doc = {"args": ["--api-key", PLAIN_KEY, "--lr", "3"], "command": ["python", "--password", "x"]}
    red = redact_manifest(doc)
    assert red["args"] == ["--api-key", "***", "--lr", "3"]
    assert red["command"] == ["python", "--password", "***"]


def test_bundle_log_hides_the_whole_pem_key_not_just_its_first_line(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("start\n-----BEGIN RSA PRIVATE KEY-----\n" + PEM_BODY + "\nMORESECRETBODY\n"
                   "-----END RSA PRIVATE KEY-----\nCUDA out of memory. Tried to allocate 2.00 GiB\n")
    w = BundleWriter()
    add_log(w, str(log))
    text = w.files["logs/train.log"].decode()
    assert PEM_BODY not in text and "MORESECRETBODY" not in text
    assert "CUDA out of memory" in text and text.startswith("start\n")


def test_bundle_manifest_hides_secret_option_values(tmp_path):
    pod = tmp_path / "pod.yaml"
    pod.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: t}\nspec:\n  containers:\n  - name: t\n"
                   f"    image: x\n    args: [\"--api-key\", \"{PLAIN_KEY}\"]\n")
    w = BundleWriter()
    add_manifest(w, str(pod))
    assert PLAIN_KEY not in w.files["k8s/pod.yaml"].decode()


@pytest.mark.parametrize("fmt", ["text", "json", "html"])
def test_report_hides_secrets_in_the_recorded_command_line(tmp_path, capsys, fmt):
    from record.synth import write_run  # tests/ is on sys.path (rootdir insertion)

    run = write_run(tmp_path / "run", steps=5, meta={"argv": [
        "python", "train.py", "--hf-token", "hf_ZZZZyyyyXXXXwwwwVVVVuuuu12345", "--api-key", PLAIN_KEY,
        "PASSWORD=Hunter2Hunter2xx", "--db", "postgres://user:s3cr3tpassXYZ@dbhost/db"]})
    assert main(["report", str(run), "--format", fmt]) in (0, 1)
    out = capsys.readouterr().out
    for secret in ("hf_ZZZZ", PLAIN_KEY, "Hunter2Hunter2xx", "s3cr3tpassXYZ"):
        assert secret not in out, secret
    assert "train.py" in out
    if fmt == "json":
        assert json.loads(out)["meta"]["argv"][:2] == ["python", "train.py"]


def test_a_json_log_is_redacted_as_text_and_keeps_its_lines(tmp_path):
    # a bundled log is text whatever its name: `events.json` keeps its lines (one JSON object a line), not re-dumped
    log = tmp_path / "events.json"
    log.write_text('{"step": 1, "password": "hunter2pw", "loss": 0.5}\n{"step": 2, "loss": 0.4}\n')
    w = BundleWriter()
    add_log(w, str(log))
    assert w.files["logs/events.json"].decode() == ('{"step": 1, "password": "***", "loss": 0.5}\n'
                                                   '{"step": 2, "loss": 0.4}\n')
