"""Redacted YAML and JSON stay valid, with the same keys (walkthrough, session 27: a `kind: Secret` in a `--manifest`
file became `data:\\n  ***`, an undefined alias, and the pod's OOMKilled status was lost with the whole file)."""

from __future__ import annotations

import io
import json
import re
import tarfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from oomdoctor.cli import main
from oomdoctor.collectors.bundle_write import BundleWriter, add_manifest
from oomdoctor.collectors.machine import collect_bundle
from oomdoctor.redact import MASK, redact_rendered, redact_text

POD_AND_SECRET = """apiVersion: v1
kind: Pod
metadata: {name: trainer-0}
spec:
  containers:
    - name: trainer
      image: pytorch/pytorch
      resources:
        limits: {nvidia.com/gpu: 1, memory: 16Gi}
status:
  containerStatuses:
    - name: trainer
      lastState:
        terminated: {reason: OOMKilled, exitCode: 137}
---
apiVersion: v1
kind: Secret
metadata: {name: hf}
type: Opaque
data:
  token: aGZfYWJjZA==
"""

SECRET_VOLUME_POD = """apiVersion: v1
kind: Pod
metadata: {name: trainer-0}
spec:
  containers:
  - name: trainer
    image: pytorch/pytorch
  volumes:
  - name: creds
    secret:
      secretName: hf-token
      items:
      - key: token
        path: token
status:
  containerStatuses:
  - name: trainer
    lastState:
      terminated: {reason: OOMKilled, exitCode: 137}
"""


def _load_all(text: str) -> list:
    return list(YAML(typ="safe", pure=True).load_all(text))


def test_a_bundled_pod_and_secret_is_valid_yaml_and_keeps_the_oomkilled_pod(tmp_path):
    src = tmp_path / "pod-and-secret.yaml"
    src.write_text(POD_AND_SECRET)
    out = tmp_path / "b.tar.gz"
    assert main(["bundle", "-o", str(out), "--manifest", str(src)]) == 0
    with tarfile.open(out) as tar:
        text = tar.extractfile("oomdoctor-bundle/k8s/pod-and-secret.yaml").read().decode()
    assert "aGZfYWJjZA==" not in text
    pod, secret = _load_all(text)
    assert secret["data"] == {"token": MASK} and pod["metadata"]["name"] == "trainer-0"
    terminations = collect_bundle(out).value("k8s.terminations")
    assert terminations and terminations[0]["reason"] == "OOMKilled" and terminations[0]["exit_code"] == 137


def test_a_pod_with_a_secret_volume_stays_valid_yaml_in_a_bundle(tmp_path):
    src = tmp_path / "pod.yaml"
    src.write_text(SECRET_VOLUME_POD)
    w = BundleWriter()
    add_manifest(w, str(src))
    (doc,) = _load_all(w.files["k8s/pod.yaml"].decode())
    assert doc["status"]["containerStatuses"][0]["lastState"]["terminated"]["reason"] == "OOMKilled"
    assert set(doc["spec"]["volumes"][0]["secret"]) == {"secretName", "items"}


def test_flow_mappings_and_yaml_lines_get_a_quoted_mask():
    text = "terminated: {reason: OOMKilled, token: Zq9planted, exitCode: 137}\npassword: Zq9planted\n- pin: 1234\n"
    out = redact_text(text)
    assert "Zq9planted" not in out and "1234" not in out
    assert out == ("terminated: {reason: OOMKilled, token: '***', exitCode: 137}\npassword: '***'\n"
                   "- pin: '***'\n")
    assert redact_text("token: |\n  Zq9planted\nmode: train\n") == "token: |\n  ***\nmode: train\n"
    assert redact_text("2024-01-01 INFO password: Zq9planted ok") == "2024-01-01 INFO password: *** ok"  # a log line


def test_a_json_secret_and_a_json_number_stay_valid_json():
    doc = {"kind": "Secret", "data": {"token": "aGZfYWJjZA=="}, "spec": {"pin": 1234, "mode": "train"}}
    for text in (json.dumps(doc, indent=2), json.dumps(doc), json.dumps(doc, separators=(",", ":"))):
        out = redact_text(text)
        parsed = json.loads(out)
        assert parsed["data"] == {"token": MASK} and parsed["spec"] == {"pin": MASK, "mode": "train"}
    assert json.loads(redact_rendered(json.dumps({"cmd": "password: Zq9planted"}), "json")) == {"cmd": "password: '***'"}


