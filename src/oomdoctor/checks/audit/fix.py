"""`audit --fix`: the smallest edits that remove the fixable findings.

Kubernetes: a memory-backed /dev/shm emptyDir + volumeMount (AUD001), a sizeLimit on memory emptyDirs
(AUD003) and too-small shm volumes (AUD002), GPU requests made equal to limits or copied into limits
(AUD007). Compose: `shm_size` (AUD001/AUD002). `docker run`: `--shm-size` (AUD001/AUD002).
Everything else needs a human decision and is left alone (the report still lists it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from oomdoctor.checks.audit import gpu, storage
from oomdoctor.checks.audit.base import docker_size, k8s_size, recommended_shm, shm_volumes
from oomdoctor.checks.audit.textedit import Editor, FixUnsupported, Style, detect_style, emit, flow
from oomdoctor.parsers.config_file import ConfigFile
from oomdoctor.parsers.config_model import ContainerSpec, Workload, parse_quantity
from oomdoctor.parsers.yamldocs import YamlDoc

FIXABLE = ("AUD001", "AUD002", "AUD003", "AUD007")


@dataclass
class FixResult:
    text: str
    changes: list[str] = field(default_factory=list)
    changed_docs: list[int] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def fix_config(cfg: ConfigFile) -> FixResult:
    ed = Editor(cfg.text)
    result = FixResult(cfg.text)
    for w in cfg.workloads:
        try:
            if cfg.type == "kubernetes":
                if _fix_k8s(cfg, cfg.docs[w.doc_index], w, ed, result.changes):
                    result.changed_docs.append(w.doc_index)
            elif cfg.type == "compose":
                _fix_compose(cfg, w, ed, result.changes)
            else:
                _fix_docker(cfg, w, ed, result.changes)
        except FixUnsupported as exc:
            result.skipped.append(f"{w.label}: {exc}")
        except (KeyError, IndexError, TypeError, AttributeError, StopIteration, ValueError) as exc:
            # a shape the editor does not understand (aliases, merge keys, odd nesting): leave it to a human
            result.skipped.append(f"{w.label}: unsupported YAML shape ({type(exc).__name__})")
    if ed.changed:
        result.text = ed.apply()
    result.changed_docs = sorted(set(result.changed_docs))
    return result


def _ids(rule, w: Workload, path: str) -> dict[str, list]:
    out: dict[str, list] = {}
    for a in rule(w, path):
        out.setdefault(a.container or "", []).append(a)
    return out


def _node(data: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        data = data[key]
    return data


class _Doc:
    """Positions of one document's nodes in file lines."""

    def __init__(self, doc: YamlDoc, ed: Editor):
        self.doc, self.ed = doc, ed
        self.style = detect_style(doc.text)
        self.limit = doc.start_line + len(doc.text.splitlines())

    def abs(self, rel: int) -> int:
        return self.doc.start_line + rel

    def is_flow(self, node: Any) -> bool:
        """Flow style, read from the text: ruamel does not mark empty `[]`/`{}` as flow."""
        line = self.ed.lines[self.abs(node.lc.line)]
        return node.fa.flow_style() or line[node.lc.col:node.lc.col + 1] in ("[", "{")

    def map_end(self, m: Any) -> tuple[int, int]:
        """(last line, key column) of a block mapping."""
        if self.is_flow(m):
            raise FixUnsupported("flow-style mapping")
        first = next(iter(m))
        line, col = m.lc.key(first)
        return self.ed.block_end(self.abs(line), col, True, self.limit), col

    def add_key(self, m: Any, key: str, value: Any) -> None:
        if self.is_flow(m):
            self._add_flow(m, f"{key}: {flow(value)}")
            return
        end, col = self.map_end(m)
        self.ed.insert_after(end, emit({key: value}, col, self.style))

    def append_item(self, seq: Any, item: Mapping) -> None:
        if self.is_flow(seq):
            self._add_flow(seq, flow(item), "]")
            return
        dash = seq.lc.col
        end = self.ed.block_end(self.abs(seq.lc.line), dash, False, self.limit)
        self.ed.insert_after(end, emit([item], dash, self.style))

    def _add_flow(self, node: Any, text: str, close: str = "}") -> None:
        line = self.abs(node.lc.line)
        s = self.ed.lines[line]
        depth, pos = 0, -1
        for i in range(node.lc.col, len(s)):
            if s[i] in "{[":
                depth += 1
            elif s[i] in "}]":
                depth -= 1
                if depth == 0:
                    pos = i
                    break
        if pos < 0 or s[pos] != close:
            raise FixUnsupported(f"multi-line flow collection on line {line + 1}")
        empty = not s[node.lc.col + 1:pos].strip()
        self.ed.replace(line, pos, pos, ("" if empty else ", ") + text)

    def set_value(self, m: Any, key: str, value: str) -> None:
        line, col = m.lc.value(key)
        start, end, old = self.ed.scalar_span(self.abs(line), col)
        q = old[0] if old[:1] in ("'", '"') else ""
        self.ed.replace(self.abs(line), start, end, f"{q}{value}{q}")


