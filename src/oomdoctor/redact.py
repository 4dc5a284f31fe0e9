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
from functools import lru_cache
from typing import Any

MASK = "***"

# Variable names that carry secrets: a word of the name (split at `_`, `-`, `.`) is or ends in one of
# these (`AWS_SECRET_ACCESS_KEY`, `HF_TOKEN`, `APIKEY`, `DB_PASSWORD`, `GITHUB_PAT`); `PATH` or
# `TOKENIZERS_PARALLELISM` are not. Over-matching only hides a harmless value. Short codes are words of
# their own: `PIN` (`USER_PIN`, `PIN_CODE`, `pinCode`, but not `PINNED`, `SPINE` or DataLoader's
# `pin_memory`/`--pin-mem`), `OTP`/`TOTP`/`HOTP`, `MFA`, `2FA`, `PASSCODE`. A Secret's `.dockerconfigjson` and
# `.dockercfg` hold registry credentials.
_SECRET_NAME = re.compile(
    r"(?:^|[_\-.])(?:[A-Z0-9]*TOKEN[S]?|[A-Z0-9]*KEY[S]?|SECRET[S]?|[A-Z0-9]*SECRET"
    r"|[A-Z0-9]*PASS(?:WORD|WD|PHRASE|CODE)?[S]?"
    r"|[A-Z0-9]*PWD|PW(?![_\-.])|CREDENTIAL[S]?|CREDS|AUTH|AUTHORIZATION|PRIVATE|SESSION|COOKIE|PAT|SIGNATURE|SIG|DSN"
    r"|PIN(?:CODE)?(?![_\-.]MEM)|[A-Z0-9]*OTP(?:CODE)?|MFA(?:CODE)?|2FA(?:CODE)?|DOCKERCONFIGJSON|DOCKERCFG)(?:$|[_\-.])",
    re.IGNORECASE,
)
# Names that match the pattern above but are known not to hold secrets.
_SAFE_NAMES = frozenset({
    "PWD", "OLDPWD", "KEYTIMEOUT", "SSH_AUTH_SOCK", "GPG_AGENT_INFO", "XAUTHORITY", "TOKENIZERS_PARALLELISM",
    "PYTHONHASHSEED", "KUBERNETES_SERVICE_PORT", "SESSION_MANAGER", "XDG_SESSION_TYPE", "XDG_SESSION_ID",
    "XDG_SESSION_CLASS", "XDG_SESSION_DESKTOP", "DBUS_SESSION_BUS_ADDRESS", "KEYMAP",
})

# A count, a size or an id *of* tokens, sessions or keys is no secret: `max_new_tokens`, `tokens_per_s`,
# `prompt_tokens`, `pad_token_id`, `token_type_ids`, `num_key_value_heads`, `key_size`, nvidia-smi's
# `session_count`. Only when every secret word of the name is such a counted one, and the word is the name's
# first or comes after a counting word (`API_KEY_SIZE`, `HF_TOKEN_ID`, `SESSION_ID` stay secret).
_COUNTED = {
    "TOKEN": frozenset({"COUNT", "COUNTS", "CNT", "NUM", "LEN", "LENGTH", "SIZE", "PER", "RATE", "LIMIT", "BUDGET",
                        "ID", "IDS", "TYPE", "INDEX", "IDX", "EMBEDDING", "EMBEDDINGS", "LEVEL", "ACC", "ACCURACY",
                        "USAGE", "RATIO", "UTILIZATION"}),
    "SESSION": frozenset({"COUNT", "COUNTS", "CNT", "NUM", "LIMIT"}),
    "KEY": frozenset({"COUNT", "COUNTS", "CNT", "NUM", "SIZE", "LEN", "LENGTH", "BITS", "VALUE", "PADDING", "STATES",
                      "DIM", "HEADS", "PROJ", "CACHE", "LAYER", "LAYERS", "NORM"}),
}
_COUNTED["TOKENS"] = _COUNTED["TOKEN"] | {"SEEN", "TOTAL", "S", "SEC", "PS", "THROUGHPUT"}
_COUNTED["SESSIONS"] = _COUNTED["SESSION"]
_COUNTED["KEYS"] = _COUNTED["KEY"]
_COUNTING = frozenset({"NUM", "N", "MAX", "MIN", "TOTAL", "AVG", "MEAN"})
# words between a counting word and `tokens`, or alone before it: `max_new_tokens`, `prompt_tokens`
_TOKEN_KINDS = frozenset({"NEW", "INPUT", "OUTPUT", "PROMPT", "COMPLETION", "GENERATED", "CACHED", "TRAIN", "EVAL",
                          "TEXT", "IMAGE", "SPECIAL", "ADDED", "PADDED", "CONTEXT", "REASONING", "VOCAB", "PREFILL",
                          "GENERATION", "DECODE", "BATCH", "BATCHED", "KV"})
_SPECIAL_TOKENS = frozenset({"PAD", "EOS", "BOS", "UNK", "SEP", "CLS", "MASK", "START", "END", "DECODER", "STOP"})
_WORDS = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z0-9]+(?![a-z])")


_COUNT_VALUE = re.compile(r"[ \t]{0,8}\d{1,15}(?:\.\d{1,15})?(?![\w.])")


# A word that looks like a token: letters and digits mixed (`Zq9planted0`, `a1b2c3d4`), no prose or code around it
_TOKEN_WORD = re.compile(r"[A-Za-z0-9_\-+/=]{8,4096}")
_BARE_WORDS = frozenset({"PASS", "XPASS", "KEY", "SESSION"})
# Weak names: a switch or a small count after them is no secret (`auth: enabled`, `private: false`, `session: 3`,
# automake's `# PASS:  2`); `password: 1234`, `pass: 1234`, `PASS=1234` and `key: 12345678` stay hidden.
_WEAK_NAMES = frozenset({"auth", "private", "session", "key", "pass", "xpass"})
_SWITCH_VALUE = re.compile(r"([\"']?)(?:true|false|yes|no|on|off|enabled|disabled|none|null)\1(?![\w.\-])", re.IGNORECASE)
_SMALL_COUNT = re.compile(r"\d{1,4}(?![\w.\-])")
# A test runner's status line: `PASS: test_alloc`, `XPASS: tests/test_x.py::test_flaky` (a test's name, a pytest
# node id); `PASS: testing123` or `pass: test_pw` stay hidden
_TEST_ID = re.compile(r"(?:[\w.\-]{0,128}/){0,8}test(?:s?[_/]|[A-Z])[\w./\[\]\-]{0,256}(?:::[\w.\[\]\-]{1,256}){0,16}\Z"
                      r"|[\w./\-]{1,256}(?:::[\w.\[\]\-]{1,256}){1,16}\Z")
# A count of tokens, keys or sessions under the plural alone: `(tokens: 131072, ...)`, `keys: 1024, values: 1024`
_PLURAL_COUNTS = frozenset({"TOKENS", "KEYS", "SESSIONS"})


def _only_tokens(name: str) -> bool:
    """A name of a count of tokens: TOKEN(S) and words of a kind of tokens only (`new-token`, `cached-token`,
    `new_token_ratio`, `tokens`; not `HF_TOKEN` or `API_TOKEN`)."""
    words = [w.upper() for w in _WORDS.findall(name)]
    return any(w in ("TOKEN", "TOKENS") for w in words) and all(
        w in ("TOKEN", "TOKENS", "RATIO", "USAGE") or w in _TOKEN_KINDS for w in words)


def _only_counted(name: str) -> bool:
    words = [w.upper() for w in _WORDS.findall(name)]
    secret = [i for i, w in enumerate(words) if _SECRET_NAME.fullmatch(w)]
    if not secret:
        return False
    for i in secret:
        word, before, after = words[i], words[i - 1] if i else "", words[i + 1] if i + 1 < len(words) else ""
        if word not in _COUNTED:
            return False
        if word.startswith("TOKEN") and before in _SPECIAL_TOKENS:
            continue  # `pad_token`, `eos_token_id`
        j = i - 1
        while word == "TOKENS" and j >= 0 and words[j] in _TOKEN_KINDS:
            j -= 1
        kinds = j < i - 1
        counted = (j >= 0 and words[j] in _COUNTING) or (kinds and j < 0)
        if word == "TOKENS" and i == 0 and after in _TOKEN_KINDS:
            continue  # vLLM's `tokens_generated`
        if counted or ((i == 0 or before in _COUNTING) and after in _COUNTED[word]):
            continue
        return False
    return True


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
    # a Docker config (`{"auths": …`, registry credentials) in base64, as a Secret's `.dockerconfigjson` holds it
    re.compile(r"\b(?:eyJhdXRocyI6|ewogICJhdXRocyI6|ewogICAgImF1dGhzIj|ewoJImF1dGhzIj|eyAiYXV0aHMiO)"
               r"[A-Za-z0-9+/]{0,1048576}={0,2}"),
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
    ("eyJhdXRocyI6", "ewogICJhdXRocyI6", "ewogICAgImF1dGhzIj", "ewoJImF1dGhzIj", "eyAiYXV0aHMiO"),
    ("hooks.slack.com/",),
    ("/api/webhooks/",),
    ("webhook.office.com/",),
)
# `curl -u user:pass`, `--user user:pass`, `--user=user:pass`: the password after the colon
_USER_PASS = re.compile(r"(?<![\w\-])(?P<flag>-u|--user|--proxy-user)(?P<sep>[ \t]{1,16}|=)(?P<q>[\"']?)"
                        r"(?P<user>[^\s:\"']{0,256}):(?P<value>[^\s\"']{1,4096})")
