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
