"""`estimate --model ORG/NAME` without the network: the local cache first, else one bounded try, else one line.

huggingface_hub retries a failed request five times with backoff (about 23 s, each retry a stderr line) before
transformers says it is offline; a new user waited 25 s for that (session 25). Here the hub is made unreachable
for real (HF_ENDPOINT at a local port that refuses connections) in child processes, and in-process the hub's
metadata call is replaced by one that raises the errors huggingface_hub raises.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
huggingface_hub = pytest.importorskip("huggingface_hub")

from oomdoctor.cli import main  # noqa: E402
from oomdoctor.estimate import hub  # noqa: E402

CONFIG = {"model_type": "llama", "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": True,
          "max_position_embeddings": 256}
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def refused_port():
    """A local port that refuses connections (bound, never listening): the hub 'down' at once, every time."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    yield s.getsockname()[1]
    s.close()


def _cache_with(root: Path, repo_id: str) -> Path:
    """A Hugging Face hub cache holding repo_id's config.json at main, laid out as huggingface_hub writes it."""
    repo = root / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    snap = repo / "snapshots" / COMMIT
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(CONFIG))
    return root


def _run(argv: list[str], cache: Path, port: int, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items()
            if not k.startswith("HF_") and k.lower() not in ("http_proxy", "https_proxy", "all_proxy")}
    full.update({"HF_ENDPOINT": f"http://127.0.0.1:{port}", "HF_HUB_CACHE": str(cache),
                 "HF_HOME": str(cache.parent / "hf_home"), "PYTHONWARNINGS": "ignore", **env})
    return subprocess.run([sys.executable, "-m", "oomdoctor", "estimate", *argv], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, env=full, timeout=300)


def _one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err[-3000:]
    return lines[0]


def test_an_unreachable_hub_is_one_line_after_one_try(tmp_path, refused_port):
    """Before: five 'Retrying in Ns' lines and 25 s, then transformers' message. Now one line, exit 2, that says
    the hub could not be reached and the three ways on: a local directory, the cache, HF_HUB_OFFLINE=1."""
    p = _run(["--model", "some-org/some-model", "--batch-size", "1"], tmp_path / "hub", refused_port)
    assert p.returncode == 2 and p.stdout == ""
    line = _one_line(p.stderr)
    assert line.startswith("oomdoctor estimate: some-org/some-model: ")
    assert "could not reach the Hugging Face hub" in line and "ConnectError" in line
    assert "config.json" in line and "HF_HUB_OFFLINE=1" in line and "hf download some-org/some-model" in line
    assert "Retrying" not in p.stderr and "Traceback" not in p.stderr


def test_offline_mode_without_the_model_in_the_cache_says_so(tmp_path, refused_port):
    p = _run(["--model", "some-org/some-model"], tmp_path / "hub", refused_port, HF_HUB_OFFLINE="1")
    assert p.returncode == 2
    line = _one_line(p.stderr)
    assert "HF_HUB_OFFLINE is set" in line and "not in the Hugging Face cache" in line, line


@pytest.mark.parametrize("offline", ["", "1"], ids=["hub_down", "hf_hub_offline"])
def test_a_model_in_the_cache_is_estimated_without_the_network(tmp_path, refused_port, offline):
    cache = _cache_with(tmp_path / "hub", "some-org/tiny-llama")
    p = _run(["--model", "some-org/tiny-llama", "--seq-len", "16", "--format", "json"], cache, refused_port,
             **({"HF_HUB_OFFLINE": offline} if offline else {}))
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout)
    assert out["parameter_count"] > 0 and "Retrying" not in p.stderr