# `Authorization: Bearer x`; `Token` is also an English word (`token embeddings`), so after it only a word
# with a digit or a symbol is a credential. Never across a line break (`max token\nTraceback`).
_BEARER = re.compile(r"\b(Bearer|Basic|Token)[ \t]{1,16}(?P<v>[A-Za-z0-9._~+/=\-]{8,4096})", re.IGNORECASE)
# A URL's scheme and `://`, as group 1. One start per scheme word (the look-behind), so `a.a.a…://` stays linear.
_URL_SCHEME = r"(?<![A-Za-z0-9+.\-])([A-Za-z][A-Za-z0-9+.\-]{0,31}://)"
# `scheme://user:pass@host`: the password runs to the last `@` before the path (`p@ss` unencoded), the
# user may be an e-mail address.
_URL_CREDS = re.compile(_URL_SCHEME + r"([^\s:/]{0,256}):([^\s/]{1,1024})@")
# `.netrc` lines: `machine host login bob password SECRET`
_NETRC = re.compile(r"(?<![\w\-])(login[ \t]{1,16}\S{1,256}[ \t]{1,16}(?:password|passwd)[ \t]{1,16})(\S{1,4096})")

# Assignments inside free text (logs, command lines, config files, source lines in a traceback): `KEY=value`,
# `key: value`, `"key": "value"`, `'key': 'value'`, `--key=value`, `key = value`, `key => value`, `key := value`.
# The head is a name, what may close it (a quote, `\"` in JSON inside a string, `"]` in `env["X"] = …`; not a
# bare `]`: `cache[key] = tensor` in a traceback is code), and a separator that never crosses a line break:
# `db:` must not take the next line's `password: x` as its value. A name starts where a run of name
# characters starts (the look-behind), so `a.a.a…` is tried once, not once per dot.
_HEAD = re.compile(r"(?<![A-Za-z0-9_.\-])(?P<name>[A-Za-z0-9_.\-]+)(?P<nq>\\{0,3}(?:[\"']\]?)?)"
                   r"(?P<sep>[ \t]{0,16}(?:=>|:=|==|=|:)[ \t]{0,16})")
# A secret's value, tried in this order: quoted (to its closing quote on the line, `\"` escapes, `b'…'`), then
# what the place says (a header, a YAML or ini line: to the line's end), then a `;`-terminated
# connection-string field (`Password=p@ss w0rd;`), then one word (`\ ` escapes a space).
_V_QUOTED = re.compile(r"[bBrRuUfF$]{0,2}(?:\"(?P<dq>(?:[^\"\\\r\n]|\\[^\r\n]){0,4096})\""
                       r"|'(?P<sq>(?:[^'\\\r\n]|\\[^\r\n]){0,4096})'"
                       r"|\\{1,3}\"(?P<eq>[^\"\r\n]{0,4096}?)\\{1,3}\")")
_V_LINE = re.compile(r"[^\r\n]{1,4096}")
_V_HEADER = {"": re.compile(r"[^\r\n]{1,4096}"), '"': re.compile(r'[^\r\n"]{1,4096}'),
             "'": re.compile(r"[^\r\n']{1,4096}")}  # to the line's end, or to the quote around the header
_V_FLOW = re.compile(r"[^\s,{}\[\]][^,{}\[\]]{0,4095}?(?=[ \t\r\n]*[,}\]])")  # may go on to the next line
_V_FLOW_LINE = re.compile(r"[^\s,{}\[\]][^,{}\[\]\r\n]{0,4095}?(?=[ \t]*[,}\]])")
_V_FIELD = re.compile(r"[^;\r\n\"'=]{1,1024}(?=;)")
_V_WORD = re.compile(r"(?P<q>[\"']?)(?P<w>(?:[^\s\"',;&\\\x00]|\\[^\r\n]){1,4096})")
# An HTTP header whose whole value is a credential; its scheme (`Basic`, `Bearer`, `Digest`) stays readable.
_HEADER_NAME = re.compile(r"(?:^|[_\-.])(?:proxy-)?(?:authorization|cookie)\Z", re.IGNORECASE)
_SCHEME = re.compile(r"(?:basic|bearer|digest|token|negotiate|ntlm|aws4-hmac-sha256|apikey|api-key|key|oauth|hawk|"
                     r"hoba|mutual|scram-sha-1|scram-sha-256|sharedkey|sharedkeylite|vapid|dpop)[ \t]{1,16}(?=\S)",
                     re.IGNORECASE)  # only a known scheme: `Authorization: s3cr3t more` may start with the secret
# Where a name stands at the start of a YAML/ini line (after indentation, a list's `- `, an opening quote, or
# grep's `FILE:LINE:` / `FILE-LINE-` / `LINE:`), its value runs to the end of the line (`password: two words`).
_LINE_START = re.compile(r"(?:(?:[^\s:]{0,1024}[:\-])?\d{1,9}[:\-])?[ \t]*(?:-[ \t]+){0,16}[\"']?\Z")
# grep's `FILE:` at the start of a line (`secrets/db_password.txt:hunter2`): a path, or nothing
_PATH_ONLY = re.compile(r"[^\s:\"']{0,1024}/\Z|\Z")
# `PWD` and `OLDPWD` are the shell's directories (kept), but `Pwd=` in an ODBC connection string is a password
_DIRECTORY_NAMES = frozenset({"PWD", "OLDPWD"})
_DIRECTORY_VALUE = re.compile(r"[\"']?(?:[/~$.%]|[A-Za-z]:[\\/]|[\"';\s]|\Z)")
# A list of `name`/`value` pairs (Kubernetes and ECS env lists, as raw YAML or JSON): the name says
# whether the value is secret.
_ENTRY_NAME = re.compile(r"(?<![A-Za-z0-9_])[\"']?name[\"']?[ \t]{0,16}[:=][ \t]{0,16}[\"']?(?P<n>[A-Za-z0-9_.\-]{1,256})",
                         re.IGNORECASE)

# A file's name and a line number (`pretrain_tokens.log:42`), as explain and doctor print where an event is.
_FILE_LINE = re.compile(r"\.(?:log|txt|out|err|jsonl?|ya?ml|py|pyx|ipynb|c|cc|cpp|cxx|h|hpp|cu|cuh|rs|go|java|scala|js|ts"
                        r"|csv|md|gz|env|ini|cfg|conf|toml|properties|key|pem)\Z",
                        re.IGNORECASE)
_LINE_NO = re.compile(r"\d{1,9}(?=[\s\"',;&)\]:\-]|\Z)")

# a log's, or a source file's: FILE:LINE of source code is where a message comes from (TensorFlow's
# `direct_session.cc:154] Internal: failed initializing StreamExecutor ...`, whose message was hidden behind
# `session`); the rest of the line is still scanned for assignments
_LOG_EXTENSIONS = frozenset({"log", "out", "err", "py", "pyx", "c", "cc", "cpp", "cxx", "h", "hpp", "cu", "cuh", "rs",
                             "go", "java", "scala", "js", "ts", "ipynb"})
_KEY_EXTENSIONS = frozenset({"key", "pem"})  # a key file's content is a secret whatever its name


def _log_file(name: str) -> bool:
    """A log's name (`auth.log`, `slurm-42.out`), or another file whose name is no secret's (`run.txt`): not
    `db_password.txt`, `vault_token.json` or `server.key`, whose `:1234` may be the file's content as grep prints
    it (review)."""
    stem, _, ext = name.rpartition(".")
    ext = ext.lower()
    return ext in _LOG_EXTENSIONS or (ext not in _KEY_EXTENSIONS and not is_secret_name(stem))


# `os.getenv("DB_PASSWORD", "default")`, `os.environ.get(...)`, `d.setdefault(...)` in a traceback's source line
_GETENV = re.compile(r"\b(?:getenv|get|setdefault|pop)\([ \t]{0,16}(?P<q>[\"'])(?P<n>[A-Za-z0-9_.\-]{1,128})(?P=q)"
                     r"[ \t]{0,16},[ \t]{0,16}[bBrRuUfF]{0,2}(?P<vq>[\"'])(?P<v>[^\"'\r\n]{1,4096})(?P=vq)")
# XML elements (`<password>x</password>`, Hadoop's `<name>fs.s3a.secret.key</name><value>x</value>`)
_XML_ELEMENT = re.compile(r"<(?P<tag>[A-Za-z0-9_][\w.\-]{0,127})(?:[ \t][^<>\r\n]{0,1024})?>(?P<v>[^<\r\n]{1,4096})"
                          r"</(?P=tag)[ \t]{0,16}>")
_XML_NAME = re.compile(r"<name>[ \t]{0,16}(?P<n>[^<\s]{1,256})[ \t]{0,16}</name>", re.IGNORECASE)

# Secrets after a keyword, no separator: a Dockerfile's legacy `ENV HF_TOKEN hf_x` (also in `docker history`),
# SQL's `IDENTIFIED BY 'x'` / `WITH PASSWORD 'x'`
_DOCKER_ENV = re.compile(r"(?<![\w\-])(?P<head>ENV[ \t]{1,16}(?P<n>[A-Za-z_][A-Za-z0-9_]{0,127})[ \t]{1,16})"
                         r"(?P<v>[^\s=][^\r\n]{0,4095})")
_SQL_PASSWORD = re.compile(r"(?<![\w\-])(?P<head>(?:IDENTIFIED[ \t]{1,16}BY|PASSWORD)[ \t]{1,16}(?P<q>['\"]))"
                           r"(?P<v>[^'\"\r\n]{1,4096})(?P=q)", re.IGNORECASE)
# A secret option and its value as items of a list (`CalledProcessError: Command '['mysql', '--password', 'x']'`,
# a JSON argv `["--api-key", "x"]`)
_FLAG_ITEM = re.compile(r"(?P<flag>-(?<![\w.\-]-)-?[A-Za-z0-9][A-Za-z0-9_.\-]{0,127})(?P<mid>[\"'][ \t]{0,16},[ \t]{0,16}"
                        r"[bru]?(?P<q>[\"']))(?P<v>[^\"'\r\n]{1,4096})(?P=q)")
# `kind: Secret` as raw YAML (`kubectl get secret -o yaml` pasted in a log): its data's keys are not secret names
_SECRET_KIND = re.compile(r"^[ \t]*kind:[ \t]*[\"']?Secret[\"']?[ \t]*\r?$", re.MULTILINE)
_SECRET_DATA = frozenset({"data", "stringData"})

