"""GIVEN secrets planted in env, URLs, manifests and logs WHEN redacted or bundled THEN none survives."""

from __future__ import annotations

import gzip
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oomdoctor import redact as redact_module
from oomdoctor.redact import MASK, is_secret_name, redact_env, redact_manifest, redact_text

AWS = "AKIAIOSFODNN7EXAMPLE"
GH = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"
HF = "hf_aBcDeFgHiJkLmNoPqRsTuVwXyZ012345"
SLACK = "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ."
       "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c")
PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7x3yz\nQWERTYuiop\n-----END RSA PRIVATE KEY-----"
PASSWORD = "s3cr3t-P4ssw0rd!"
PLANTED = (AWS, GH, HF, SLACK, JWT, "MIIEpAIBAAKCAQEA7x3yz", PASSWORD, "hunter2pw", "bearer-token-value-123")


def test_env_redacts_by_name_and_by_value():
    env = {"AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "HF_TOKEN": HF,
           "DB_PASSWORD": PASSWORD, "MY_VAR": AWS, "PATH": "/usr/bin", "SOME_URL": "https://bob:hunter2pw@x.io/a",
           "TOKENIZERS_PARALLELISM": "false", "CUDA_VISIBLE_DEVICES": "0", "API_KEY": "abc", "PWD": "/work",
           "GITHUB_PAT": GH, "SESSION_COOKIE": "c", "SSH_PRIVATE": PEM}
    red = redact_env(env)
    assert red["AWS_SECRET_ACCESS_KEY"] == MASK and red["HF_TOKEN"] == MASK and red["DB_PASSWORD"] == MASK
    assert red["MY_VAR"] == MASK  # value looks like an AWS key id
    assert red["SOME_URL"] == f"https://bob:{MASK}@x.io/a"
    assert red["PATH"] == "/usr/bin" and red["TOKENIZERS_PARALLELISM"] == "false" and red["PWD"] == "/work"
    assert red["CUDA_VISIBLE_DEVICES"] == "0"
    for value in red.values():
        for secret in PLANTED:
            assert secret not in value


def test_text_redaction_of_log_lines():
    text = "\n".join([
        f"export HF_TOKEN={HF}", "Authorization: Bearer bearer-token-value-123", f"key id {AWS} used",
        f"cloning https://user:{PASSWORD}@github.com/org/repo.git", f"slack {SLACK}", f"jwt={JWT}", PEM,
        f'{{"password": "{PASSWORD}"}}', f"--db-password={PASSWORD}", "CUDA out of memory. Tried to allocate 2.00 GiB",
    ])
    out = redact_text(text)
    for secret in PLANTED:
        assert secret not in out, secret
    assert "CUDA out of memory. Tried to allocate 2.00 GiB" in out
    assert "https://user:***@github.com" in out


def test_manifest_secret_kind_and_env_values():
    docs = [{"kind": "Secret", "metadata": {"name": "s"}, "data": {"token": "aGVsbG8="}, "stringData": {"pw": PASSWORD}},
            {"kind": "Pod", "spec": {"containers": [{"name": "c", "env": [
                {"name": "WANDB_API_KEY", "value": "0123456789abcdef"}, {"name": "MODE", "value": "train"},
                {"name": "URL", "value": f"redis://:{PASSWORD}@redis:6379"}]}]}}]
    red = redact_manifest(docs)
    assert red[0]["data"] == {"token": MASK} and red[0]["stringData"] == {"pw": MASK}
    env = red[1]["spec"]["containers"][0]["env"]
    assert env[0]["value"] == MASK and env[1]["value"] == "train"
    assert PASSWORD not in str(red)


