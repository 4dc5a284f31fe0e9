"""The engine: ordering, layer status, verdict rules, and that a broken check cannot break a report."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import GiB, MiB, make_facts, seed_facts
from oomdoctor.checks import engine
from oomdoctor.checks.registry import CHECKS, CheckSpec
from oomdoctor.facts import LAYERS, FactSet, Layer
from oomdoctor.facts.keys import FACT_KEYS
from oomdoctor.render.doctor_json import render_json
from oomdoctor.render.doctor_text import render_text


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


_json = st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**64) | st.floats(allow_nan=True) | st.text(max_size=20),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
                     max_leaves=12)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(sorted(FACT_KEYS)), _json, max_size=25))
def test_no_check_breaks_on_arbitrary_fact_values(values):
    from oomdoctor.facts import Fact

    report = engine.diagnose(FactSet([Fact(k, v, "fuzz") for k, v in values.items()]), {})
    broken = [f.title for f in report.findings if "failed internally" in f.title]
    assert broken == []
    render_json(report)
    render_text(report)


def test_non_finite_and_huge_numbers_everywhere():
    from oomdoctor.facts import Fact

    weird = (float("inf"), float("nan"), -1e308, 2**70, -5, "¹", "¹²³⁴", "٣", "nvidia¹",
             [{"gpu": 0, "index": 0, "used_bytes": float("inf"), "memory_total_bytes": float("nan"),
               "memory_used_bytes": float("inf"), "code": float("nan")}],
             {"attempts": float("inf"), "failures": "x", "memory_limits": {"0": float("nan")}})
    for value in weird:
        report = engine.diagnose(FactSet([Fact(k, value, "x") for k in FACT_KEYS]), {})
        assert [f.title for f in report.findings if "failed internally" in f.title] == []
