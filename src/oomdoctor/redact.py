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
# `TOKENIZERS_PARALLELISM` are not. Over-matching only hides a harmless value. Short codes are words of
# their own: `PIN` (`USER_PIN`, `PIN_CODE`, `pinCode`, but not `PINNED`, `SPINE` or DataLoader's
# `pin_memory`/`--pin-mem`), `OTP`/`TOTP`/`HOTP`, `MFA`, `2FA`, `PASSCODE`.
_SECRET_NAME = re.compile(
    r"(?:^|[_\-.])(?:[A-Z0-9]*TOKEN[S]?|[A-Z0-9]*KEY[S]?|SECRET[S]?|[A-Z0-9]*SECRET"
    r"|[A-Z0-9]*PASS(?:WORD|WD|PHRASE|CODE)?[S]?"
    r"|[A-Z0-9]*PWD|CREDENTIAL[S]?|CREDS|AUTH|AUTHORIZATION|PRIVATE|SESSION|COOKIE|PAT|SIGNATURE|SIG|DSN"
    r"|PIN(?:CODE)?(?![_\-.]MEM)|[A-Z0-9]*OTP(?:CODE)?|MFA(?:CODE)?|2FA(?:CODE)?)(?:$|[_\-.])",
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
    # PEM, OpenSSH and PGP (`-----BEGIN PGP PRIVATE KEY BLOCK-----`) private keys, to their END line
    re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)",
               re.S),
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
    # Webhook URLs are credentials in their path: Slack, Discord, Microsoft Teams
    re.compile(r"(?<=hooks\.slack\.com/)(?:services|workflows|triggers)/[A-Za-z0-9_/\-]+"),
    re.compile(r"(?<=discord\.com/api/webhooks/)[A-Za-z0-9_/\-]+|(?<=discordapp\.com/api/webhooks/)[A-Za-z0-9_/\-]+"),
    re.compile(r"(?<=webhook\.office\.com/)[A-Za-z0-9_/@.\-]+"),
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
    ("hooks.slack.com/",),
    ("/api/webhooks/",),
    ("webhook.office.com/",),
)
# `curl -u user:pass`, `--user user:pass`, `--user=user:pass`: the password after the colon
_USER_PASS = re.compile(r"(?<![\w\-])(?P<flag>-u|--user|--proxy-user)(?P<sep>[ \t]+|=)(?P<q>[\"']?)(?P<user>[^\s:\"']*):"
                        r"(?P<value>[^\s\"']+)")
_BEARER = re.compile(r"\b(Bearer|Basic|Token)\s+[A-Za-z0-9._~+/=\-]{8,}", re.IGNORECASE)
_URL_CREDS = re.compile(r"\b([A-Za-z][A-Za-z0-9+.\-]*://)([^\s:/@]*):([^\s@/]+)@")
# KEY=value / key: value / "key": "value" assignments inside free text (logs, command lines).
_ASSIGNMENT = re.compile(
    r"(?P<name>\b[A-Za-z_][A-Za-z0-9_.\-]*)(?P<sep>\s*[=:]\s*|\"\s*:\s*\")(?P<quote>[\"']?)(?P<value>[^\s\"',;&\x00]+)"
)

# A log file's name and a line number (`pretrain_tokens.log:42`), as explain and doctor print where an event is: the
# name looks secret to the rule above, the number is no secret.
_FILE_LINE = re.compile(r"[^\s=:]*(?:/[^\s=:]*|\.(?:log|txt|out|err|jsonl?|ya?ml|py|csv|md|gz)):\d{1,9}\Z")

_LOG_EXTENSIONS = frozenset({"log", "out", "err"})


def _log_file(name: str) -> bool:
    """A log's name (`auth.log`, `slurm-42.out`), or another file whose name is no secret's (`run.txt`): not
    `db_password.txt` or `vault_token.json`, whose `:1234` may be the file's content as grep prints it (review)."""
    stem, _, ext = name.rpartition(".")
    return ext.lower() in _LOG_EXTENSIONS or not is_secret_name(stem)


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
    if "-u" in out:
        out = _USER_PASS.sub(lambda m: f"{m.group('flag')}{m.group('sep')}{m.group('q')}{m.group('user')}:{MASK}"
                             if m.group("value") != MASK and not (m.group("user") + m.group("value")).isdigit()
                             else m.group(0), out)  # `docker run -u 1000:1000` is a uid:gid

    depth = [0]

    def _assign(m: re.Match[str]) -> str:
        if _FILE_LINE.match(m.group(0)) and _log_file(m.group("name")):  # `monkey.log:12`: a file and a line
            return m.group(0)
        if is_secret_name(m.group("name")) and m.group("value") != MASK:
            return f"{m.group('name')}{m.group('sep')}{m.group('quote')}{MASK}"
        # a harmless name's value may hold the next assignment (`A= PGPASSWORD=x`: the separator's
        # spaces let `A` take `PGPASSWORD=x` as its value): look inside it too
        value = m.group("value")
        if depth[0] < 8 and ("=" in value or ":" in value):  # bounded: `a=a=a=...` must not recurse deep
            depth[0] += 1
            try:
                value = _ASSIGNMENT.sub(_assign, value)
            finally:
                depth[0] -= 1
        return f"{m.group('name')}{m.group('sep')}{m.group('quote')}{value}"

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
        return _redact_embedded_json(doc)
    return doc


