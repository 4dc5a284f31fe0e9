"""GIVEN any bytes WHEN a parser reads them THEN it returns a value and never raises (plus known answers)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oomdoctor.explain.facts import records_from_lines
from oomdoctor.parsers import cgroup as cg
from oomdoctor.parsers.k8s_manifest import ManifestError, containers_from, load_documents, terminations_from
from oomdoctor.parsers.kernlog import parse_nvrm_errors, parse_oom_kills, parse_xid_events, relevant_lines
from oomdoctor.parsers.nvidia_version import driver_branch, parse_driver_version_file
from oomdoctor.parsers.procfs import (
    cgroup_version,
    parse_cpu_list,
    parse_environ,
    parse_meminfo,
    parse_mounts,
    parse_os_release,
    parse_proc_cgroup,
    parse_proc_version,
)
from oomdoctor.parsers.smi_xml import parse_smi_xml
from oomdoctor.parsers.torch_json import TorchJsonError, parse_torch_json, parse_torch_version_py

TEXT = st.text(max_size=2000)
# Text built from the characters these formats use, so the fuzzer reaches deep branches.
STRUCTURED = st.text(alphabet="0123456789 :=\n\t\\/,.-_()kBmaxMiBNVRMXidPCIKilledprocess<>\"'oom_kill",
                     max_size=1000)
FUZZ = st.one_of(TEXT, STRUCTURED)


@settings(max_examples=200, deadline=None)
@given(FUZZ)
def test_procfs_parsers_never_raise(text):
    parse_meminfo(text)
    cgroup_version(parse_mounts(text))
    parse_proc_cgroup(text)
    parse_os_release(text)
    parse_proc_version(text)
    parse_environ(text)
    parse_environ(text.encode("utf-8", errors="replace"))
    parse_cpu_list(text)


@settings(max_examples=200, deadline=None)
@given(FUZZ)
def test_cgroup_parsers_raise_only_unparsable(text):
    cg.parse_flat_keyed(text)
    for fn in (cg.parse_limit, cg.parse_counter, cg.parse_cpu_max):
        try:
            fn(text)
        except cg.Unparsable:
            pass
    try:
        cg.parse_cfs_quota(text, text)
    except cg.Unparsable:
        pass


@settings(max_examples=200, deadline=None)
@given(FUZZ)
def test_kernel_log_parsers_never_raise(text):
    lines = text.splitlines()
    parse_xid_events(lines)
    parse_nvrm_errors(lines)
    parse_oom_kills(lines)
    relevant_lines(lines)
    records_from_lines(lines)


@settings(max_examples=200, deadline=None)
@given(FUZZ)
def test_version_and_json_parsers_never_raise(text):
    parse_driver_version_file(text)
    driver_branch(text)
    parse_torch_version_py(text)
    try:
        parse_torch_json(text)
    except TorchJsonError:
        pass


@settings(max_examples=150, deadline=None)
@given(st.one_of(TEXT, st.text(alphabet="<>/ =\"abcdefgnvidia_smi_log gpu fb_memory_usage total 12 MiB!ENTITY",
                               max_size=600)))
def test_smi_xml_never_raises(text):
    snap = parse_smi_xml(text)
    assert snap.error is not None or isinstance(snap.gpus, list)


@settings(max_examples=100, deadline=None)
@given(st.one_of(TEXT, st.text(alphabet="kind: Pod\n spec-containers:[]{}name", max_size=500)))
def test_manifest_parser_raises_only_manifest_error(text):
    try:
        docs = load_documents(text)
    except ManifestError:
        return
    containers_from(docs)
    terminations_from(docs)


@settings(max_examples=100, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=10), c, max_size=4),
                    max_leaves=20))
def test_torch_json_accepts_any_json_shape(value):
    try:
        out = parse_torch_json(json.dumps(value))
    except TorchJsonError:
        assert not isinstance(value, dict)
        return
    assert set(out) >= {"version", "cuda", "devices"}


# ---- known answers -----------------------------------------------------------------------------

def test_open_module_version_line_is_not_missed():
    line = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.195.03  Release Build  "
            "(dvs-builder@U22-I3-AE18-23-3)  Sat Sep 20 00:41:31 UTC 2025\nGCC version:  gcc version 12.3.0\n")
    assert parse_driver_version_file(line) == ("570.195.03", "open")
    prop = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n"
    assert parse_driver_version_file(prop) == ("535.104.05", "proprietary")


def test_xid_lines_new_and_old_formats():
    lines = [
        "[ 1234.5] NVRM: Xid (PCI:0000:01:00): 31, pid=2204, name=python, Ch 00000008, intr 00000000. "
        "MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f_3e000000. Fault is of type FAULT_PDE",
        "NVRM: Xid (0000:3b:00): 79, GPU has fallen off the bus.",
        "NVRM: Xid (PCI:0000:07:00): 63, Row Remapper: New row marked for remapping, reset gpu to activate.",
    ]
    events = parse_xid_events(lines)
    assert [(e["code"], e["pci"], e["pid"]) for e in events] == [(31, "0000:01:00", 2204), (79, "0000:3b:00", None),
                                                                 (63, "0000:07:00", None)]
    assert events[0]["name"] == "python"


def test_oom_kill_old_kernel_format():
    lines = ["Out of memory: Kill process 1234 (python) score 901 or sacrifice child",
             "Killed process 1234 (python) total-vm:81234567kB, anon-rss:61234567kB, file-rss:0kB"]
    kills = parse_oom_kills(lines)
    assert kills[0]["pid"] == 1234 and kills[0]["anon_rss_kb"] == 61234567 and kills[0]["shmem_rss_kb"] is None


def test_nvrm_errors_exclude_xid_and_keep_init_failures():
    lines = ["NVRM: Xid (PCI:0000:01:00): 13, Graphics Exception",
             "NVRM: RmInitAdapter failed! (0x26:0x56:1474)",
             "nvidia-uvm: uvm_pmm_gpu.c:3081 devmem_alloc_pagemap[pid:51] request_free_mem_region() err -34"]
    texts = [e["text"] for e in parse_nvrm_errors(lines)]
    assert texts == ["NVRM: RmInitAdapter failed! (0x26:0x56:1474)",
                     "nvidia-uvm: uvm_pmm_gpu.c:3081 devmem_alloc_pagemap[pid:51] request_free_mem_region() err -34"]


@pytest.mark.parametrize("text,expected", [("max\n", None), ("17179869184\n", 17179869184),
                                           ("9223372036854771712\n", None)])
def test_limits(text, expected):
    assert cg.parse_limit(text) == expected


def test_cpu_max_and_quota():
    assert cg.parse_cpu_max("200000 100000\n") == 2.0
    assert cg.parse_cpu_max("max 100000") is None
    assert cg.parse_cfs_quota("-1", "100000") is None
    assert cg.parse_cfs_quota("150000", "100000") == 1.5


def test_mounts_unescape_and_cgroup_version():
    mounts = parse_mounts("shm /dev/shm tmpfs rw,size=65536k 0 0\n"
                          "cgroup2 /sys/fs/cgroup cgroup2 rw 0 0\n/dev/sda1 /mnt/my\\040disk ext4 rw 0 0\n")
    assert mounts[0].option("size") == "65536k"
    assert mounts[2].target == "/mnt/my disk"
    assert cgroup_version(mounts) == 2


def test_environ_parsing():
    assert parse_environ(b"A=1\0B=x=y\0garbage\0\0") == {"A": "1", "B": "x=y"}


def test_torch_version_py():
    text = "__version__ = '2.9.1+cu130'\ndebug = False\ncuda: Optional[str] = '13.0'\n"
    assert parse_torch_version_py(text) == {"version": "2.9.1+cu130", "cuda": "13.0"}
    assert parse_torch_version_py("__version__ = '1.10.1+cu113'\ncuda = '11.3'\n")["cuda"] == "11.3"
    assert parse_torch_version_py("__version__ = '2.13.0+cpu'\ncuda: Optional[str] = None\n")["cuda"] is None


def test_smi_xml_refuses_entities():
    evil = '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa">]><nvidia_smi_log>&a;</nvidia_smi_log>'
    assert "entities" in parse_smi_xml(evil).error


def test_oom_line_kinds():
    lines = ["RuntimeError: CUDA error: out of memory",
             "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB.",
             "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).",
             "[HAMI-core ERROR (pid:1 thread=2 allocator.c:52)]: Device 0 OOM 10779361280 / 10737418240",
             "all fine here"]
    records = records_from_lines(lines, file="logs/x.log")
    assert [e["kind"] for e in records] == ["cuda_driver_oom", "torch_oom", "shm_error", "hami_oom"]
    assert [e["line"] for e in records] == [1, 2, 3, 4] and {e["file"] for e in records} == {"logs/x.log"}
    assert [e["category"] for e in records] == ["context_or_driver", "true_capacity", "shm_exhausted",
                                                "gpu_sharing_limit"]
    assert records[1]["numbers"] == {"requested_bytes": 20 * 1024**2}
    assert records[3]["details"]["limit_bytes"] == 10737418240