# grep's context lines (`grep -n -C2`): `FILE-LINE-content`; for a secret file the content is its secret
_GREP_CONTEXT = re.compile(r"(?<![^\s\"'(\[<])(?P<file>[^\s:\"'=]{0,1024}?\.[A-Za-z0-9_]{1,8})-(?=\d{1,9}-)"
                           r"(?P<rest>[^\r\n]+)")
_GREP_CONTEXT_HINT = re.compile(r"\.[A-Za-z0-9_]{1,8}-\d{1,9}-")

# A YAML key alone on its line (`password:`, `token: |`, `- secret: >-`) whose value is the more indented
# lines below it.
_YAML_PARENT = re.compile(r"^(?P<ind>[ \t]*)(?P<dash>-[ \t]+)?(?P<q>[\"']?)(?P<name>[A-Za-z0-9_.\-]+)(?P=q)[ \t]*:"
                          r"[ \t]*(?:[!&][^\s]{0,64}[ \t]+)?(?P<block>[|>][+\-1-9]{0,2})?[ \t]*(?:#[^\r\n]*)?\r?$", re.MULTILINE)
_YAML_LEAD = re.compile(r"[ \t]*(?:-[ \t]+){0,16}")  # `- - x`: a list in a list
# A Secret's data as a flow mapping on its key's line: `data: {token: aGZf}`
_YAML_FLOW_DATA = re.compile(r"^(?P<head>[ \t]*(?:-[ \t]+)?[\"']?(?:data|stringData)[\"']?[ \t]*:[ \t]*)"
                             r"(?P<v>\{[^\r\n]{0,1048576}\})(?=[ \t]*\r?$)", re.MULTILINE)

# `--api-key VALUE` / `--password VALUE` on command lines (argv, `docker run`, scripts): the value is
# the next word. Values that start with `-` are the next option, not a value. The look-behind (no name character
# before the option) stands after the option's first `-`, so that the regex starts with a literal and skips from
# `-` to `-` in C: before, a log of `2024-01-01` lines cost a try at every character.
_FLAG_VALUE = re.compile(r"(?P<flag>-(?<![\w.\-]-)-?[A-Za-z0-9][A-Za-z0-9_.\-]*)(?P<sp>[ \t]{1,16})"
                         r"(?P<value>\"[^\"\r\n]{0,4096}\"|'[^'\r\n]{0,4096}'|[^\s\"'\-]\S{0,4095})")


# Login tools that take a password or an API key as a plain option or argument (shell text, or a
# `CalledProcessError`'s / a JSON argv's list items): `docker|podman|nerdctl|buildah|skopeo login -p X`, `sshpass -p X`
# (also `-pX`, only before the command it runs: `ssh -p 2222` is a port), `redis-cli -a X`, `wandb login KEY`.
# Elsewhere `-p` is a port or `mkdir -p`, so only these tools' options are read. One start per tool word; the
# scan of its arguments stops at the line's end, `|`, `;`, `&`, `)`, `]` or a backquote, and the next search starts after it.
_LOGIN_TOOL = re.compile(r"(?<![\w\-.])(?P<tool>docker|podman|nerdctl|buildah|skopeo|sshpass|redis-cli|wandb|"
                         r"mysql|mysqldump|mysqladmin|mysqlimport|mysqlcheck|mysqlshow|mysqlpump|mysqlsh|"
                         r"mariadb|mariadb-dump|mariadb-admin|mariadb-import|mariadb-check|mariadb-show)"
                         r"(?![\w\-.])[\"']?")
_TOOL_ARG = re.compile(r"[ \t,]{1,16}(?:\"(?P<dq>[^\"\r\n]{0,1024})\"|'(?P<sq>[^'\r\n]{0,1024})'"
                       r"|(?P<w>[^\s\"',\[\]|;&()<>`]{1,1024}))")
_LOGIN_HINTS = ("login", "sshpass", "redis-cli", "mysql", "mariadb")
# MySQL's and MariaDB's clients take the password glued to `-p` (`mysql -u root -pS3cret`, `-p'S3cret'`); `-p` alone
# asks for it, and the word after it is the database. Other tools' `-p` (a port, `mkdir -p`) is not read.
_MYSQL_TOOLS = frozenset({"mysql", "mysqldump", "mysqladmin", "mysqlimport", "mysqlcheck", "mysqlshow", "mysqlpump",
                          "mysqlsh", "mariadb", "mariadb-dump", "mariadb-admin", "mariadb-import", "mariadb-check",
                          "mariadb-show"})
# `.pgpass` lines (`host:port:database:user:password`, `\:` escapes a colon), in a text that names the file
_PGPASS_LINE = re.compile(r"^(?P<head>(?:[^\s:]{0,1024}\.pgpass:(?:\d{1,9}:)?)?[ \t]*(?:[^\s:#]{1,256}):(?:\d{1,5}|\*)"
                          r":(?:[^\s:]{1,256}):(?:[^\s:]{1,256}):)(?P<v>(?:[^\s\\]|\\\S){1,4096})[ \t]*\r?$", re.MULTILINE)
_CONTAINER_TOOLS = frozenset({"docker", "podman", "nerdctl", "buildah", "skopeo"})
_WANDB_VALUED = frozenset({"--host", "--anonymously", "--base-url"})  # `wandb login` options with a value
# openssl's password arguments: `-passin pass:X`, `-passout pass:X`, `-pass pass:X` (`env:VAR`, `file:PATH` kept)
_OPENSSL_PASS = re.compile(r"(?<![\w\-])(?P<head>-(?:passin|passout|pass|password|passphrase)[\"']?"
                           r"(?:[ \t]{1,16}|[ \t]{0,16},[ \t]{0,16})[\"']?pass:)(?P<v>[^\s\"']{1,4096})")
# `.netrc` as `wandb login` writes it, one keyword a line: `  password KEY` alone on its line (lower case, one word:
# `password authentication failed for user bob` in a log is no netrc line)
_NETRC_LINE = re.compile(r"^(?P<head>[ \t]{0,64}(?:password|passwd)[ \t]{1,16})(?P<v>[^\s]{1,4096})(?=[ \t]{0,64}\r?$)",
                         re.MULTILINE)
# A token as a URL's user, no password (`https://<40 hex>@github.com/org/private.git`): 20 or more characters of
# a token's alphabet with a digit; `https://alice@host`, `ssh://git@github.com`, `firstname.lastname@` stay.
_URL_TOKEN_USER = re.compile(_URL_SCHEME + r"([A-Za-z0-9_\-]{20,256})@")
# `kubectl get secret -o json` pasted in a log: a JSON text with `"kind": "Secret"` hides every value of its
# `"data"` and `"stringData"` objects (the YAML form is `_SECRET_KIND`)
_SECRET_KIND_JSON = re.compile(r"[\"']kind[\"'][ \t]{0,16}:[ \t]{0,16}[\"']Secret[\"']")
_JSON_DATA = re.compile(r"[\"'](?:data|stringData)[\"'][ \t]{0,16}:[ \t\r\n]{0,256}\{(?P<body>[^{}]{0,8388608})\}")
# A Secret's data pasted without its kind (`kubectl get secret -o jsonpath='{.data}'` quoted as `"data": {…}`, a
# data block alone): a flat `"data"` object of base64 strings with a key of a strong secret name (`password`,
# `tls.key`, `.dockerconfigjson`; not `key` alone) hides every value, as a Secret's; `"stringData"` (only a Secret
# has it) always. Not in a text that holds a ConfigMap, whose `data` it is.
_BASE64 = re.compile(r"(?:[A-Za-z0-9+/]{4}){1,1048576}|(?:[A-Za-z0-9+/]{4}){0,1048576}(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)")
_CONFIG_MAP_JSON = re.compile(r"[\"']kind[\"'][ \t]{0,16}:[ \t]{0,16}[\"']ConfigMap[\"']")
_JSON_PAIR = re.compile(r"(?P<k>\"(?:[^\"\\\r\n]|\\[^\r\n]){0,1024}\"[ \t\r\n]{0,256}:[ \t\r\n]{0,256}\")"
                        r"(?P<v>(?:[^\"\\\r\n]|\\[^\r\n]){1,4194304})\"")
# A YAML block list whose item is a secret option and whose next item is its value (a pod's `args:`):
# `- "--token"` then `- "x"` (an item that starts with `-` is the next option, as on a command line)
_YAML_FLAG_ITEM = re.compile(r"^(?P<head>[ \t]{0,64}-[ \t]{1,16}(?P<q>[\"']?)(?P<flag>--?[A-Za-z0-9][A-Za-z0-9_.\-]{0,127})"
                             r"(?P=q)[ \t]{0,16}\r?\n[ \t]{0,64}-[ \t]{1,16}(?P<q2>[\"']?))"
                             r"(?P<v>[^\r\n\"'\-][^\r\n\"']{0,4095})(?P=q2)(?=[ \t]{0,16}\r?$)", re.MULTILINE)


def is_secret_flag(word: str) -> bool:
    """True for a command-line option (`--hf-token`, `--password`) whose next argument is a secret."""
    return word.startswith("-") and "=" not in word and is_secret_name(word.lstrip("-"))


def is_secret_name(name: str) -> bool:
    """True for environment/field names that conventionally hold secrets."""
    if len(name) <= 128:
        return _secret_name(name)
    return name.upper() not in _SAFE_NAMES and bool(_SECRET_NAME.search(name)) and not _only_counted(name)


@lru_cache(maxsize=4096)
def _secret_name(name: str) -> bool:  # a log repeats its few names (`loss=`, `lr=`) on every line
    return name.upper() not in _SAFE_NAMES and bool(_SECRET_NAME.search(name)) and not _only_counted(name)


