"""GIVEN many node reports WHEN aggregated THEN nodes group by configuration fingerprint, the odd ones
out (old kernel, pending row remaps, Xid) are outliers, findings are counted; kubectl log streams with
--prefix and several documents per stream are read."""

from __future__ import annotations

import copy
import io
import json
import sys
from pathlib import Path

import pytest

from oomdoctor.analysis.fleet import aggregate, summarize
from oomdoctor.cli import main
from oomdoctor.parsers.report_stream import iter_stream

REP = Path(__file__).parent / "fixtures" / "reports"
BASE = json.loads((REP / "seed-good.json").read_text())


def node(name: str, *, kernel: str | None = None, remap: bool = False, xid: bool = False, driver: str | None = None,
         findings=("STO001",), host: bool = True) -> dict:
    doc = copy.deepcopy(BASE)
    doc["host"]["name"] = name if host else None
    for layer in doc["layers"]:
        f = layer["facts"]
        if "host.name" in f:
            if host:
                f["host.name"] = name
            else:
                del f["host.name"]
        if kernel and "kernel.release" in f:
            f["kernel.release"] = kernel
        if driver and "driver.version" in f:
            f["driver.version"] = driver
        if remap and "driver.gpus" in f:
            f["driver.gpus"][0]["remapped_pending"] = True
        if xid and layer["name"] == "driver":
            f["driver.xid_events"] = [{"code": 79, "text": "GPU has fallen off the bus"}]
    doc["findings"] = [{"id": i, "severity": "warning", "layer": "storage"} for i in findings]
    return doc


def fleet_of(n: int = 20) -> list[dict]:
    docs = [node(f"gpu-{i:02d}") for i in range(n)]
    docs[3] = node("gpu-03", kernel="3.10.0-1160.el7.x86_64", findings=("STO001", "DRV003"))
    docs[7] = node("gpu-07", remap=True)
    docs[9] = node("gpu-09", xid=True)
    docs += [node(f"h100-{i}", driver="550.54.15") for i in range(5)]
    return docs


def test_groups_outliers_and_counts():
    result = aggregate(summarize(d, "x") for d in fleet_of())
    assert result.nodes == 25
    sizes = [len(names) for _, names in result.groups]
    assert sizes == [19, 5, 1]
    outliers = dict(result.outliers)
    assert outliers["gpu-03"] == ["kernel.release"]  # differs from the majority in one key, and < 4.15
    assert outliers["gpu-07"] == ["driver.gpus.remapped_pending"]
    assert outliers["gpu-09"] == ["driver.xid_events"]
    assert outliers["h100-0"] == ["driver.version"]  # a small group one key away from the majority
    assert "gpu-00" not in outliers
    assert result.finding_counts == {"STO001": 25, "DRV003": 1}


def test_another_pool_is_not_an_outlier():
    docs = [node(f"a-{i}") for i in range(6)]
    for i in range(4):
        d = node(f"b-{i}", kernel="5.15.0-105-generic", driver="550.54.15")
        for layer in d["layers"]:
            if "os.id" in layer["facts"]:
                layer["facts"].update({"os.id": "ubuntu 22.04", "os.name": "Ubuntu 22.04.4 LTS", "cuda.driver_max": "12.4"})
        docs.append(d)
    result = aggregate(summarize(d, "x") for d in docs)
    assert len(result.groups) == 2 and result.outliers == []
    assert len(result.group_differs[result.groups[1][0]]) > 3


def test_memtotal_jitter_does_not_split_groups():
    a, b = node("a"), node("b")
    for layer in b["layers"]:
        if "host.mem_total_bytes" in layer["facts"]:
            layer["facts"]["host.mem_total_bytes"] += 7 * 2**20
    assert summarize(a, "a").fingerprint == summarize(b, "b").fingerprint


def test_node_name_falls_back_to_file_name(tmp_path, capsys):
    d = tmp_path / "reports"
    d.mkdir()
    (d / "worker-17.json").write_text(json.dumps(node("ignored", host=False)))
    (d / "worker-18.json").write_text(json.dumps(node("gpu-named")))
    assert main(["fleet", "--format", "json", str(d)]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert sorted(n for g in doc["groups"] for n in g["nodes"]) == ["gpu-named", "worker-17"]


def _prefixed(docs: list[dict], interleave: bool = False) -> str:
    streams = []
    for i, d in enumerate(docs):
        prefix = f"[pod/oomdoctor-{i:04x}/oomdoctor] "
        streams.append([prefix + ln for ln in json.dumps(d, indent=2).splitlines()])
    if not interleave:
        return "\n".join(ln for s in streams for ln in s) + "\n"
    out, k = [], 0
    while any(streams):
        s = streams[k % len(streams)]
        if s:
            out.append(s.pop(0))
        k += 1
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("interleave", [False, True])
def test_kubectl_prefixed_stream_on_stdin(monkeypatch, capsys, interleave):
    text = "[pod/oomdoctor-zzzz/oomdoctor] WARNING: NVML not found\n" + _prefixed(fleet_of(), interleave)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    assert main(["fleet", "--format", "json", "-"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) >= {"schema_version", "tool_version", "nodes", "groups", "outliers", "finding_counts"}
    assert doc["nodes"] == 25
    assert {"node": "gpu-03", "differs_in": ["kernel.release"]} in doc["outliers"]
    assert all(set(g) >= {"fingerprint", "nodes"} for g in doc["groups"])


def test_several_reports_per_pod_and_junk_between_them():
    a, b = node("n1", kernel="5.4.0-1"), node("n1", kernel="5.4.0-2")
    text = json.dumps(a) + "\nsome log line {not json\n" + json.dumps(b, indent=1) + "\n{truncated\n"
    got = list(iter_stream(text, "pod/x"))
    assert [err == "" for _, _, err in got] == [True, True, False]
    result = aggregate(summarize(d, s) for s, d, e in got if not e)
    assert result.nodes == 1 and result.duplicates == 1  # the later report of the node wins


def test_unreadable_inputs(tmp_path, capsys):
    assert main(["fleet", str(tmp_path / "missing")]) == 2
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["fleet", str(empty)]) == 2
    (empty / "bad.json").write_text('{"not": "a report"}')
    assert main(["fleet", str(empty)]) == 2
    assert "no doctor reports found" in capsys.readouterr().err
    (empty / "good.json").write_text(json.dumps(node("g")))
    assert main(["fleet", str(empty)]) == 1  # one good report: runs, and says what it skipped
    assert "skipped bad" in capsys.readouterr().err
    assert main(["fleet", "--strict", str(empty)]) == 2


def test_text_and_html(capsys, tmp_path):
    d = tmp_path / "r"
    d.mkdir()
    for doc in fleet_of():
        (d / f"{doc['host']['name']}.json").write_text(json.dumps(doc))
    assert main(["fleet", str(d)]) == 1
    text = capsys.readouterr().out
    assert "25 node(s), 3 configuration group(s)" in text and "gpu-03" in text and "STO001" in text
    assert main(["fleet", "--format", "html", str(d)]) == 1
    html = capsys.readouterr().out
    assert "<svg" in html and "gpu-03" in html and "<script" not in html


def test_empty_and_non_json_files_are_reported_as_skipped(tmp_path, capsys):
    (tmp_path / "empty.json").write_text("")
    (tmp_path / "log.json").write_text("doctor crashed before printing\n")
    (tmp_path / "ok.json").write_text(json.dumps(node("ok")))
    assert main(["fleet", "--format", "json", str(tmp_path)]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert {s["source"]: s["reason"] for s in doc["skipped"]} == {"empty": "empty file", "log": "no JSON report in it"}
