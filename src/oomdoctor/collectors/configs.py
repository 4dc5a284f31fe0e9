"""Read job configuration files for `audit` and validate patched manifests offline.

The only I/O of `audit`: bytes from disk (or stdin) and the Kubernetes JSON schemas that ship with
kubernetes-validate. Parsing is pure (`oomdoctor.parsers.config_file`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from oomdoctor.errors import InputError
from oomdoctor.parsers.config_file import ConfigFile, parse_config

MAX_BYTES = 20 * 1024 * 1024


def read_text(path: str) -> str:
    """UTF-8 text of a file (or `-` for stdin); InputError for missing, binary or undecodable input."""
    try:
        if path == "-":
            data = sys.stdin.buffer.read(MAX_BYTES + 1)
        else:
            with open(path, "rb") as fh:
                data = fh.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory (give the files, e.g. {path}/*.yaml)") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_BYTES:
        raise InputError(f"{path}: larger than {MAX_BYTES // 2**20} MiB, not a config file")
    if b"\x00" in data[:8192]:
        raise InputError(f"{path}: binary file, not a manifest, compose file or script")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not valid UTF-8 (byte {exc.start})") from None
    return text


def load_config(path: str) -> ConfigFile:
    return parse_config(read_text(path), "<stdin>" if path == "-" else path)


def validate_manifest(doc: dict[str, Any]) -> str | None:
    """Validate one plain-dict Kubernetes object against the bundled schemas.

    Returns None when valid or when no schema exists (CRDs such as PyTorchJob), else the error.
    """
    try:
        import kubernetes_validate
        from kubernetes_validate import utils
    except ImportError as exc:  # the `k8s` extra is not installed
        raise InputError(f"--fix needs kubernetes-validate (pip install 'oomdoctor[k8s]'): {exc}") from None
    if not isinstance(doc, dict) or "kind" not in doc or "apiVersion" not in doc:
        return None
    if doc["kind"] == "List" and isinstance(doc.get("items"), list):
        errors = [validate_manifest(item) for item in doc["items"]]
        return next((e for e in errors if e), None)
    try:
        kubernetes_validate.validate(doc, utils.latest_version(), strict=True)
    except utils.SchemaNotFoundError:
        return None
    except utils.ValidationError as exc:
        where = ".".join(str(p) for p in exc.absolute_path)
        return f"{doc.get('kind')}/{(doc.get('metadata') or {}).get('name', '?')}: {where}: {exc.message}"
    return None


def write_text(path: str, text: str) -> None:
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror or exc}") from None