def redact_text(text: str) -> str:
    """Hide tokens, credentials in URLs, bearer headers, PEM keys and secret-named assignments."""
    if not text:
        return text
    out = text
    for pattern, anchors in zip(_TOKEN_PATTERNS, _TOKEN_ANCHORS):
        if any(a in out for a in anchors):
            out = pattern.sub(_token_mask, out)
    lowered = out.lower()
    if "bearer" in lowered or "basic" in lowered or "token" in lowered:
        out = _BEARER.sub(_bearer, out)
    if "://" in out:
        out = _URL_CREDS.sub(lambda m: f"{m.group(1)}{m.group(2)}:{MASK}@", out)
        out = _URL_TOKEN_USER.sub(lambda m: f"{m.group(1)}{MASK}@" if any(c.isdigit() for c in m.group(2))
                                  else m.group(0), out)
    if any(hint in out for hint in _LOGIN_HINTS):
        out = _redact_login_tools(out)
    if "pgpass" in out:
        out = _PGPASS_LINE.sub(lambda p: f"{p.group('head')}{MASK}" if p.group("v") != MASK else p.group(0), out)
    if "pass:" in out:
        out = _OPENSSL_PASS.sub(lambda m: _mask_word(m, "v"), out)
    if "passw" in out:
        out = _NETRC_LINE.sub(lambda m: f"{m.group('head')}{MASK}" if m.group("v") != MASK else m.group(0), out)
    if "Secret" in out and "ata" in out and _SECRET_KIND_JSON.search(out):
        out = _JSON_DATA.sub(_json_secret_data, out)
    elif ('"data"' in out or '"stringData"' in out) and not ("ConfigMap" in out and _CONFIG_MAP_JSON.search(out)):
        out = _JSON_DATA.sub(_json_data_alone, out)
    if "-u" in out:
        out = _USER_PASS.sub(lambda m: m.group(0) if (m.group("user") + m.group("value")).isdigit()
                             else _mask_word(m, "value"), out)  # `docker run -u 1000:1000` is a uid:gid
    if "login" in out:
        out = _NETRC.sub(lambda m: _mask_word(m, 2), out)
    if "(" in out and ("get" in out or "pop" in out):
        out = _GETENV.sub(lambda m: f"{m.group(0)[:m.start('v') - m.start()]}{MASK}{m.group('vq')}"
                          if is_secret_name(m.group("n")) and m.group("v") != MASK else m.group(0), out)
    if "</" in out:
        out = _XML_ELEMENT.sub(_xml_element, out)
    if "ENV" in out:
        out = _DOCKER_ENV.sub(lambda m: f"{m.group('head')}{MASK}"
                              if is_secret_name(m.group("n")) and m.group("v") != MASK else m.group(0), out)
    if "identified" in lowered or "password" in lowered:
        out = _SQL_PASSWORD.sub(lambda m: f"{m.group('head')}{MASK}{m.group('q')}" if m.group("v") != MASK
                                else m.group(0), out)
    if "\n" in out and ":" in out:
        secret_kind = bool(_SECRET_KIND.search(out))
        out = _redact_yaml_blocks(out, secret_kind=secret_kind)
        if secret_kind and "ata" in out:
            out = _YAML_FLOW_DATA.sub(lambda d: d.group("head") + (_mask_flow(d.group("v"), True) or _quoted_mask("")),
                                      out)
    if "- " in out and "\n" in out:
        out = _YAML_FLAG_ITEM.sub(lambda m: f"{m.group('head')}{MASK}{m.group('q2')}"
                                  if is_secret_flag(m.group("flag")) and m.group("v").strip() != MASK
                                  else m.group(0), out)
    if "-" in out and _GREP_CONTEXT_HINT.search(out):
        out = _GREP_CONTEXT.sub(_grep_context, out)
    if ":" in out or "=" in out:
        out = _redact_assignments(out)
    if "-" in out:
        out = _FLAG_VALUE.sub(_flag, out)
        if "," in out:
            out = _FLAG_ITEM.sub(lambda m: f"{m.group('flag')}{m.group('mid')}{MASK}{m.group('q')}"
                                 if is_secret_flag(m.group("flag")) and m.group("v") != MASK else m.group(0), out)
    return out


# Where a YAML plain scalar starts (after `key: `, a list's `- `, or inside a flow collection after `{`, `[` or `,`)
# and ends (the line's end or a comment; `,`, `]` or `}` in a flow collection)
_SCALAR_START = re.compile(r"(?::[ \t]{1,16}|^[ \t]*(?:-[ \t]+){1,16}|[\[{,][ \t]{0,16})\Z")
_SCALAR_END = re.compile(r"[ \t]*(?:#|\r?\Z)")
_FLOW_SCALAR_END = re.compile(r"[ \t]*[,\]}]")


def _token_mask(m: re.Match[str]) -> str:
    """A token's mask: `'***'` where the token is a whole YAML plain scalar (`value: ghp_…`, `{token: hf_…}`), for
    `***` alone there is an alias to YAML and a manifest in a log would no longer parse; else `***`."""
    text, start, end = m.string, m.start(), m.end()
    prefix = _line_prefix(text, start)
    if prefix is None:
        return MASK
    scalar = _SCALAR_START.search(prefix)
    if scalar is None:
        return MASK
    rest = text[end:_ahead(text, end)]
    flow = prefix.count("{") + prefix.count("[") > prefix.count("}") + prefix.count("]")
    if scalar.group(0)[0] in "[{," and not flow:
        return MASK  # `[ghp_…` or `a, ghp_…` in prose
    if _SCALAR_END.match(rest) or (flow and _FLOW_SCALAR_END.match(rest)):
        return f"'{MASK}'"
    return MASK


def _mask_word(m: re.Match[str], group: str | int) -> str:
    """The match with its `group`, an unquoted word, masked up to the text's punctuation after it (`_value_end`)."""
    start, end = m.start(group), m.end(group)
    end = _value_end(m.string, start, end, words=True)
    if end <= start or m.string[start:end] == MASK:
        return m.group(0)
    return f"{m.string[m.start():start]}{MASK}{m.string[end:m.end()]}"


def _bearer(m: re.Match[str]) -> str:
    if m.group(1).lower() == "token" and m.group("v").isalpha():  # `token embeddings`, not a credential
        return m.group(0)
    return f"{m.group(1)} {MASK}"


def _json_secret_data(m: re.Match[str]) -> str:
    body = m.group("body")
    masked = _JSON_PAIR.sub(lambda p: f"{p.group('k')}{MASK}\"", body)
    return m.group(0) if masked == body else f"{m.group(0)[:m.start('body') - m.start()]}{masked}}}"


def _json_data_alone(m: re.Match[str]) -> str:
    """A `"data"`/`"stringData"` object with no `"kind"` to say whose: hidden as a Secret's when it is one by its
    look (see `_BASE64`), else kept as it is."""
    body = m.group("body")
    pairs = list(_JSON_PAIR.finditer(body))
    if not pairs or _JSON_PAIR.sub("", body).strip(" \t\r\n,"):
        return m.group(0)  # not a flat object of strings
    values = [p.group("v") for p in pairs]
    if all(v == MASK for v in values):
        return m.group(0)
    if m.group(0)[1:11] != "stringData":
        if not all(v == MASK or _BASE64.fullmatch(v) for v in values):
            return m.group(0)
        names = [p.group("k").rsplit(":", 1)[0].strip(" \t\r\n")[1:-1] for p in pairs]
        if not any(is_secret_name(n) and n.strip("-.").lower() not in _WEAK_NAMES for n in names):
            return m.group(0)
    return _json_secret_data(m)


def _redact_login_tools(text: str) -> str:
    """Mask the password or key given to a login tool (see `_LOGIN_TOOL`); linear: each tool word's arguments
    are read once and the next search starts after them."""
    spans: list[tuple[int, int]] = []
    pos = 0
    while True:
        m = _LOGIN_TOOL.search(text, pos)
        if m is None:
            break
        args: list[tuple[str, int, int]] = []  # (argument, start, end) of its text inside any quotes
        pos = m.end()
        while len(args) < 64:
            a = _TOOL_ARG.match(text, pos)
            if a is None:
                break
            group = next(g for g in ("dq", "sq", "w") if a.group(g) is not None)
            args.append((a.group(group), a.start(group), a.end(group)))
            pos = a.end()
        spans.extend(_login_secrets(m.group("tool"), args))
        if m.group("tool") in _MYSQL_TOOLS:
            spans.extend(_mysql_quoted_password(text, args))
        pos = max(pos, m.end())
    if not spans:
        return text
    out: list[str] = []
    copied = 0
    for start, end in sorted(spans):
        if start < copied or text[start:end] in ("", MASK):
            continue
        out.append(text[copied:start])
        out.append(MASK)
        copied = end
    out.append(text[copied:])
    return "".join(out)


def _mysql_quoted_password(text: str, args: list[tuple[str, int, int]]) -> list[tuple[int, int]]:
    """`mysql -p'S3cret'` / `-p"S3cret"`: the quoted password glued to `-p` (the argument scan stops at its quote)."""
    for word, _, end in args:
        if word == "-p" and text[end:end + 1] in ("'", '"'):
            close = text.find(text[end], end + 1, _ahead(text, end + 1))
            if close > end + 1:
                return [(end + 1, close)]
    return []


