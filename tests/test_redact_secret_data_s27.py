"""GIVEN a Kubernetes Secret's data pasted without its `"kind": "Secret"` WHEN redacted THEN its values are hidden.

Only a JSON text holding `"kind": "Secret"` had its `"data"` values hidden; a data block quoted alone
(`"data": {"password": "cGFzc3dvcmQ=", "DATABASE_URL": "…"}`) kept every value whose key is no secret's name,
and `.dockerconfigjson` (registry credentials) was kept everywhere, also as the bare base64 that
`kubectl get secret regcred -o jsonpath='{.data.\\.dockerconfigjson}'` prints. A harmless `"data"` object (a log's
JSON, a ConfigMap) keeps its values.
"""

from __future__ import annotations

import base64

import pytest

from oomdoctor.redact import MASK, is_secret_name, redact_text

S = "Zq9planted"
B64 = base64.b64encode(f"postgres://u:{S}@db/x".encode()).decode()  # a secret, base64 as a Secret holds it
DOCKER = base64.b64encode(('{"auths":{"reg.corp":{"auth":"' + S + '"}}}').encode()).decode()
DOCKER_PRETTY = base64.b64encode(('{\n  "auths": {\n    "reg.corp": {"auth": "' + S + '"}\n  }\n}').encode()).decode()


@pytest.mark.parametrize("text", [
    f'"data": {{"password": "cGFzc3dvcmQ=", "DATABASE_URL": "{B64}"}}',
    f'{{"data":{{"DATABASE_URL":"{B64}","api-token":"dG9rZW4xMjM0"}}}}',
    f'"data": {{\n  "DATABASE_URL": "{B64}",\n  "tls.key": "LS0tLS1CRUdJTg=="\n}}',
    f'  "data": {{\r\n    "username": "YWRtaW4=",\r\n    "password": "{B64}"\r\n  }},',
    f'{{"stringData": {{"db": "{S}"}}}}',
])
def test_a_secret_data_block_alone_hides_every_value(text):
    out = redact_text(text)
    assert S not in out and B64 not in out and MASK in out, out


def test_the_keys_and_the_harmless_values_of_a_data_block_alone_are_hidden_like_a_secrets():
    text = '"data": {"password": "cGFzc3dvcmQ=", "username": "YWRtaW4=", "ca.crt": "LS0tLS1CRUdJTg=="}'
    assert redact_text(text) == '"data": {"password": "***", "username": "***", "ca.crt": "***"}'


@pytest.mark.parametrize("text", [
    f'"data": {{".dockerconfigjson": "{DOCKER}"}}',
    f'{{".dockerconfigjson":"{DOCKER}"}}',  # kubectl get secret regcred -o jsonpath='{{.data}}'
    f"{DOCKER}",  # -o jsonpath='{{.data.\\.dockerconfigjson}}'
    f"token is {DOCKER_PRETTY}",
    f"  .dockerconfigjson: {DOCKER}",
    f".dockercfg: {base64.b64encode(S.encode()).decode()}",
])
def test_registry_credentials_are_hidden_wherever_they_stand(text):
    out = redact_text(text)
    assert DOCKER not in out and DOCKER_PRETTY not in out and MASK in out, out
    assert base64.b64encode(S.encode()).decode() not in out


def test_docker_config_names_are_secret():
    assert is_secret_name(".dockerconfigjson") and is_secret_name(".dockercfg")
    assert not is_secret_name("DOCKER_CONFIG") and not is_secret_name("docker_config_dir")