# In-process: the hub's metadata call raises what huggingface_hub raises when the network is down. The installed
# version decides which of these exist (requests before huggingface_hub 1.0, httpx in 1.x, httpx2 after).
def _connection_errors() -> list:
    made = []
    for mod, names in (("httpx2", ("ConnectError", "ConnectTimeout", "ReadTimeout", "ProxyError")),
                       ("httpx", ("ConnectError", "ConnectTimeout")),
                       ("requests", ("ConnectionError", "Timeout"))):
        try:
            m = __import__(mod)
        except ImportError:
            continue
        made += [pytest.param(getattr(m, n)("[Errno -2] Name or service not known"), id=f"{mod}.{n}")
                 for n in names]
    from huggingface_hub import errors

    made += [pytest.param(errors.OfflineModeIsEnabled("offline mode is enabled"), id="OfflineModeIsEnabled"),
             pytest.param(errors.LocalEntryNotFoundError("no local file"), id="LocalEntryNotFoundError")]
    return made


@pytest.fixture
def no_cache(monkeypatch):
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda *a, **k: None)


@pytest.fixture
def pretrained(monkeypatch):
    """transformers.AutoConfig.from_pretrained, recorded: the config when reached."""
    calls: list[tuple[str, dict]] = []

    def fake(source, **kw):
        calls.append((source, kw))
        return transformers.AutoConfig.for_model(**CONFIG)

    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", fake)
    return calls


@pytest.mark.parametrize("error", _connection_errors())
def test_each_connection_error_of_the_hub_fails_fast(monkeypatch, capsys, no_cache, pretrained, error):
    tries: list[dict] = []

    def unreachable(url, **kw):
        tries.append(kw)
        raise error

    monkeypatch.setattr(huggingface_hub, "get_hf_file_metadata", unreachable)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    assert main(["estimate", "--model", "some-org/some-model"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "could not reach the Hugging Face hub" in err and type(error).__name__ in err
    assert len(tries) == 1 and pretrained == []  # one try, and transformers' retrying download never started


def test_the_one_try_is_short_has_no_retries_and_respects_hf_hub_etag_timeout(monkeypatch, no_cache, pretrained):
    """When the hub answers, the config is fetched as before (transformers' from_pretrained, unchanged)."""
    tries: list[tuple[str, dict]] = []
    monkeypatch.setattr(huggingface_hub, "get_hf_file_metadata", lambda url, **kw: tries.append((url, kw)))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    from oomdoctor.estimate import hf

    cfg = hf.load_config("some-org/some-model")
    assert cfg.model_type == "llama" and pretrained == [("some-org/some-model", {})]
    url, kw = tries[0]
    assert url.endswith("/some-org/some-model/resolve/main/config.json")
    assert kw["timeout"] == hub.PROBE_TIMEOUT_S < huggingface_hub.constants.DEFAULT_ETAG_TIMEOUT
    assert kw.get("retry_on_errors", False) is False
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_ETAG_TIMEOUT", 42)  # HF_HUB_ETAG_TIMEOUT=42 was set
    hf.load_config("some-org/some-model")
    assert tries[1][1]["timeout"] == 42


def test_a_cached_config_is_read_without_asking_the_hub(monkeypatch, tmp_path, pretrained):
    cached = tmp_path / "config.json"
    cached.write_text(json.dumps(CONFIG))
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache",
                        lambda repo_id, filename, **k: str(cached) if filename == "config.json" else None)

    def never(url, **kw):
        raise AssertionError("the hub was asked for a cached config")

    monkeypatch.setattr(huggingface_hub, "get_hf_file_metadata", never)
    from oomdoctor.estimate import hf

    assert hf.load_config("some-org/some-model").model_type == "llama"
    assert pretrained == [("some-org/some-model", {"local_files_only": True})]


def test_the_hub_saying_no_such_model_is_one_line(monkeypatch, capsys, no_cache, pretrained):
    httpx2 = pytest.importorskip("httpx2")
    from huggingface_hub.errors import RepositoryNotFoundError

    url = "https://huggingface.co/some-org/some-model/resolve/main/config.json"
    response = httpx2.Response(404, request=httpx2.Request("HEAD", url))

    def missing(url, **kw):
        raise RepositoryNotFoundError("404 Client Error. Repository Not Found for url: " + url, response=response)

    monkeypatch.setattr(huggingface_hub, "get_hf_file_metadata", missing)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    assert main(["estimate", "--model", "some-org/some-model"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Repository Not Found" in err and pretrained == []