def _login_secrets(tool: str, args: list[tuple[str, int, int]]) -> list[tuple[int, int]]:
    """The spans of the secrets among a login tool's arguments."""
    words = [a[0] for a in args]
    spans: list[tuple[int, int]] = []
    if tool in _CONTAINER_TOOLS:
        if "login" not in words:
            return spans  # `docker run -p 8080:80`
        for i in range(words.index("login") + 1, len(words)):
            word, start, end = args[i]
            if word in ("-p", "--password") and i + 1 < len(args):
                spans.append(args[i + 1][1:])
            elif word.startswith(("-p=", "--password=")):
                spans.append((start + word.index("=") + 1, end))
            elif word.startswith("-p") and not word.startswith("--") and len(word) > 2:
                spans.append((start + 2, end))  # `-pSECRET`
    elif tool == "sshpass":
        i = 0
        while i < len(words):
            word, start, end = args[i]
            if word == "-p" and i + 1 < len(args):
                spans.append(args[i + 1][1:])
                i += 1
            elif word.startswith("-p"):
                spans.append((start + 2, end))
            elif word in ("-f", "-d", "-P"):
                i += 1
            elif not word.startswith("-"):
                break  # the command sshpass runs: `ssh -p 2222` is a port
            i += 1
    elif tool in _MYSQL_TOOLS:
        for word, start, end in args:
            if word.startswith("-p") and not word.startswith("--") and len(word) > 2:
                spans.append((start + 2, end))  # `-pS3cret`; `-p` alone prompts
            elif word.startswith("--password="):
                spans.append((start + len("--password="), end))
    elif tool == "redis-cli":
        for i, word in enumerate(words[:-1]):
            if word == "-a":
                spans.append(args[i + 1][1:])
    elif tool == "wandb" and words[:1] == ["login"]:
        i = 1
        while i < len(words):
            word = words[i]
            if word in _WANDB_VALUED:
                i += 2
                continue
            if not word.startswith("-"):
                spans.append(args[i][1:])  # `wandb login [OPTIONS] KEY`
                break
            i += 1
    return spans


def _xml_element(m: re.Match[str]) -> str:
    tag, value = m.group("tag"), m.group("v")
    if not value.strip() or value.strip() == MASK:
        return m.group(0)
    secret = is_secret_name(tag)
    if not secret and tag.lower() == "value":  # Hadoop/Spark's <property><name>…</name><value>…</value>
        text, start = m.string, m.start()
        names = list(_XML_NAME.finditer(text, max(0, start - 256), start))
        secret = bool(names) and is_secret_name(names[-1].group("n"))
    if not secret:
        return m.group(0)
    return f"{m.group(0)[:m.start('v') - m.start()]}{MASK}</{tag}>"


def _flag(m: re.Match[str]) -> str:
    if not is_secret_flag(m.group("flag")) or m.group("value") == MASK:
        return m.group(0)
    quote = m.group("value")[0] if m.group("value")[0] in "\"'" else ""
    if quote:
        return f"{m.group('flag')}{m.group('sp')}{quote}{MASK}{quote}"
    return _mask_word(m, "value")


def _grep_context(m: re.Match[str]) -> str:
    name = m.group("file").rpartition("/")[2]
    if _log_file(name) or name.lower().endswith(".py") or m.group("rest").startswith(MASK):
        return m.group(0)
    return f"{m.group('file')}-{MASK}"


def _line_prefix(text: str, start: int) -> str | None:
    """The text between the start of the line and `start`, or None when that is over 256 characters (bounded:
    a megabyte line of `a=a=…` must not copy its prefix once per name)."""
    low = max(0, start - 256)
    newline = text.rfind("\n", low, start)
    if newline < 0 and low > 0:
        return None
    return text[newline + 1:start]


# A closing bracket and its opener: `f(token=abc)`
_OPENER = {")": "(", "]": "[", "}": "{"}


def _value_end(text: str, start: int, end: int, words: bool = False) -> int:
    """The end of the unquoted secret value text[start:end] without the text's punctuation after it: closing
    brackets whose openers stand before the value on its line and are not inside it (`f(token=abc)`,
    `$(cmd --password abc)`, `[key=abc]`), and, where the value is a shell word (`words`), a `,` or `;` that ends it
    (`cmd --password abc; ls`). A secret that itself ends in one of these shows that one character, only where the
    text around it gives it that reading; the rest stays hidden."""
    if start >= end or text[end - 1] not in (",;)]}" if words else ")]}"):
        return end
    low = max(0, start - 256)
    low = max(low, text.rfind("\n", low, start) + 1)
    # openers left open before the value (counted, not paired: `)(` counts none, never more than are open)
    depth = {o: max(0, text.count(o, low, start) - text.count(c, low, start)) for c, o in _OPENER.items()}
    if not any(depth.values()) and not words:
        return end
    # closers the value leaves open (`a(b))` has one): only those may be the text's
    unmatched = {c: text.count(c, start, end) - text.count(o, start, end) for c, o in _OPENER.items()}
    while end > start:
        c = text[end - 1]
        if words and c in ",;":
            end -= 1
        elif c in _OPENER and depth[_OPENER[c]] and unmatched[c] > 0:
            depth[_OPENER[c]] -= 1
            unmatched[c] -= 1
            end -= 1
        else:
            break
    return end


def _entry_name_is_secret(text: str, start: int, end: int) -> bool:
    """For a `value` key at text[start:end]: is the `name` of its entry secret? Looked for on its own line
    (before it, then after it: `{name: X, value: y}`, `{"value": y, "name": X}`), then on the line before
    (`- name: X\\n  value: y`), then on the line after. Each window is at most 256 characters, and stops at a `}`
    that closes another entry (`{name: API_TOKEN,\\n value: x}, {name: MODE, ...}`)."""
    line_start, line_end = _back(text, start), _ahead(text, end)
    windows = [(line_start, start, True), (end, line_end, False)]
    if line_start and text[line_start - 1] == "\n":
        windows.append((_back(text, line_start - 1), line_start - 1, True))
    if line_end < len(text) and text[line_end] == "\n":
        windows.append((line_end + 1, _ahead(text, line_end + 1), False))
    for lo, hi, nearest_last in windows:
        # only this entry's mapping: not a `{name: MODE, ...}` closed before it or opened after its `}`
        if nearest_last:
            lo = max(lo, text.rfind("}", lo, hi) + 1)
        else:
            close = text.find("}", lo, hi)
            hi = hi if close < 0 else close
        if text.find("ame", lo, hi) < 0 and text.find("AME", lo, hi) < 0:  # no `name` here: skip the regex
            continue
        found = None
        for m in _ENTRY_NAME.finditer(text, lo, hi):
            found = m
            if not nearest_last:
                break
        if found is not None:
            return is_secret_name(found.group("n"))
    return False


def _back(text: str, pos: int) -> int:
    """The start of the line that holds `pos`, at most 256 characters back."""
    low = max(0, pos - 256)
    newline = text.rfind("\n", low, pos)
    return newline + 1 if newline >= 0 else low


def _ahead(text: str, pos: int) -> int:
    """The end of the line that holds `pos` (its "\\n"), at most 256 characters ahead."""
    high = min(len(text), pos + 256)
    newline = text.find("\n", pos, high)
    return newline if newline >= 0 else high


def _secret_in_text(name: str, text: str, m: re.Match[str], key_refs: bool = True) -> bool:
    """Whether the value after this name is secret: by the name, by the entry's `name` for a `value` key,
    and `Pwd=` whose value is no directory. `key_refs`: whether the text may hold a `secretKeyRef` at all."""
    key = name.strip("-.")
    if is_secret_name(key):
        if key == "key" and key_refs and _key_ref_field(text, m):
            return False  # `secretKeyRef: {name: db-secret, key: password}`: the name of a Secret's key
        if _file_message(name, text, m):
            return False  # `my-secret.yaml: invalid YAML: ...`: a message about the file, scanned on
        if key.upper() in _PLURAL_COUNTS and _COUNT_VALUE.match(text, m.end()):
            return False  # `tokens: 131072`, `keys: 1024`
        weak = key.lower()  # the whole name: `api.key:123`, `private.key:9` (a file's grep line) stay hidden
        if weak in _WEAK_NAMES:
            value_at = m.end()
            if _SWITCH_VALUE.match(text, value_at):
                return False  # `auth: enabled`, `private: false`
            status = key in ("PASS", "XPASS") and "=" not in m.group("sep")
            if (weak not in ("pass", "xpass") or status) and _SMALL_COUNT.match(text, value_at):
                return False  # `session: 3`, `# PASS:  2`
            if status:
                rest = text[m.end():m.end() + 512].split("\n", 1)[0].strip()
                if _TEST_ID.match(rest):
                    return False  # `PASS: test_alloc`
        if m.start() and text[m.start() - 1] == "#" and _only_tokens(key) and _COUNT_VALUE.match(text, m.end()):
            return False  # a count sign before it and a number after (sglang's `#token: 307721`): a count
        if key.rpartition(".")[2].upper().lstrip("_") in _BARE_WORDS:
            # `PASS: in-quota allocation succeeded`, `=== After backward pass ===`, `Key: avg_train_loss, Value: 0.86`,
            # `key = torch.randn(B, H, S)`, `self._session = tf_session.TF_NewDeprecatedSession(opts, status)`: a
            # bare word with words after it; a secret under it is one word, or quoted
            rest = text[m.end():m.end() + 256].split("\n", 1)[0].strip()
            return (rest[:1] in ("'", '"') or (bool(rest) and " " not in rest and any(c.isalnum() for c in rest))
                    or _looks_like_token(rest.split(" ", 1)[0]))
        return True
    if key.lower() == "value":
        return _entry_name_is_secret(text, m.start(), m.end())
    return key.upper() in _DIRECTORY_NAMES and not _DIRECTORY_VALUE.match(text, m.end())


# A Kubernetes env entry's `valueFrom: secretKeyRef:` (or `configMapKeyRef:`) names a Secret and one of its keys
# (`{name: db-secret, key: password}`): both are names, the value stays in the Secret. From the reference to its
# `key`: a flow mapping (or JSON object) not closed before it, or a YAML block whose lines up to it are its own.
_KEY_REF = re.compile(r"(?:secret|configMap)KeyRef[\"']?[ \t]{0,16}:[ \t]{0,16}"
                      r"(?:(?P<flow>\{[^{}]{0,512})|(?:#[^\r\n]{0,256})?\r?\n(?P<block>[^{}]{0,512}))")
_KEY_REF_NAMES = ("secretKeyRef", "configMapKeyRef")
# The value of such a `key`: a Secret's key name (letters, digits, `-`, `_`, `.`), quoted or not, to its end
_KEY_REF_VALUE = re.compile(r"(?P<q>[\"']?)(?P<v>[A-Za-z0-9._\-]{1,253})(?P=q)(?=[ \t]*(?:[,}\r\n#]|\Z))")
_HEX_WORD = re.compile(r"[0-9A-Fa-f]{16,}")


