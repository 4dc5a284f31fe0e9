"""The engine: ordering, layer status, verdict rules, and that a broken check cannot break a report."""

from __future__ import annotations

from builders import GiB, MiB, make_facts, seed_facts
from oomdoctor.checks import engine
from oomdoctor.checks.registry import CHECKS, CheckSpec
from oomdoctor.facts import LAYERS, FactSet, Layer


def test_findings_are_sorted_by_severity_confidence_layer():
    r = engine.diagnose(seed_facts(shm__size_bytes=64 * MiB, cgroup__oom_kill=1), {})
    keys = [engine.sort_key(f) for f in r.findings]
    assert keys == sorted(keys)
    assert r.findings[0].severity.value in ("error", "critical")


def test_empty_factset_gives_unknown_everything():
    r = engine.diagnose(FactSet(), {})
    assert r.verdict.category.value == "unknown"
    assert "Not enough evidence" in r.verdict.summary
    assert [r.layer_status[n].value for n in LAYERS] == ["unknown"] * 8
    assert r.findings == ()


def test_a_raising_check_becomes_an_info_finding(monkeypatch):
    def boom(facts):
        raise ZeroDivisionError("planted")

    monkeypatch.setitem(CHECKS, "ZZZ999", CheckSpec("ZZZ999", Layer.WORKLOAD, "planted", boom))
    r = engine.diagnose(make_facts(), {})
    f = [x for x in r.findings if x.id == "ZZZ999"][0]
    assert f.severity.value == "info" and "ZeroDivisionError" in f.title


def test_lone_low_confidence_hint_is_not_a_verdict():
    r = engine.diagnose(make_facts(shm__size_bytes=512 * MiB), {})
    assert r.verdict.category.value == "unknown"


def test_one_high_error_outweighs_two_medium_warnings():
    r = engine.diagnose(make_facts(cgroup__oom_kill=3, shm__size_bytes=64 * MiB,
                                   sharing__k8s_resources=["nvidia.com/gpu.shared"]), {})
    assert r.verdict.category.value == "host_oom"
    assert "RES001" in r.verdict.finding_ids and "shm_exhausted" in r.verdict.summary


def test_layer_status():
    r = engine.diagnose(make_facts(cgroup__oom_kill=1, shm__size_bytes=64 * MiB, **{"workload__oom_events": []}), {})
    assert r.layer_status["resources"].value == "fail"
    assert r.layer_status["storage"].value == "warn"
    assert r.layer_status["cuda"].value == "ok"
    only_driver = FactSet([f for f in make_facts().values() if f.key == "driver.version"])
    r2 = engine.diagnose(only_driver, {})
    assert r2.layer_status["driver"].value == "ok" and r2.layer_status["storage"].value == "unknown"


def test_other_process_outranks_context_when_the_gpu_is_full():
    from builders import a100

    r = engine.diagnose(seed_facts(driver__gpus=[a100(used=79 * GiB)], sharing__vcuda={}, kernel__release="5.4.0-150-generic",
                                   probe__context={"attempts": 5, "failures": 5, "errors": ["out of memory"]}), {})
    assert r.verdict.category.value == "other_process"