def _redact_embedded_json(text: str) -> str:
    """A string that is itself a JSON document (`kubectl.kubernetes.io/last-applied-configuration`
    holds the whole manifest, Secrets and env values included) is redacted as a manifest."""
    stripped = text.strip()
    if len(stripped) < 2 or stripped[0] not in "{[" or stripped[-1] not in "}]" or len(stripped) > _MAX_EMBEDDED:
        return redact_text(text)
    import json

    try:
        inner = json.loads(stripped)
    except (ValueError, RecursionError):
        return redact_text(text)
    cleaned = redact_manifest(inner)
    if cleaned == inner:
        return redact_text(text)
    return json.dumps(cleaned, separators=(",", ":")) + ("\n" if text.endswith("\n") else "")


_MAX_EMBEDDED = 4 << 20


def _redact_env_entry(entry: Any) -> Any:
    if isinstance(entry, Mapping) and "name" in entry and isinstance(entry.get("value"), str):
        return {**redact_manifest({k: v for k, v in entry.items() if k != "value"}),
                "value": redact_value(str(entry["name"]), entry["value"])}
    return redact_manifest(entry)


def redact_strings(value: Any) -> Any:
    """A copy of parsed JSON with `redact_text` applied to every string (keys kept as they are).

    For reports: their keys are oomdoctor's own (`key`, `value`, fact names), so a name-based rule
    would hide report structure; secrets inside values are found by their shape and by the
    `NAME=value` / `--flag value` forms in the text.
    """
    stack: list[Any] = []
    root: list[Any] = [value]
    stack.append((root, 0))
    while stack:
        container, k = stack.pop()
        item = container[k]
        if isinstance(item, str):
            container[k] = _redact_embedded_json(item)
        elif isinstance(item, dict):
            copy = dict(item)
            container[k] = copy
            stack.extend((copy, key) for key in copy)
        elif isinstance(item, list):
            copy_list = _mask_key_lines(list(item))
            container[k] = copy_list
            stack.extend((copy_list, i) for i in range(len(copy_list)))
    return root[0]


def _mask_key_lines(items: list[Any]) -> list[Any]:
    """A private key split over list items (a log quoted line by line): the lines between its BEGIN
    and END lines are masked too, not only the BEGIN line the token pattern sees."""
    inside = False
    for i, v in enumerate(items):
        if not isinstance(v, str):
            continue
        if inside:
            items[i] = MASK
            inside = "-----END " not in v
        elif "-----BEGIN " in v and "PRIVATE KEY" in v and "-----END " not in v:
            inside = True
    return items


_HTML_PIECES = re.compile(r"(<[^>]*>)")
_HTML_ATTR = re.compile(r'(=")([^"]*)(")')


def _redact_html_text(text: str) -> str:
    import html

    if not text.strip():
        return text
    plain = html.unescape(text)
    red = redact_text(plain)
    return text if red == plain else html.escape(red, quote=False)


def _redact_html_attr(m: re.Match[str]) -> str:
    import html

    plain = html.unescape(m.group(2))
    red = redact_text(plain)
    return m.group(0) if red == plain else f"{m.group(1)}{html.escape(red, quote=True)}{m.group(3)}"


def redact_rendered(content: str, fmt: str) -> str:
    """A finished report (text, JSON or HTML) with every secret the rules know hidden.

    This is the choke point every report passes (cli.common.emit): whatever a collector or
    renderer forgot, the output is redacted here. JSON is parsed and its strings redacted (the
    result is dumped as oomdoctor's JSON renderers write it, only when something changed); HTML has
    its text and attribute values redacted between the tags, unescaped first and escaped again.
    """
    if not content:
        return content
    if fmt == "json":
        import json

        try:
            doc = json.loads(content)
        except (ValueError, RecursionError):
            return redact_text(content)
        red = redact_strings(doc)
        if red == doc:
            return content
        return json.dumps(red, indent=2, sort_keys=False) + ("\n" if content.endswith("\n") else "")
    if fmt == "html":
        pieces = _HTML_PIECES.split(content)
        for i, piece in enumerate(pieces):
            if i % 2:  # a tag: its attribute values
                if '="' in piece:
                    pieces[i] = _HTML_ATTR.sub(_redact_html_attr, piece)
            else:
                pieces[i] = _redact_html_text(piece)
        return "".join(pieces)
    return redact_text(content)