def _key_ref_field(text: str, m: re.Match[str]) -> bool:
    """Whether the `key` at `m` is a field of a `secretKeyRef`/`configMapKeyRef` and its value a key's name (a
    value that looks like a token stays hidden: no key is named so)."""
    start = m.start()
    found = text.rfind("KeyRef", max(0, start - 600), start)
    if found < 0:
        return False
    v = _KEY_REF_VALUE.match(text, m.end())
    if v is None or not _key_name(v.group("v")):
        return False
    ref = next((found + 6 - len(n) for n in _KEY_REF_NAMES if text.startswith(n, found + 6 - len(n))), -1)
    if ref < 0 or (ref and (text[ref - 1].isalnum() or text[ref - 1] in "_.-")):
        return False
    r = _KEY_REF.match(text, ref, start)
    if r is None or r.end() != start:
        return False
    # the lines from the reference's to the key's are its own: more indented than the reference (a flow mapping
    # wrapped over lines, pretty JSON, a block mapping's lines); a block's `key` starts its line
    column = ref - (text.rfind("\n", 0, ref) + 1)
    flow = r.group("flow") is not None
    lines = (r.group("flow") or r.group("block") or "").split("\n")
    if flow:
        lines = lines[1:]  # the first is the rest of the reference's own line
    for i, line in enumerate(lines):
        body = line.lstrip(" \t")
        if i == len(lines) - 1 and not flow and body not in ("", '"', "'"):
            return False  # `secretKeyRef:\n  name: x key: y`: no block mapping's key
        if (body.strip() and not body.startswith("#") or i == len(lines) - 1) and len(line) - len(body) <= column:
            return False
    return True


def _key_name(value: Any) -> bool:
    """A Secret's or ConfigMap's key name, or its own name, as a reference holds it (no token by its look)."""
    return (isinstance(value, str) and _KEY_REF_VALUE.fullmatch(value) is not None and not _looks_like_token(value)
            and not _HEX_WORD.fullmatch(value) and redact_text(value) == value)


def _file_message(name: str, text: str, m: re.Match[str]) -> bool:
    """`FILE: message` (`pod-and-secret.yaml: invalid YAML: found ...`, `db_password.txt: Permission denied`): a file
    named with a secret word, a colon, a space and words, as an error message names its file. Not grep's
    `db_password.txt:hunter2` (no space), nor a Secret's data entry `credentials.json: eyJ...` (one word)."""
    sep = m.group("sep")
    if m.group("nq") or not sep.startswith(":") or sep == ":" or not _FILE_LINE.search(name):
        return False
    rest = text[m.end():_ahead(text, m.end())]
    if rest[:1] in ("\"", "'") or len(rest.split(None, 2)) < 2:
        return False
    word = _TOKEN_WORD.match(rest)  # `password.txt: Zq9planted0 0`: the file's content starts with a token
    return word is None or not (any(c.isdigit() for c in word.group(0)) and any(c.isalpha() for c in word.group(0)))


def _looks_like_token(word: str) -> bool:
    """A word no prose starts with: 8 characters or more mixing digits, upper and lower case (`session: Zq9x7Kf2a
    then words` is a session id, while `Key: avg_train_loss, ...` and `PASS: in-quota ...` read as prose)."""
    w = word.rstrip(",;.")
    return (len(w) >= 8 and any(c.isdigit() for c in w) and any(c.isupper() for c in w)
            and any(c.islower() for c in w))


# Words one of which every name that can be secret holds (`_secret_in_text`: a secret name by `_SECRET_NAME`, a
# `value` whose entry names a secret, `PWD`), in lower case. A test checks them against `_SECRET_NAME`.
_NAME_HINTS = ("token", "key", "secret", "pass", "pw", "cred", "auth", "private", "session", "cookie", "pat", "sig",
               "dsn", "pin", "otp", "mfa", "2fa", "dockerc", "value")
_NAME_HINT = re.compile("|".join(_NAME_HINTS).encode())
_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
_NAME_RUN = re.compile(r"[A-Za-z0-9_.\-]*")


def _next_hinted_name(text: str, lowered: bytes, low: int, pos: int) -> tuple[int, int] | None:
    """The start and the end of the first run of name characters that holds a hint word at or after `pos` (a run
    that starts before `pos` is returned too: the caller skips it); None when there is none. A colon-rich log
    (`2024-01-01 12:00:00: INFO: a: b: c`) has a name every few characters and none of them can be secret: judging
    each one in Python cost a third of a second a MiB; here one regex finds the hint words in `lowered`, the text's
    ASCII lower case (`encode("ascii", "replace")`: one byte a character, so the offsets are the text's), and only
    their runs are read. A name is a whole run (nothing in `_HEAD`'s `nq` or `sep` can continue one), so the heads
    found at these starts are the ones a scan of every name would judge secret. `low` is where the last run read
    ended: no run is walked back over twice."""
    h = _NAME_HINT.search(lowered, pos)
    if h is None:
        return None
    i = start = h.start()
    while start > low and text[start - 1] in _NAME_CHARS:
        start -= 1
    return start, max(i + 1, _NAME_RUN.match(text, i).end())


def _redact_assignments(text: str) -> str:
    """Mask the value after every secret name. A harmless name's value is not skipped: the scan goes on right
    after its separator, so `A= PGPASSWORD=x`, `db = connect(password="x")` and `config.ini:3:password = x`
    are found (the scan is linear: each step starts after the last)."""
    out: list[str] = []
    copied = 0
    pos = run_end = 0
    lowered = text.encode("ascii", "replace").lower()
    key_refs = "KeyRef" in text
    while (run := _next_hinted_name(text, lowered, run_end, pos if pos > run_end else run_end)) is not None:
        start, run_end = run
        if start < pos:
            continue  # a name that starts inside a value just masked
        m = _HEAD.match(text, start)
        if m is None:
            continue
        pos = m.end()
        name = m.group("name")
        if m.group("sep") == ":" and text.startswith(":", pos) and _FILE_LINE.search(name):
            continue  # a pytest node id, `password_reset_test.py::test_flow PASSED`: no assignment
        if not _secret_in_text(name, text, m, key_refs):
            continue
        span = _secret_value(text, m)
        if span is None:
            continue
        vstart, vend, keep_to = span
        if keep_to is not None:  # a log's FILE:LINE: readable, go on after it
            pos = keep_to
            continue
        out.append(text[copied:vstart])
        mask = (_yaml_mask(text[vstart:vend], m.group("nq")) if vstart == m.end() and _yaml_value(text, m, vend)
                else MASK)
        out.append(mask)
        if text.find("\n", vstart, vend) >= 0:
            out.append(_kept_lines(text, vstart, vend, mask))  # a value over lines keeps them
        copied = pos = vend
    if not out:
        return text
    out.append(text[copied:])
    return "".join(out)


def _kept_lines(text: str, vstart: int, vend: int, mask: str) -> str:
    """The line breaks of a masked value text[vstart:vend], kept (line numbers stay); where the text goes on after
    the value on its last line (`  planted, mode: x}` of a wrapped flow mapping), that line's indentation too."""
    n = text.count("\n", vstart, vend) - mask.count("\n")
    if n <= 0:
        return ""
    last = text.rfind("\n", vstart, vend) + 1
    indent = text[last:vend]
    indent = indent[:len(indent) - len(indent.lstrip(" \t"))]
    goes_on = text[vend:vend + 1] not in ("", "\n", "\r")
    return "\n" * n + (indent if goes_on else "")


_QUOTED_MASKS = (f"'{MASK}'", f'"{MASK}"')
# A YAML flow mapping's entry before the value: `{reason: OOMKilled, token: ` (an unclosed `{` on the line)
_YAML_LINE_LEAD = re.compile(r"[ \t]*(?:-[ \t]+){0,16}[\"']?\Z")
_FLOW_OPEN = re.compile(r"\{[^{}\r\n]{0,1024}\Z")


def _plain_end(text: str, column: int, end: int) -> int:
    """The end of a YAML plain scalar at `end` of its key's line: its next lines, more indented than the key at
    `column` (`password: two\\n    words`, wrapped by a YAML writer), go on with it; at most 64 lines."""
    for _ in range(64):
        newline = end + len(text[end:end + 64]) - len(text[end:end + 64].lstrip(" \t\r"))
        if not text.startswith("\n", newline):
            break
        line = text[newline + 1:_ahead(text, newline + 1)].rstrip("\r")
        body = line.lstrip(" \t")
        if not body or len(line) - len(body) <= column or body.startswith("#"):
            break
        end = newline + 1 + len(line.rstrip(" \t"))
    return end


def _flow_end(text: str, start: int, line_end: int) -> int:
    """The end of a flow collection that starts at `start` (`{password: \\n  x}` goes on to the next lines): its
    closing bracket, within 64 KiB, else the line's end."""
    depth = 0
    quote = ""
    for i in range(start, min(len(text), start + (1 << 16))):
        c = text[i]
        if quote:
            quote = "" if c == quote else quote
        elif c in "\"'":
            quote = c
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return max(i + 1, line_end)
    return line_end


def _collection_end(text: str, start: int) -> int | None:
    """The end of the flow collection that starts at text[start] (a `[` or `{`) as a whole value: its brackets nest
    and what follows it ends the value (`,`, `}`, `]`, a comment or the line's end); None for anything else
    (`[}x`, `[]Zq9x}`: the value goes on past the bracket)."""
    close = _flow_end(text, start, start + 1)
    if close <= start + 1 or not _nests(text[start:close]):
        return None
    after = text[close:_ahead(text, close)].lstrip(" \t\r")
    return close if after[:1] in ("", ",", "}", "]", "#") else None


def _nests(value: str) -> bool:
    """Whether the brackets of `value` (outside quotes) close in the order they opened: `[a, {b: c}]`, not `[}`."""
    stack: list[str] = []
    quote = ""
    for c in value:
        if quote:
            quote = "" if c == quote else quote
        elif c in "\"'":
            quote = c
        elif c in "[{":
            stack.append("]" if c == "[" else "}")
        elif c in "]}" and (not stack or stack.pop() != c):
            return False
    return not stack