def test_a_message_naming_a_secret_named_file_stays_readable():
    for text in ("pod-and-secret.yaml: invalid YAML: found undefined alias",
                 "unavailable (my-secret.yaml: invalid YAML: found undefined alias)",
                 "db_password.txt: Permission denied"):
        assert redact_text(text) == text
    # the other side: grep's line of a secret file, and a Secret's data entry named as a file, stay hidden
    assert redact_text("db_password.txt:hunter2") == "db_password.txt:***"
    assert "eyJabc123" not in redact_text("credentials.json: eyJabc123")
    assert "Zq9planted0" not in redact_text("password.txt: Zq9planted0 0")  # a token first: the file's content
    assert "hunter2" not in redact_text("secrets.yaml: password: hunter2 (in the file)")


def test_a_doctor_report_names_a_bad_secret_named_manifest_readably(tmp_path, capsys):
    root = tmp_path / "oomdoctor-bundle"
    (root / "k8s").mkdir(parents=True)
    (root / "meta.json").write_text('{"format": "oomdoctor-bundle", "version": 1, "created": "x"}')
    (root / "k8s" / "pod-and-secret.yaml").write_text("kind: Pod\nspec: [unclosed\n")
    main(["doctor", "--bundle", str(tmp_path)])
    out = capsys.readouterr().out
    assert "pod-and-secret.yaml: invalid YAML" in out and "pod-and-secret.yaml: ***" not in out


# --- property: YAML documents with planted secrets --------------------------------------------------

SECRET_KEYS = ["password", "token", "api_key", "hf_token", "secret", "credentials", "auth_token", "db_password"]
PLAIN_KEYS = ["name", "image", "mode", "limits", "memory", "path", "items", "labels", "args", "replicas"]
_planted = st.from_regex(r"Zq9[A-Za-z0-9]{6,12}", fullmatch=True)
_plain = st.sampled_from(["train", "16Gi", "pytorch/pytorch", "a b c", "x", "0.1"])


def _tree(depth: int):
    leaf = st.one_of(_planted, _plain, st.integers(0, 99999), st.booleans())
    if depth == 0:
        return leaf
    child = _tree(depth - 1)
    keys = st.sampled_from(SECRET_KEYS + PLAIN_KEYS)
    return st.one_of(leaf, st.lists(child, min_size=1, max_size=3),
                     st.dictionaries(keys, child, min_size=1, max_size=4))