def test_secret_names():
    for name in ("HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "APIKEY", "DB_PASSWORD", "GITHUB_PAT", "MY_CREDENTIALS",
                 "AUTH", "PRIVATE_KEY", "SESSION_ID"):
        assert is_secret_name(name), name
    for name in ("PATH", "HOME", "CUDA_VISIBLE_DEVICES", "TOKENIZERS_PARALLELISM", "KEYBOARD", "PYTORCH_CUDA_ALLOC_CONF",
                 "NVIDIA_DRIVER_CAPABILITIES", "PWD", "PASSAGE"):
        assert not is_secret_name(name), name


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=500))
def test_redact_text_never_raises(text):
    redact_text(text)


def test_bundle_tarball_bytes_hold_no_planted_secret(tmp_path, monkeypatch):
    """End to end: secrets in the environment, a log and a manifest never reach the tarball."""
    from oomdoctor.cli import main

    monkeypatch.setenv("HF_TOKEN", HF)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", AWS)
    monkeypatch.setenv("DB_PASSWORD", PASSWORD)
    monkeypatch.setenv("INNOCENT", GH)
    monkeypatch.setenv("DATASET_URL", "s3://bob:hunter2pw@bucket/x")
    log = tmp_path / "train.log"
    log.write_text(f"starting with token {HF}\nAuthorization: Bearer bearer-token-value-123\n"
                   "RuntimeError: CUDA error: out of memory\n")
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(f"""apiVersion: v1
kind: Secret
metadata: {{name: creds}}
stringData: {{password: "{PASSWORD}"}}
---
apiVersion: v1
kind: Pod
metadata: {{name: p}}
spec:
  containers:
  - name: c
    env:
    - {{name: SLACK_WEBHOOK_TOKEN, value: "{SLACK}"}}
    - {{name: JWT, value: "{JWT}"}}
""")
    out = tmp_path / "b.tar.gz"
    monkeypatch.setattr("oomdoctor.collectors.torch_child.TORCH_TIMEOUT_S", 60.0)
    assert main(["bundle", "-o", str(out), "--log", str(log), "--manifest", str(manifest)]) == 0
    raw = gzip.decompress(out.read_bytes())
    for secret in PLANTED:
        assert secret.encode() not in raw, secret
    assert b"RuntimeError: CUDA error: out of memory" in raw
    assert b"HF_TOKEN=***" in raw
    assert os.environ["HF_TOKEN"] == HF  # the job's own environment is untouched


def test_every_token_pattern_has_anchors_that_every_match_contains():
    """The substring gate in redact_text must never skip a pattern that could match."""
    import re as _re

    from oomdoctor import redact as r

    assert len(r._TOKEN_ANCHORS) == len(r._TOKEN_PATTERNS)
    samples = [
        "-----BEGIN RSA PRIVATE KEY-----\nabc\n-----END RSA PRIVATE KEY-----",
        "AKIAABCDEFGHIJKLMNOP", "ASIAABCDEFGHIJKLMNOP", "ghp_" + "a" * 30, "ghs_" + "b" * 30,
        "github_pat_" + "c" * 30, "hf_" + "d" * 30, "xoxb-1234567890-abc", "glpat-" + "e" * 25,
        "sk-proj-" + "f" * 30, "AIza" + "g" * 35, "npm_" + "h" * 36, "eyJabcdefghij.eyJabcdefghij.abcdefghij",
        *(prefix + "ZXhhbXBsZQ==" for prefix in ("eyJhdXRocyI6", "ewogICJhdXRocyI6", "ewogICAgImF1dGhzIj",
                                                "ewoJImF1dGhzIj", "eyAiYXV0aHMiO")),
    ]
    for sample in samples:
        hits = [i for i, p in enumerate(r._TOKEN_PATTERNS) if p.search(sample)]
        assert hits, sample
        for i in hits:
            assert any(a in sample for a in r._TOKEN_ANCHORS[i]), (sample, r._TOKEN_PATTERNS[i].pattern)
        assert "***" in r.redact_text(f"x {sample} y") and sample not in r.redact_text(f"x {sample} y")
    # each alternation branch of the AWS/GitHub/Slack patterns is an anchor
    assert set(_re.findall(r"[A-Z]{4}", r._TOKEN_PATTERNS[1].pattern.split("[")[0])) == set(r._TOKEN_ANCHORS[1])