def _fix_k8s(cfg: ConfigFile, doc: YamlDoc, w: Workload, ed: Editor, changes: list[str]) -> bool:
    d = _Doc(doc, ed)
    pod = _node(doc.data, w.pod_path)
    before = len(changes)
    need_shm = _ids(storage.default_shm, w, cfg.path)
    small = _ids(storage.small_shm, w, cfg.path)
    if need_shm:
        users = [c for c in w.containers if c.name in need_shm]
        size = min(recommended_shm(c) for c in users)
        name = next(n for n in ("dshm", "dev-shm", "oomdoctor-shm") if w.volume(n) is None)
        vol = {"name": name, "emptyDir": {"medium": "Memory", "sizeLimit": k8s_size(size)}}
        if isinstance(pod.get("volumes"), list):
            d.append_item(pod["volumes"], vol)
        else:
            d.add_key(pod, "volumes", [vol])
        for c in users:
            cm = _node(doc.data, c.path)
            mount = {"name": name, "mountPath": "/dev/shm"}
            if isinstance(cm.get("volumeMounts"), list):
                d.append_item(cm["volumeMounts"], mount)
            else:
                d.add_key(cm, "volumeMounts", [mount])
            changes.append(f"{w.label} container {c.name}: /dev/shm emptyDir {name} (medium Memory, sizeLimit {k8s_size(size)})")
    sized: set[str] = set()
    for c in w.containers:
        for v in shm_volumes(w, c):
            if v.type == "emptyDir" and v.medium == "Memory" and c.name in small and v.name not in sized:
                floor = 2**30
                _set_size(d, pod, v.name, k8s_size(max(recommended_shm(c), floor)))
                sized.add(v.name)
                changes.append(f"{w.label}: emptyDir {v.name} sizeLimit {v.size_raw} -> {k8s_size(max(recommended_shm(c), floor))}")
    for v in w.volumes:
        if v.type == "emptyDir" and v.medium == "Memory" and v.size_limit is None and v.name not in sized:
            users = [c for c in w.containers if any(m.name == v.name for m in c.mounts)]
            size = min((recommended_shm(c) for c in users), default=8 * 2**30)
            _set_size(d, pod, v.name, k8s_size(size))
            changes.append(f"{w.label}: emptyDir {v.name} sizeLimit {k8s_size(size)}")
    for c in w.containers:
        if c.name in _ids(gpu.gpu_requests, w, cfg.path):
            _fix_gpu_limits(d, doc, c, w, changes)
    return len(changes) > before


def _set_size(d: _Doc, pod: Any, vol_name: str, size: str) -> None:
    vm = next(v for v in pod["volumes"] if isinstance(v, Mapping) and v.get("name") == vol_name)
    ed_map = vm.get("emptyDir")
    if "sizeLimit" in ed_map:
        d.set_value(ed_map, "sizeLimit", size)
    else:
        d.add_key(ed_map, "sizeLimit", size)