def _open_flow_closers(text: str, start: int, value: str) -> int:
    """How many characters at the end of a YAML line's value close a flow collection opened on a line before it
    (`{api_key: x,\\npassword: y}`: the `}`), not the value's own."""
    n = len(value) - len(value.rstrip("}] \t"))
    if n == 0 or value.count("{") + value.count("[") >= value.count("}") + value.count("]"):
        return 0
    before = text[max(0, start - 4096):start]
    if before.count("{") + before.count("[") <= before.count("}") + before.count("]"):
        return 0
    return n


def _yaml_mask(value: str, quote: str) -> str:
    """A whole YAML value hidden: a one-line flow collection keeps its shape (`{name: '***', key: '***'}`)."""
    return _mask_flow(value, False) or _quoted_mask(quote)


def _yaml_value(text: str, m: re.Match[str], vend: int) -> bool:
    """Whether the unquoted value masked after `name:` is a whole YAML (or JSON) value, which `***` alone would
    make invalid (an alias): on a YAML line (`password: x`, `- token: x`, `"pin": 1234,`) to its end, or in a
    flow mapping (`{token: x, ...}`) to its `,` or `}`."""
    sep = m.group("sep")
    if sep.strip() != ":" or not (sep[-1] in " \t" or m.group("nq").startswith('"')):
        return False  # YAML's `key:value` is one word, no mapping (grep's `db_password.txt:hunter2`)
    prefix = _line_prefix(text, m.start())
    if prefix is None:
        return False
    after = text[vend:_ahead(text, vend)].lstrip(" \t").rstrip("\r")
    if _YAML_LINE_LEAD.match(prefix):  # not grep's `FILE:LINE:` before it: that line is no YAML
        return after[:1] in ("", ",", "}", "]", "#")
    if after[:1] not in (",", "}", "]", ""):
        return False
    if _FLOW_OPEN.search(prefix):
        return True
    return _open_flow(text, m.start())


def _wrapped_flow_value(text: str, m: re.Match[str], prefix: str) -> int | None:
    """The end of the value of a key that starts a line inside a flow mapping wrapped over lines (`env: {A: 1,\\n
    PASSWORD: x, B: 2}`): to its `,`, `}` or `]`, on the next lines too where a YAML writer wrapped the scalar; not
    the line's end, which would take the mapping's next entries or its `}` with it (the YAML no longer parsed).
    Only where the line before ends the previous entry or opens the mapping (`,`, `{`, `[`) and a bracket is still
    open: a log line is read as before, to its end. None where it is no such key; its own start where its value
    is already masked."""
    if not _wrapped_flow_key(text, m.start(), prefix):
        return None
    end = m.end()
    if (vpos := _flow_value_start(text, end)) > end:
        span = _next_line_value(text, end, vpos)
        return end if span is None else span[1]
    if text[end:end + 1] in ("[", "{"):
        close = _collection_end(text, end)
        return close if close is not None else None
    v = _V_FLOW.match(text, end)
    if v is None:
        return None
    after = text[v.end():_ahead(text, v.end())].lstrip(" \t\r")
    if after[:1] not in (",", "}", "]"):
        return None
    return end if v.group(0) == MASK or v.group(0) in _QUOTED_MASKS else v.end()


def _wrapped_flow_key(text: str, start: int, prefix: str) -> bool:
    """Whether the key at `start`, after `prefix` on its line, starts a line of a flow mapping wrapped over lines:
    only blanks before it, the line before ends an entry or opens the mapping (`,`, `{`, `[`), and a bracket opened
    before it is still open."""
    if not _YAML_LINE_LEAD.match(prefix) or "-" in prefix:
        return False
    last = start - len(prefix) - 2  # the line before's last character
    while last >= 0 and text[last] in " \t\r":
        last -= 1
    return last >= 0 and text[last] in ",{[" and _open_flow(text, start)


_LINE_BREAK = re.compile(r"[ \t]{0,256}\r?\n[ \t]{0,256}(?=\S)")


def _flow_value_start(text: str, end: int) -> int:
    """Where the value after a flow mapping's `key:` starts: past a line break a YAML writer put before it."""
    b = _LINE_BREAK.match(text, end)
    return b.end() if b and text[b.end()] not in ",}]#" else end


def _next_line_value(text: str, end: int, vpos: int) -> tuple[int, int, None] | None:
    """A flow mapping's value that starts on the line after its key (at `vpos`): quoted, a collection, or a plain
    scalar to its `,`, `}` or `]`. The span starts at the key's separator, so that the line break goes with it."""
    q = _V_QUOTED.match(text, vpos)
    if q:
        group = next(g for g in ("dq", "sq", "eq") if q.group(g) is not None)
        return None if q.group(group) == MASK else (end, q.end(), None)
    if text[vpos] in "[{":
        close = _collection_end(text, vpos)
        return end, _ahead(text, vpos) if close is None else close, None
    v = _V_FLOW.match(text, vpos)
    if v is None:
        return end, _ahead(text, vpos), None  # no `,` or `}` after it: its line, hidden
    return None if v.group(0) == MASK else (end, v.end(), None)


def _open_flow(text: str, start: int) -> bool:
    """Whether a flow collection opened before `start` (up to 4 KiB back, a wrapped `{a: 1,\\nb: 2}`) is still open."""
    low = max(0, start - 4096)
    if text.rfind("{", low, start) < 0 and text.rfind("[", low, start) < 0:
        return False  # no bracket at all (most lines of most logs): no copy, no counting
    before = text[low:start]
    return before.count("{") + before.count("[") > before.count("}") + before.count("]")


# An environment variable set in a shell (`HF_TOKEN=hf_x python train.py`): an ALL_CAPS name with an underscore, at the line's start or
# after a blank, `=` and an unquoted value. The shell ends that value at a blank, so the `;`-terminated field of a
# connection string is not read there (a walkthrough, session 27: `HF_TOKEN=hf_x RuntimeError: CUDA out of memory.
# Tried to allocate 20.00 MiB (GPU 0; ...` was masked to the `;`, the OOM message with it).
_ENV_NAME = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\Z")  # with an underscore: no connection-string key (PWD, UID)


def _shell_word(text: str, m: re.Match[str]) -> bool:
    start = m.start()
    return (m.group("sep") == "=" and not m.group("nq") and _ENV_NAME.match(m.group("name")) is not None
            and (start == 0 or text[start - 1] in " \t\r\n"))


def _secret_value(text: str, m: re.Match[str]) -> tuple[int, int, int | None] | None:
    """Where the value after a secret name is: (start, end, None) to mask, (_, _, end) for a log's FILE:LINE to
    keep, or None when there is nothing to mask (no value on the line, or already masked)."""
    name, sep, end = m.group("name"), m.group("sep"), m.end()
    if not m.group("nq") and sep == ":" and _FILE_LINE.search(name):
        line = _LINE_NO.match(text, end)
        if line and _log_file(name):
            return 0, 0, line.end()  # `monkey.log:3`
        if name.lower().endswith(".py"):
            if line:  # a warning's `_token.py:88: UserWarning`: only the number, as before
                return end, line.end(), None
        elif (line is not None and text.startswith((":", "-"), line.end())) or (
                (prefix := _line_prefix(text, m.start())) is not None and _PATH_ONLY.match(prefix)):
            # grep's output of a secret file (`secrets.yaml:12:password: x`, `db_password.txt:hunter2`): the
            # rest of the line is the file's content
            v = _V_LINE.match(text, end)
            return (end, end + len(v.group(0).rstrip()), None) if v and v.group(0).strip() else None
    q = _V_QUOTED.match(text, end)
    if q:
        group = next(g for g in ("dq", "sq", "eq") if q.group(g) is not None)
        value, vstart = q.group(group), q.start(group)
        return None if not value or value == MASK else (vstart, vstart + len(value), None)
    if _HEADER_NAME.search(name):
        opener = text[m.start() - 1] if m.start() and text[m.start() - 1] in "\"'" else ""
        v = _V_HEADER[opener].match(text, end)
        if not v:
            return None
        value = v.group(0).rstrip()
        scheme = _SCHEME.match(value)
        vstart = end + (scheme.end() if scheme else 0)
        vend = _value_end(text, vstart, end + len(value))
        return None if vend <= vstart or text[vstart:vend] == MASK else (vstart, vend, None)
    prefix = None
    if ":" in sep or sep != "=":  # `key: value`, `key = value`: a YAML or ini line's value runs to its end
        prefix = _line_prefix(text, m.start())
    if prefix is not None and _LINE_START.match(prefix):
        line_start = m.start() - len(prefix)  # (the line before must end in `,`, `{` or `[`: a first, cheap look)
        wrapped = (_wrapped_flow_value(text, m, prefix) if sep.strip() == ":" and line_start > 1
                   and text[line_start - 2] in ",{[ \t\r" else None)
        if wrapped is not None:
            return (end, wrapped, None) if wrapped > end else None
        v = _V_LINE.match(text, end)
        value = v.group(0).rstrip(" \t,") if v else ""  # a JSON line's `12345,` keeps its comma
        if ":" in sep and _YAML_BLOCK_INDICATOR.match(value):
            return None  # `token: |`: its lines are the block's (`_redact_yaml_blocks`), the indicator no secret
        if value and value != MASK and value not in _QUOTED_MASKS and not value.startswith(MASK + "@"):
            if ":" in sep and value[0] in "{[":
                close = _flow_end(text, end, end + len(value))
                if close > end + len(value) and text[close:_ahead(text, close)].lstrip(" \t\r")[:1] not in (
                        "", ",", "}", "]", "#"):
                    close = _ahead(text, close)  # `token: [a,\n  b]x`: the value goes on past its bracket
                return end, close, None
            if ":" in sep and sep[-1] in " \t" and _YAML_LINE_LEAD.match(prefix):
                return end, _plain_end(text, len(prefix), end + len(value)), None
            return end, end + len(value) - _open_flow_closers(text, m.start(), value), None
        return None
    if sep.strip() == ":" and prefix is not None and (_FLOW_OPEN.search(prefix) or _open_flow(text, m.start())):
        # `{password: two words, ...}`: a flow mapping's value runs to its `,` or `}` (on the next line only where
        # the mapping opened on this one)
        if (vpos := _flow_value_start(text, end)) > end:  # `{password:\n    x}`: wrapped before its value
            return _next_line_value(text, end, vpos)
        if text[end:end + 1] in ("[", "{"):  # `{token: [a, b]}`: the nested collection whole (its `, b` leaked)
            line_end = text.find("\n", end)
            close = _collection_end(text, end)
            if close is None:  # `{token: [}x}`, `{token: []x}`: no collection, hide the line's rest
                close = len(text) if line_end < 0 else line_end
            return end, close, None
        v = (_V_FLOW if _FLOW_OPEN.search(prefix) else _V_FLOW_LINE).match(text, end)
        if v is None:  # `{a: 1,\n b: 2, password: two\nwords}`: a scalar a YAML writer wrapped, to its `,` or `}`
            v = _V_FLOW.match(text, end)
            v = v if v and v.group(0).count("\n") <= 8 else None
        after = text[v.end():_ahead(text, v.end())].lstrip("}] \t\r") if v else ""
        v = v if after[:1] in ("", ",") else None  # `{token: 0}Zq9}`: the value goes on past the `}`
        if v and v.group(0) != MASK and v.group(0) not in _QUOTED_MASKS:
            return end, end + len(v.group(0)), None
    f = None if _shell_word(text, m) else _V_FIELD.match(text, end)
    if f and f.group(0).strip() and f.group(0).strip() != MASK:
        vend = _value_end(text, end, end + len(f.group(0).rstrip()))
        value = text[end:vend].strip()
        return (end, vend, None) if value and value != MASK else None
    w = _V_WORD.match(text, end)
    if not w:
        return None
    vend = _value_end(text, w.start("w"), w.end("w"))
    value = text[w.start("w"):vend]
    if not value or value == MASK or value.startswith(MASK + "@"):
        return None
    return w.start("w"), vend, None


