"""Secrets never leave the machine: redaction of environments, URLs, manifests and free text.

Pure functions. Bundles and reports run everything that came from the user's environment through
here before it is written. The rules err on the side of hiding: a variable whose *name* looks
secret is hidden whatever its value, and values that *look* like a known token format are hidden
whatever their name. Only the secret part is replaced, so a report still shows which variable or
URL was involved (`https://user:***@host`, `HF_TOKEN=***`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

MASK = "***"

# Variable names that carry secrets: a word of the name (split at `_`, `-`, `.`) is or ends in one of
# these (`AWS_SECRET_ACCESS_KEY`, `HF_TOKEN`, `APIKEY`, `DB_PASSWORD`, `GITHUB_PAT`); `PATH` or
# `TOKENIZERS_PARALLELISM` are not. Over-matching only hides a harmless value.
_SECRET_NAME = re.compile(
    r"(?:^|[_\-.])(?:[A-Z0-9]*TOKEN[S]?|[A-Z0-9]*KEY[S]?|SECRET[S]?|[A-Z0-9]*SECRET|PASSWORD|PASSWD|PWD|PASS"
    r"|CREDENTIAL[S]?|CREDS|AUTH|AUTHORIZATION|PRIVATE|SESSION|COOKIE|PAT|SIGNATURE|DSN)(?:$|[_\-.])",
    re.IGNORECASE,
)
# Names that match the pattern above but are known not to hold secrets.
_SAFE_NAMES = frozenset({
    "PWD", "OLDPWD", "KEYTIMEOUT", "SSH_AUTH_SOCK", "GPG_AGENT_INFO", "XAUTHORITY", "TOKENIZERS_PARALLELISM",
    "PYTHONHASHSEED", "KUBERNETES_SERVICE_PORT", "SESSION_MANAGER", "XDG_SESSION_TYPE", "XDG_SESSION_ID",
    "XDG_SESSION_CLASS", "XDG_SESSION_DESKTOP", "DBUS_SESSION_BUS_ADDRESS", "KEYMAP",
})

# Values that look like credentials, whatever the variable name.
_TOKEN_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)", re.S),
    re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}\b"),  # AWS access key ids
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}\b"),  # GitHub tokens
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}\b"),
    re.compile(r"\bhf_[A-Za-z0-9]{20,}\b"),  # Hugging Face
    re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b"),  # Slack
    re.compile(r"\bglpat-[A-Za-z0-9_\-]{20,}\b"),  # GitLab
    re.compile(r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_\-]{20,}\b"),  # OpenAI / Anthropic style
    re.compile(r"\bAIza[0-9A-Za-z_\-]{35}\b"),  # Google API key
    re.compile(r"\bnpm_[A-Za-z0-9]{36}\b"),
    re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),  # JWT
)
# Literal text each token pattern must contain: a substring test (memchr-fast) skips the regex pass
# over a log that cannot match it, which is nearly every pass on a training log. Same output, ~10x
# faster on multi-MB logs. Keep this in step with _TOKEN_PATTERNS (a test checks it).
_TOKEN_ANCHORS: tuple[tuple[str, ...], ...] = (
    ("-----BEGIN ",),
    ("AKIA", "ASIA", "AGPA", "AIDA", "AROA", "ANPA", "ANVA", "AIPA"),
    ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
    ("github_pat_",),
    ("hf_",),
    ("xoxa-", "xoxb-", "xoxp-", "xoxo-", "xoxs-", "xoxr-"),
    ("glpat-",),
    ("sk-",),
    ("AIza",),
    ("npm_",),
    ("eyJ",),
)
_BEARER = re.compile(r"\b(Bearer|Basic|Token)\s+[A-Za-z0-9._~+/=\-]{8,}", re.IGNORECASE)
_URL_CREDS = re.compile(r"\b([A-Za-z][A-Za-z0-9+.\-]*://)([^\s:/@]*):([^\s@/]+)@")
# KEY=value / key: value / "key": "value" assignments inside free text (logs, command lines).
_ASSIGNMENT = re.compile(
    r"(?P<name>\b[A-Za-z_][A-Za-z0-9_.\-]*)(?P<sep>\s*[=:]\s*|\"\s*:\s*\")(?P<quote>[\"']?)(?P<value>[^\s\"',;&]+)"
)

# `--api-key VALUE` / `--password VALUE` on command lines (argv, `docker run`, scripts): the value is
# the next word. Values that start with `-` are the next option, not a value.
_FLAG_VALUE = re.compile(r"(?<![\w\-])(?P<flag>--?[A-Za-z][A-Za-z0-9_.\-]*)(?P<sp>[ \t]+)"
                         r"(?P<value>\"[^\"\n]*\"|'[^'\n]*'|[^\s\"'\-]\S*)")


def is_secret_flag(word: str) -> bool:
    """True for a command-line option (`--hf-token`, `--password`) whose next argument is a secret."""
    return word.startswith("-") and "=" not in word and is_secret_name(word.lstrip("-"))


def is_secret_name(name: str) -> bool:
    """True for environment/field names that conventionally hold secrets."""
    if name.upper() in _SAFE_NAMES:
        return False
    return bool(_SECRET_NAME.search(name))


def redact_text(text: str) -> str:
    """Hide tokens, credentials in URLs, bearer headers, PEM keys and secret-named assignments."""
    if not text:
        return text
    out = text
    for pattern, anchors in zip(_TOKEN_PATTERNS, _TOKEN_ANCHORS):
        if any(a in out for a in anchors):
            out = pattern.sub(MASK, out)
    lowered = out.lower()
    if "bearer" in lowered or "basic" in lowered or "token" in lowered:
        out = _BEARER.sub(lambda m: f"{m.group(1)} {MASK}", out)
    if "://" in out:
        out = _URL_CREDS.sub(lambda m: f"{m.group(1)}{m.group(2)}:{MASK}@", out)

    def _assign(m: re.Match[str]) -> str:
        if is_secret_name(m.group("name")) and m.group("value") != MASK:
            return f"{m.group('name')}{m.group('sep')}{m.group('quote')}{MASK}"
        return m.group(0)

    def _flag(m: re.Match[str]) -> str:
        if is_secret_flag(m.group("flag")) and m.group("value") != MASK:
            quote = m.group("value")[0] if m.group("value")[0] in "\"'" else ""
            return f"{m.group('flag')}{m.group('sp')}{quote}{MASK}{quote}"
        return m.group(0)

    return _FLAG_VALUE.sub(_flag, _ASSIGNMENT.sub(_assign, out))


def redact_value(name: str, value: str) -> str:
    """The value of variable `name` as it may be shown: masked entirely when the name is secret."""
    if is_secret_name(name):
        return MASK if value else value
    return redact_text(value)


def redact_env(mapping: Mapping[str, Any]) -> dict[str, str]:
    """A copy of an environment with secret values replaced by `***`."""
    return {str(k): redact_value(str(k), "" if v is None else str(v)) for k, v in mapping.items()}


def redacted_names(mapping: Mapping[str, Any]) -> list[str]:
    """Names of variables whose value redaction changed (for the `runtime.env_redacted` fact)."""
    red = redact_env(mapping)
    return sorted(k for k, v in mapping.items() if red.get(str(k)) != ("" if v is None else str(v)))


def redact_manifest(doc: Any) -> Any:
    """A copy of a parsed Kubernetes/compose document with secrets hidden.

    `kind: Secret` loses all `data`/`stringData` values; container `env` entries with a secret name
    lose their `value`; every other string goes through `redact_text`.
    """
    if isinstance(doc, Mapping):
        is_secret = str(doc.get("kind", "")).lower() == "secret"
        out: dict[Any, Any] = {}
        for key, value in doc.items():
            if is_secret and key in ("data", "stringData") and isinstance(value, Mapping):
                out[key] = {k: MASK for k in value}
            elif key == "env" and isinstance(value, list):
                out[key] = [_redact_env_entry(e) for e in value]
            elif isinstance(value, str) and is_secret_name(str(key)):
                out[key] = MASK
            else:
                out[key] = redact_manifest(value)
        return out
    if isinstance(doc, list):
        # command/args lists: ["--hf-token", "hf_..."] hides the word after a secret-named option
        return [MASK if i and isinstance(v, str) and isinstance(doc[i - 1], str) and is_secret_flag(doc[i - 1])
                else redact_manifest(v) for i, v in enumerate(doc)]
    if isinstance(doc, str):
        return redact_text(doc)
    return doc


def _redact_env_entry(entry: Any) -> Any:
    if isinstance(entry, Mapping) and "name" in entry and isinstance(entry.get("value"), str):
        return {**redact_manifest({k: v for k, v in entry.items() if k != "value"}),
                "value": redact_value(str(entry["name"]), entry["value"])}
    return redact_manifest(entry)