@pytest.mark.parametrize("text", [
    '{"data": {"loss": "0.53", "step": "12"}}',  # not base64
    '{"data": {"image": "cat.png", "label": "cat"}}',
    '"data": {"username": "YWRtaW4=", "ca.crt": "LS0tLS1CRUdJTg=="}',  # no secret key: no sign it is a Secret's
    '{"data": {"key": "test", "label": "cat1"}}',  # `key` alone is a weak name: `label` is kept
    '{"data": {"token_count": "1234", "id": "abcd"}}',
    '{"kind": "ConfigMap", "data": {"api_token_file": "L3J1bi9zZWNyZXRz", "hf": "SnNvblNlY3JldDM="}}',
])
def test_a_harmless_data_object_keeps_its_values(text):
    out = redact_text(text)
    for value in ("0.53", "cat.png", "YWRtaW4=", "LS0tLS1CRUdJTg==", "cat1", "1234", "SnNvblNlY3JldDM="):
        if value in text:
            assert value in out, out


@pytest.mark.parametrize("unit", ['"data": {', '"data": {"password": "YWJj", ', '"stringData":{"a":"b"}',
                                  '{"data":{"k":"YWJj"}}', "eyJhdXRocyI6"])
def test_a_megabyte_of_data_blocks_is_redacted_in_linear_time(unit):
    text = (unit * ((1 << 20) // len(unit) + 1))[: 1 << 20]
    out = redact_text(text)  # no timing assert (machines differ)
    assert isinstance(out, str) and out.count("\n") == text.count("\n")


# --- secretKeyRef / configMapKeyRef: `key` names a key of a Secret, it is no secret value ------------------------

TOKEN = "Zq9plantedToken0x"  # a token-looking env value (a secret by its look)
GH = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"
WORD = "hunterplanted"  # a planted value that looks like a key's name: only the place it stands hides it
HEX = "0123456789abcdef0123"

KEY_REF_BLOCK = f"""apiVersion: v1
kind: Pod
metadata: {{name: trainer}}
spec:
  containers:
  - name: trainer
    env:
    - name: DB_PASSWORD
      valueFrom:
        secretKeyRef:
          name: db-secret
          key: password
    - name: HF_TOKEN
      valueFrom:
        secretKeyRef:
          name: hf-secret
          optional: false
          key: token
    - name: MODE
      valueFrom:
        configMapKeyRef:
          key: mode
          name: app-config
    - name: API_TOKEN
      value: {TOKEN}
    - name: GITHUB_TOKEN
      value: {GH}
    - name: PASSWORD
      value: hunter2
    password: hunter2
    key: {S}
"""

KEY_REF_FLOW = f"""env:
- {{name: DB_PASSWORD, valueFrom: {{secretKeyRef: {{name: db-secret, key: password}}}}}}
- name: API_KEY
  valueFrom:
    secretKeyRef: {{name: api-secret, key: api-key}}
- name: MODE
  valueFrom: {{configMapKeyRef: {{key: mode, name: app-config}}}}
- name: WRAPPED
  valueFrom:
    secretKeyRef: {{name: wrapped-secret,
      key: tls.key}}
- {{name: PASSWORD, value: hunter2}}
- {{name: API_TOKEN, value: {TOKEN}}}
password: hunter2
auth: {{key: {S}, token: {S}x}}
"""


def _yaml(text: str):
    from ruamel.yaml import YAML

    return YAML(typ="safe", pure=True).load(text)


def _refs(doc) -> list[tuple[str, str]]:
    """Every (name, key) of a secretKeyRef or configMapKeyRef in a parsed document."""
    found = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k in ("secretKeyRef", "configMapKeyRef") and isinstance(v, dict):
                found.append((v.get("name"), v.get("key")))
            else:
                found.extend(_refs(v))
    elif isinstance(doc, list):
        for v in doc:
            found.extend(_refs(v))
    return found


def test_a_secret_key_ref_keeps_its_name_and_key_in_block_yaml():
    out = redact_text(KEY_REF_BLOCK)
    assert _refs(_yaml(out)) == [("db-secret", "password"), ("hf-secret", "token"), ("app-config", "mode")]
    for secret in (TOKEN, GH, "hunter2", S):  # the real values beside them stay hidden
        assert secret not in out, secret
    assert "key: '***'" in out  # a `key` outside a reference is still a secret-named field


def test_a_secret_key_ref_keeps_its_name_and_key_in_flow_yaml():
    out = redact_text(KEY_REF_FLOW)
    assert _refs(_yaml(out)) == [("db-secret", "password"), ("api-secret", "api-key"), ("app-config", "mode"),
                                 ("wrapped-secret", "tls.key")]
    for secret in (TOKEN, "hunter2", S):
        assert secret not in out, secret


def test_a_secret_key_ref_keeps_its_name_and_key_in_json():
    import json

    doc = _yaml(KEY_REF_BLOCK)
    for text in (json.dumps(doc, indent=4), json.dumps(doc), json.dumps(doc, separators=(",", ":"))):
        out = redact_text(text)
        assert _refs(json.loads(out)) == [("db-secret", "password"), ("hf-secret", "token"), ("app-config", "mode")]
        for secret in (TOKEN, GH, "hunter2", S):
            assert secret not in out, secret


def test_a_parsed_manifest_keeps_its_secret_key_refs_and_hides_the_values():
    from oomdoctor.redact import redact_manifest

    red = redact_manifest(_yaml(KEY_REF_BLOCK))
    assert _refs(red) == [("db-secret", "password"), ("hf-secret", "token"), ("app-config", "mode")]
    text = str(red)
    for secret in (TOKEN, GH, "hunter2", S):
        assert secret not in text, secret


def test_a_bundled_manifest_keeps_its_secret_key_refs(tmp_path):
    from oomdoctor.collectors.bundle_write import BundleWriter, add_manifest

    src = tmp_path / "pod.yaml"
    src.write_text(KEY_REF_BLOCK)
    w = BundleWriter()
    add_manifest(w, str(src))
    out = w.files["k8s/pod.yaml"].decode()
    assert _refs(_yaml(out)) == [("db-secret", "password"), ("hf-secret", "token"), ("app-config", "mode")]
    for secret in (TOKEN, GH, "hunter2", S):
        assert secret not in out, secret


@pytest.mark.parametrize("text", [
    f"secretKeyRef:\n  name: db-secret\n  key: {TOKEN}\n",  # a token where a key's name belongs: hidden
    f"secretKeyRef: {{name: db-secret, key: {TOKEN}}}\n",
    f'"secretKeyRef": {{"name": "db-secret", "key": "{GH}"}}',
    f"secretKeyRef:\n  name: db-secret\n  key: password\nkey: {WORD}\n",  # a `key` after the reference ended
    f"secretKeyRef: {{name: db-secret, key: password}}\nkey: {WORD}\n",
    f"secretKeyRef: {{name: db-secret}}, key: {WORD}\n",
    f"  secretKeyRef:\n    name: db-secret\n  key: {WORD}\n",  # less indented: the reference's sibling
    f"secretKeyRef:\n  name: db-secret\n  key: password\n  password: {WORD}\n",
    f"secretKeyRef: {{name: db-secret, key: password, token: {WORD}}}\n",
    f"secretKeyRef:\n  name: db-secret\n  key: {HEX}\n",  # a hex key: no Secret's key is named so
])
def test_a_secret_key_ref_opens_no_leak(text):
    out = redact_text(text)
    for secret in (TOKEN, GH, WORD, HEX):
        assert secret not in out, out


@pytest.mark.parametrize("text", [
    f"secretKeyRef: {{name: a\npassword: x\nkey: {WORD}\n",  # a flow mapping never closed: the key is past its lines
    f"- secretKeyRef:\n  key: {WORD}\n",  # not more indented than the reference
    f'"secretKeyRef": {{\n"name": "db",\n"key": "{WORD}"}}',
    f"secretKeyRef:\n  name: db key: {WORD}\n",
    f"mysecretKeyRef: {{key: {WORD}}}\n",  # another name that ends so
])
def test_a_key_outside_the_references_lines_stays_hidden(text):
    assert WORD not in redact_text(text)