@pytest.mark.parametrize("where", ["monkey.log:3", "/data/pretrain_tokens.log:1204", "auth.log:7", "run.txt:12",
                                   "run/secret_sauce.out:88", "slurm-42.err:9"])
def test_a_log_file_and_line_number_stay_readable(where):
    # explain and doctor print where an event is as FILE:LINE; a file name with a secret-looking word is no key
    assert redact_text(f"Answer: host_oom for the event at {where}") == f"Answer: host_oom for the event at {where}"


@pytest.mark.parametrize("text, hidden", [("password:123456", "123456"), ("api.key:123", "123"),
                                          ("token:12345", "12345"), ("db.password:42", "42"),
                                          ("private.key:9", ":9"),
                                          # a secret file's content as grep prints it (review, session 25)
                                          ("secrets/db_password.txt:482913", "482913"),
                                          ("vault_token.json:123456789", "123456789"), ("key.txt:1234", "1234")])
def test_numbers_after_secret_names_that_are_not_files_are_still_hidden(text, hidden):
    assert hidden not in redact_text(text)


# --- the assignment scan reads only the names that hold a hint word (speed on colon-rich logs) ----------------


@settings(max_examples=300, deadline=None)
@given(st.from_regex(redact_module._SECRET_NAME))
def test_every_name_the_secret_pattern_finds_holds_a_hint_word(name):
    assert redact_module._NAME_HINT.search(name.encode("ascii", "replace").lower()), name


@pytest.mark.parametrize("name", ["HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "APIKEY", "PGPASSWORD", "MYSQL_PWD", "DB_PW",
                                  "MY_CREDENTIALS", "CREDS", "AUTH", "Authorization", "PRIVATE", "SESSION_ID",
                                  "Cookie", "GITHUB_PAT", "SIG", "signature", "DSN", "USER_PIN", "TOTP", "MFA_CODE",
                                  "2FA", ".dockerconfigjson", ".dockercfg", "value", "Pwd", "passphrase"])
def test_names_the_scan_must_read_hold_a_hint_word(name):
    assert redact_module._NAME_HINT.search(name.encode("ascii", "replace").lower()), name


_PIECES = st.sampled_from([
    "password", "HF_TOKEN", "key", "value", "name", "PWD", "Pwd", "a", "b.c", "2024-01-01", "12:00:00", "INFO", "x-y",
    "db_password.txt", "monkey.log", "PASS", "tokens", "Authorization", "\u212aey", "\u0130", "é", "secretKeyRef",
    ":", ": ", "::", "=", " = ", ":=", "=>", '"', "'", "\\\"", "[", "]", "{", "}", ",", ";", " ", "\t", "\n", "\r\n",
    "- ", "#", "Zq9planted", "3", "1234", "true", "Bearer x1", "--password", "(", ")", "|", "\u00a0",
    "- name: DB_PASSWORD\n  value: ", '{"name": "HF_TOKEN", "value": ', "Pwd=", "PWD=/x", "API_KEY=", "token: ",
])


@settings(max_examples=400, deadline=None)
@given(st.lists(_PIECES, max_size=40).map("".join))
def test_the_hinted_scan_masks_what_a_scan_of_every_name_masks(text):
    """The scan starts only at runs of name characters that hold a hint word; starting at every run (what the
    scan did before) must give the same text, with non-ASCII letters (the Kelvin sign lowers to `k`) too."""
    import re as _re

    r = redact_module
    every_run = _re.compile(r"(?<![A-Za-z0-9_.\-])[A-Za-z0-9_.\-]+")

    def every_name(text, lowered, low, pos):
        m = every_run.search(text, pos)
        return None if m is None else (m.start(), m.end())

    hinted = r._redact_assignments(text)
    original = r._next_hinted_name
    try:
        r._next_hinted_name = every_name
        everything = r._redact_assignments(text)
    finally:
        r._next_hinted_name = original
    assert hinted == everything