def _shape(doc):
    if isinstance(doc, dict):
        return {k: _shape(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_shape(v) for v in doc]
    return None


def _secret_values(doc):
    """The planted values that must not survive: every `Zq9…` string (planted under any key)."""
    if isinstance(doc, dict):
        for v in doc.values():
            yield from _secret_values(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from _secret_values(v)
    elif isinstance(doc, str) and doc.startswith("Zq9"):
        yield doc


def _dump(doc, flow: bool, width: int) -> str:
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = None if flow else False
    yaml.width = width
    buf = io.StringIO()
    yaml.dump(doc, buf)
    return buf.getvalue()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=st.dictionaries(st.sampled_from(SECRET_KEYS + PLAIN_KEYS), _tree(3), min_size=1, max_size=5),
       flow=st.booleans(), secret_kind=st.booleans())
def test_redacted_yaml_parses_with_the_same_keys(doc, flow, secret_kind):
    if secret_kind:  # a Secret: its data values are hidden whatever their keys
        doc = {"apiVersion": "v1", "kind": "Secret", "data": {k: "aGVsbG8=" for k in PLAIN_KEYS[:3]}, **doc}
    text = _dump(doc, flow, 4096)
    out = redact_text(text)
    parsed = YAML(typ="safe", pure=True).load(out)
    assert _shape(parsed) == _shape(doc)
    assert redact_text(out) == out  # a bundle redacts twice
    if secret_kind:
        assert set(parsed["data"].values()) == {MASK}
    # a value under a secret key is hidden (a planted value under harmless keys only, as well, may show)
    shown = set(_outside(doc))
    for key in SECRET_KEYS:
        for value in set(_under(doc, key)) - shown:
            assert not re.search(rf"(?<![A-Za-z0-9]){value}(?![A-Za-z0-9])", out), value


def _public_shape(doc):
    """The shape of a document with what is under a secret key left out."""
    if isinstance(doc, dict):
        return {k: None if k in SECRET_KEYS else _public_shape(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_public_shape(v) for v in doc]
    return None


def _outside(doc):
    """The planted strings that are under no secret key."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k not in SECRET_KEYS:
                yield from _outside(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from _outside(v)
    else:
        yield from _secret_values(doc)


def _under(doc, key):
    """Every planted string anywhere under `key`."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k == key:
                yield from _secret_values(v)
            yield from _under(v, key)
    elif isinstance(doc, list):
        for v in doc:
            yield from _under(v, key)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=st.dictionaries(st.sampled_from(SECRET_KEYS + PLAIN_KEYS), _tree(3), min_size=1, max_size=5),
       width=st.sampled_from([20, 40, 80]))
def test_redacted_block_yaml_wrapped_at_any_width_still_parses(doc, width):
    """Block style, as `bundle --manifest` writes it (ruamel's default width 80 wraps long plain scalars). A flow
    mapping wrapped over lines is not covered: a secret in it is hidden, the YAML may not stay valid."""
    out = redact_text(_dump(doc, False, width))
    YAML(typ="safe", pure=True).load(out)
    assert redact_text(out) == out


# --- flow mappings wrapped over lines -----------------------------------------------------------------------


@pytest.mark.parametrize("text", [
    "env: {PASSWORD: hunterplanted,\n  TOKEN: tokenplanted}\n",
    "spec:\n  env: {PASSWORD: hunterplanted, MODE: train,\n    TOKEN: tokenplanted, OTHER: 1}\n  next: 2\n",
    "config: {a: 1,\n  password: hunterplanted, b: 2}\n",
    "config: {a: 1,\n  password: hunterplanted,\n  b: 2}\n",
    "env: {PASSWORD: 'hunter planted',\n  TOKEN: \"token planted\", MODE: train}\n",
    "env: [{name: API_TOKEN,\n    value: tokenplanted}, {name: MODE, value: train}]\n",
    "db: {user: bob,\n  password: hunter\n    planted, mode: x}\n",  # a scalar wrapped too
    "env: {GITHUB_TOKEN: ghp_16C7e42F292c6912E7710c838347Ae178B4a,\n  MODE: train}\n",
    "env: {\n  PASSWORD: hunterplanted,\n  MODE: train\n}\n",
    "a: {b: {password: hunterplanted,\n    c: 1}, d: [x,\n    y]}\n",
])
def test_a_flow_mapping_wrapped_over_lines_stays_valid_yaml(text):
    out = redact_text(text)
    assert "planted" not in out and "ghp_" not in out, out
    before, after = _load_all(text)[0], _load_all(out)[0]
    assert _shape(after) == _shape(before), out

    def values(doc, path=()):
        if isinstance(doc, dict):
            for k, v in doc.items():
                yield from values(v, (*path, k))
        elif isinstance(doc, list):
            for i, v in enumerate(doc):
                yield from values(v, (*path, i))
        else:
            yield path, doc

    new = dict(values(after))
    for path, value in values(before):
        planted = "planted" in str(value) or "ghp_" in str(value)
        assert new[path] == (MASK if planted else value), (path, out)  # the values beside them are kept
    assert redact_text(out) == out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=st.dictionaries(st.sampled_from(SECRET_KEYS + PLAIN_KEYS), _tree(3), min_size=1, max_size=5),
       width=st.sampled_from([20, 40, 80]))
def test_redacted_flow_yaml_wrapped_at_any_width_still_parses(doc, width):
    """Flow style wrapped as a YAML writer wraps it: valid YAML with the same keys outside the secret keys (a
    collection wrapped over lines under a secret key may become one `'***'`), the values under secret keys hidden."""
    out = redact_text(_dump(doc, True, width))
    parsed = YAML(typ="safe", pure=True).load(out)
    assert _public_shape(parsed) == _public_shape(doc), out
    shown = set(_outside(doc))
    for key in SECRET_KEYS:
        for value in set(_under(doc, key)) - shown:
            assert not re.search(rf"(?<![A-Za-z0-9]){value}(?![A-Za-z0-9])", out), value
    assert redact_text(out) == out
