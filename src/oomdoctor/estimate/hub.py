"""Where a hub id's config.json comes from: the local Hugging Face cache, else the hub if it answers one try.

transformers' `AutoConfig.from_pretrained("org/name")` with no network spends about 25 s in huggingface_hub's
retries (five, with backoff, each a stderr line) before it says it is offline. Only config.json is needed here,
so: the cache first (no network at all, as transformers reads it under HF_HUB_OFFLINE=1); then, unless
HF_HUB_OFFLINE is set, one HEAD request for config.json with a short timeout and no retries; only when that
answers does transformers fetch the config as it always has. Nothing global is changed: the timeout and the
no-retry are arguments of this one request.
"""

from __future__ import annotations

import inspect
from typing import Any

from oomdoctor.errors import InputError

CONFIG_NAME = "config.json"
# The one try's timeout, seconds, unless HF_HUB_ETAG_TIMEOUT is set (huggingface_hub's default is 10, retried
# five times): a hub that answers, answers a HEAD well within it; a network that drops packets costs this once.
PROBE_TIMEOUT_S = 5


def cached_config(repo_id: str) -> bool:
    """Whether config.json of repo_id's main revision is in the local Hugging Face cache."""
    import huggingface_hub

    found = huggingface_hub.try_to_load_from_cache(repo_id, CONFIG_NAME)
    return isinstance(found, str)


def offline() -> bool:
    """HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) as huggingface_hub read it."""
    from huggingface_hub import constants

    is_offline = getattr(constants, "is_offline_mode", None)
    return bool(is_offline() if callable(is_offline) else getattr(constants, "HF_HUB_OFFLINE", False))


def probe_timeout() -> float:
    """HF_HUB_ETAG_TIMEOUT when the user set it, else PROBE_TIMEOUT_S."""
    from huggingface_hub import constants

    default = getattr(constants, "DEFAULT_ETAG_TIMEOUT", 10)
    user = getattr(constants, "HF_HUB_ETAG_TIMEOUT", default)
    return user if user != default else PROBE_TIMEOUT_S


def connection_errors() -> tuple[type[BaseException], ...]:
    """What huggingface_hub raises when the hub cannot be reached: requests' errors before huggingface_hub 1.0,
    httpx's in 1.x, httpx2's after (each transport's base class: refused, DNS, timeout, proxy, TLS), and its own
    offline-mode and not-in-cache errors."""
    found: list[type[BaseException]] = []
    for module, names in (("httpx2", ("TransportError",)), ("httpx", ("TransportError",)),
                          ("requests", ("ConnectionError", "Timeout")),
                          ("huggingface_hub.errors", ("OfflineModeIsEnabled", "LocalEntryNotFoundError")),
                          ("huggingface_hub.utils", ("OfflineModeIsEnabled", "LocalEntryNotFoundError"))):
        try:
            mod = __import__(module, fromlist=["_"])
        except ImportError:
            continue
        found += [c for c in (getattr(mod, n, None) for n in names) if isinstance(c, type)]
    return tuple(dict.fromkeys(found))


def locate_config(repo_id: str) -> bool:
    """True when repo_id's config.json is to be read from the local cache (local_files_only=True); False when
    the hub answered one bounded request for it (fetch it as usual). InputError, one line saying how to go on,
    when neither: offline mode, or the hub unreachable or refusing."""
    if cached_config(repo_id):
        return True
    if offline():
        raise InputError(f"{repo_id}: no such local path, and HF_HUB_OFFLINE is set while its {CONFIG_NAME} is "
                         f"not in the Hugging Face cache ({_cache_dir()}): {_ways_on(repo_id, offline=True)}")
    probe(repo_id)
    return False


def probe(repo_id: str) -> None:
    """One HEAD request for repo_id's config.json: a short timeout, no retries. Returns when the hub answers."""
    import huggingface_hub

    url = huggingface_hub.hf_hub_url(repo_id, CONFIG_NAME)
    timeout = probe_timeout()
    kw: dict[str, Any] = {"timeout": timeout}
    get = huggingface_hub.get_hf_file_metadata
    if "retry_on_errors" in _parameters(get):  # the versions that can retry this call say so by this argument
        kw["retry_on_errors"] = False
    try:
        get(url, **kw)
    except connection_errors() as exc:
        raise InputError(f"{repo_id}: no such local path, and could not reach the Hugging Face hub "
                         f"({_endpoint()}) to fetch its {CONFIG_NAME} ({type(exc).__name__}: {_first(exc)}; "
                         f"one try, {timeout:g} s timeout), nor is it in the Hugging Face cache ({_cache_dir()}): "
                         f"{_ways_on(repo_id)}") from None
    except Exception as exc:  # noqa: BLE001 - the hub answered: no such repo, gated, private, 5xx
        status = getattr(getattr(exc, "response", None), "status_code", None)
        said = f"HTTP {status}: " if status and str(status) not in str(exc) else ""
        raise InputError(f"{repo_id}: the Hugging Face hub would not give its {CONFIG_NAME}: {said}{_first(exc)}"
                         + (f"; {_ways_on(repo_id)}" if status is None or status >= 500 else "")) from None


def _ways_on(repo_id: str, offline: bool = False) -> str:
    return (f"give --model a directory holding {CONFIG_NAME} (or the {CONFIG_NAME} itself), or put it in the "
            f"cache where the network works (hf download {repo_id} {CONFIG_NAME})"
            + ("" if offline else " and use it here with HF_HUB_OFFLINE=1"))


def _cache_dir() -> str:
    from huggingface_hub import constants

    return str(getattr(constants, "HF_HUB_CACHE", "~/.cache/huggingface/hub"))


def _endpoint() -> str:
    from huggingface_hub import constants

    return str(getattr(constants, "ENDPOINT", "https://huggingface.co"))


def _parameters(fn: Any) -> tuple[str, ...]:
    try:
        return tuple(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return ()


def _first(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return (lines[0] if lines else type(exc).__name__)[:300]