def _redact_yaml_blocks(text: str, secret_kind: bool = False) -> str:
    """A secret-named YAML key alone on its line hides the more indented lines below it: a block scalar's lines
    (`token: |`), a plain scalar continued on the next line (`password:\n  hunter2`), a mapping or a list under it.
    In a text that holds a `kind: Secret`, its `data:`/`stringData:` blocks too. The text stays valid YAML, with
    the same keys (a manifest in a bundle is read back; `***` alone would be an alias): a value becomes `'***'`, a
    block scalar's line `***`, a key that may itself be the secret (`api_keys:\n  abc123: service-a`, a map keyed
    by its tokens; not a Secret's data keys, which are file names) a comment `# ***` with its lines below."""
    out: list[str] = []
    copied = 0
    pos = 0
    n = len(text)
    while True:
        m = _YAML_PARENT.search(text, pos)
        if m is None:
            break
        pos = m.end()
        name = m.group("name").strip("-.")
        data_block = secret_kind and name in _SECRET_DATA
        if pos >= n or not (data_block or is_secret_name(name)):
            continue
        if _wrapped_flow_key(text, m.start("name") - len(m.group("q")), m.group("ind")):
            continue  # `{a: 1,\n  password:\n    x}`: a flow mapping's key, its value to its `,` (`_secret_value`)
        column = len(m.group("ind")) + len(m.group("dash") or "")
        block = _BlockMask(column if m.group("block") else None, keep_keys=data_block)
        i = pos + 1  # past the parent line's "\n"
        while i < n:
            j = text.find("\n", i)
            j = n if j < 0 else j
            body = text[i:j].rstrip("\r")
            stripped = body.lstrip(" \t")
            if stripped:
                indent = len(body) - len(stripped)
                if indent < column or (indent == column and not (stripped.startswith("- ") or stripped == "-")):
                    break  # (`token:\n- x`: a list at its key's indentation is the key's value)
                new = block.line(body, indent)
                if new != body:
                    out.append(text[copied:i])
                    out.append(new)
                    copied = i + len(body)
            i = j + 1
        pos = max(pos, min(i, n))
    if not out:
        return text
    out.append(text[copied:])
    return "".join(out)


# A block mapping's entry as `_BlockMask` reads it: a key (plain, or quoted), `:`, and what follows on the line
_YAML_ENTRY = re.compile(r"(?P<k>\"(?:[^\"\\]|\\.){0,256}\"|'(?:[^']|''){0,256}'|[^\s#'\"{}\[\],&*!|>%@`][^:#]{0,255}?)"
                         r"[ \t]*:(?:[ \t]+(?P<v>.*))?\Z")
_YAML_BLOCK_INDICATOR = re.compile(r"[|>][+\-1-9]{0,2}(?:[ \t]+#.*)?\Z")
_NAME_KEY = re.compile(r"[\"']?[A-Za-z_.\-/][A-Za-z_.\-/ ]{0,63}[\"']?\Z")  # no digit: a word, not a token


class _BlockMask:
    """The lines of one hidden YAML block, masked one after another so that the block stays valid YAML."""

    def __init__(self, scalar_indent: int | None, keep_keys: bool) -> None:
        self.scalar = scalar_indent  # inside a block scalar (`key: |`): lines more indented than this are its text
        self.outer_scalar = scalar_indent is not None
        self.commented: int | None = None  # under a key hidden as a comment: lines more indented than this
        self.value: int | None = None  # a value just masked: lines more indented than this go on with it (blank)
        self.keep_keys = keep_keys

    def line(self, body: str, indent: int) -> str:
        ws = body[:indent]
        if self.scalar is not None:
            if indent > self.scalar or self.outer_scalar:
                return ws + MASK
            self.scalar = None
        if self.commented is not None:
            if indent > self.commented:
                return ws + "# " + MASK
            self.commented = None
        if self.value is not None:
            if indent > self.value:
                return ""  # a plain, quoted or flow value's next line: its text is hidden on the first line
            self.value = None
        if body.startswith("#", indent):
            return ws + "# " + MASK
        lead = _YAML_LEAD.match(body).group(0)
        item = body[len(lead):]
        if item in ("", "-"):
            return body
        entry = _YAML_ENTRY.match(item)
        if entry is None:
            # `- - abc123`: its next lines are indented past its last dash; a bare value goes on to the block's end
            self.value = len(lead.rstrip(" \t")) - 1 if len(lead) > indent else -1
            return lead + (_mask_flow(item.rstrip(" \t"), self.keep_keys) or _quoted_mask(""))
        key, value = entry.group("k"), (entry.group("v") or "").strip()
        if not (self.keep_keys or _NAME_KEY.match(key)):
            self.commented = indent
            return ws + "# " + MASK
        if not value or value.startswith("#"):
            return f"{lead}{key}:"  # a mapping or a list below it, masked line by line
        if _YAML_BLOCK_INDICATOR.match(value):
            self.scalar = indent
            return f"{lead}{key}: {value.split()[0]}"
        self.value = len(lead)
        return f"{lead}{key}: {_mask_flow(value, self.keep_keys) or _quoted_mask(key)}"


# A flow collection's scalar (quoted or plain) and what follows it: `: ` after a key
_FLOW_SCALAR = re.compile(r"(?P<s>\"(?:[^\"\\]|\\.){0,4096}\"|'(?:[^']|''){0,4096}'|[^\s,:{}\[\]#'\"][^,{}\[\]]{0,4095}?)"
                          r"(?P<after>[ \t]*(?::(?=[ \t])|(?=[,}\]])))")


def _mask_flow(value: str, keep_keys: bool) -> str | None:
    """A one-line flow collection (`{name: hf, token: x}`, `[a, b]`) with every value `'***'` and its keys kept;
    None for anything else (a scalar; a collection that goes on to the next line, or whose key may be a token)."""
    if value[:1] not in ("{", "[") or {"{": "}", "[": "]"}[value[0]] != value[-1:] or "#" in value:
        return None
    if value.count("{") != value.count("}") or value.count("[") != value.count("]"):
        return None  # `{Zq9x{}`: no collection YAML would read, a scalar to hide whole (a hypothesis find)
    bad = False

    def one(f: re.Match[str]) -> str:
        nonlocal bad
        if f.group("after").endswith(":"):
            bad = bad or not (keep_keys or _NAME_KEY.match(f.group("s")))
            return f.group(0)
        return _quoted_mask("") + f.group("after")

    masked = _FLOW_SCALAR.sub(one, value)
    if masked == value and MASK not in value and value.strip("{}[], \t"):
        return None  # something in it, but no value found to hide (and none hidden before): hide it whole
    if _FLOW_SCALAR.sub("", value).strip("{}[], \t\r\n"):
        return None  # text no scalar took (`{Zq9planted[0]}`: a word glued to a bracket): hide it whole
    return None if bad else masked


def _quoted_mask(key: str) -> str:
    """MASK as a YAML (or JSON, after a `"key"`) string: `***` alone is an alias to YAML."""
    return f'"{MASK}"' if key.startswith('"') else f"'{MASK}'"


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
    lose their `value`; a `secretKeyRef`/`configMapKeyRef` keeps its `name` and `key` (names, not values);
    every other string goes through `redact_text`.
    """
    if isinstance(doc, Mapping):
        is_secret = str(doc.get("kind", "")).lower() == "secret"
        out: dict[Any, Any] = {}
        for key, value in doc.items():
            if is_secret and key in ("data", "stringData") and isinstance(value, Mapping):
                out[key] = {k: MASK for k in value}
            elif key == "env" and isinstance(value, list):
                out[key] = [_redact_env_entry(e) for e in value]
            elif key in _KEY_REF_NAMES and isinstance(value, Mapping):
                out[key] = {k: v if k in ("name", "key") and _key_name(v) else redact_manifest({k: v})[k]
                            for k, v in value.items()}
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