def _fix_gpu_limits(d: _Doc, doc: YamlDoc, c: ContainerSpec, w: Workload, changes: list[str]) -> None:
    res = _node(doc.data, c.path).get("resources")
    if not isinstance(res, Mapping):
        return
    for name, (req, lim) in c.gpu_resources().items():
        if req is None or (lim is not None and parse_quantity(req) == parse_quantity(lim)):
            continue
        if parse_quantity(req) is None or float(parse_quantity(req) or 0) != int(parse_quantity(req) or 0):
            continue  # a fractional value needs a human decision
        if lim is None:
            if isinstance(res.get("limits"), Mapping):
                d.add_key(res["limits"], name, req)
            else:
                d.add_key(res, "limits", {name: req})
            changes.append(f"{w.label} container {c.name}: limits.{name}: {req} (was only requested)")
        else:
            d.set_value(res["requests"], name, lim)
            changes.append(f"{w.label} container {c.name}: requests.{name} {req} -> {lim} (equal to limits)")


def _fix_compose(cfg: ConfigFile, w: Workload, ed: Editor, changes: list[str]) -> None:
    doc = cfg.docs[0]
    d = _Doc(doc, ed)
    svc = _node(doc.data, w.pod_path)
    c = w.containers[0]
    if _ids(storage.default_shm, w, cfg.path):
        size = docker_size(recommended_shm(c))
        d.add_key(svc, "shm_size", f'"{size}b"')
        changes.append(f"service {w.name}: shm_size {size}b")
    elif _ids(storage.small_shm, w, cfg.path) and "shm_size" in svc:
        size = docker_size(max(recommended_shm(c), 2**30))
        d.set_value(svc, "shm_size", f"{size}b")
        changes.append(f"service {w.name}: shm_size {c.shm_raw} -> {size}b")


def _fix_docker(cfg: ConfigFile, w: Workload, ed: Editor, changes: list[str]) -> None:
    run = cfg.runs[w.doc_index]
    c = w.containers[0]
    if not (_ids(storage.default_shm, w, cfg.path) or _ids(storage.small_shm, w, cfg.path)):
        return
    size = docker_size(max(recommended_shm(c), 2**30))
    line, col = ed.locate(run.insert_at)
    if c.shm_raw:
        start, end = _shm_option(ed, cfg, w.doc_index, line, col, c.shm_raw)
        ed.replace(line, start, end, f"--shm-size={size}")
        changes.append(f"{w.origin}: --shm-size {c.shm_raw} -> {size}")
    else:
        ed.replace(line, col, col, f" --shm-size={size}")
        changes.append(f"{w.origin}: --shm-size={size}")


_SHM_OPTION = re.compile(r"""--shm-size(?:=|[ \t]+)("([^"]*)"|'([^']*)'|[^\s;&|()<>'"]+)""")


def _shm_option(ed: Editor, cfg: ConfigFile, index: int, line: int, col: int, raw: str) -> tuple[int, int]:
    """The span of this command's own `--shm-size VALUE` on its `docker run` line: after its `run`, before
    the next command's `run` on the line, value quotes included (the first `--shm-size` anywhere on the line
    with the value's unquoted length rewrote another command's option, or left a stray quote)."""
    s = ed.lines[line]
    limit = len(s)
    if index + 1 < len(cfg.runs):
        nline, ncol = ed.locate(cfg.runs[index + 1].insert_at)
        if nline == line:
            limit = ncol
    m = _SHM_OPTION.search(s, col, limit)
    value = m and next((g for g in m.groups()[1:] if g is not None), m.group(1))
    if m is None or value != raw:
        raise FixUnsupported("--shm-size is not on the `docker run` line")
    return m.start(), m.end()


__all__ = ["FIXABLE", "FixResult", "Style", "fix_config"]  # Style: re-exported for tests
