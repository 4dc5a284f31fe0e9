"""GIVEN facts read on a machine WHEN the layers get their status THEN a layer is read only from what describes it."""

from __future__ import annotations


def test_the_driver_layer_is_unknown_where_no_nvidia_driver_answered():
    # a new user's walkthrough (session 25): a machine without a driver showed its driver layer "OK", read from the
    # kernel's and the OS's names alone
    from oomdoctor.checks.engine import layer_statuses
    from oomdoctor.facts import Fact, FactSet, Unavailable
    from oomdoctor.facts.model import LayerStatus

    base = [Fact("kernel.release", "6.8.0", "uname"), Fact("os.id", "debian 12", "os-release"),
            Fact("driver.nvml_error", "NVML library not found", "NVML"), Unavailable("driver.version", "no NVML")]
    assert layer_statuses(FactSet(base), [])["driver"] is LayerStatus.UNKNOWN
    read = [f for f in base if f.key != "driver.version"] + [Fact("driver.version", "550.54.15", "NVML")]
    assert layer_statuses(FactSet(read), [])["driver"] is LayerStatus.OK


def test_the_verdict_asks_for_probes_only_where_they_were_not_run():
    from oomdoctor.checks.engine import diagnose
    from oomdoctor.facts import FactSet, Unavailable

    not_run = diagnose(FactSet([Unavailable("probe.context", "not run (use --probe)")]), {})
    tried = diagnose(FactSet([Unavailable("probe.context", "no CUDA device (NVML and torch see none)")]), {})
    assert "doctor --probe" in not_run.verdict.summary and "doctor --probe" not in tried.verdict.summary


def test_unavailable_facts_say_why_in_the_text_report():
    from oomdoctor.checks.engine import diagnose
    from oomdoctor.facts import FactSet, Unavailable
    from oomdoctor.render.doctor_text import render_text

    rep = diagnose(FactSet([Unavailable(k, "no CUDA device (NVML and torch see none)")
                            for k in ("probe.context", "probe.alloc")]), {})
    text = render_text(rep, width=240)
    assert "unavailable (no CUDA device (NVML and torch see none)): probe.alloc, probe.context" in text


def test_a_bundle_made_without_probes_still_gets_the_probe_advice(tmp_path):
    from oomdoctor.checks.engine import diagnose
    from oomdoctor.collectors.context import CollectContext
    from oomdoctor.collectors.nvml import BundleSmiBackend
    from oomdoctor.collectors.probe import collect_probe_facts
    from oomdoctor.facts import FactSet

    ctx = CollectContext(root=tmp_path, env={}, gpu=BundleSmiBackend(None, "not present"), bundle=True)  # no probe.json
    entries, _ = collect_probe_facts(ctx, run=False, attempts=1)
    rep = diagnose(FactSet(entries), {})
    assert "doctor --probe" in rep.verdict.summary
