"""`explain --here` with the facts an H200 really reported (validation/explain_here_gpu.py, session 12).

The fixtures are the logs of failures staged on the GPU (cause known by construction) and the deciding facts
read on that machine while the co-tenant still held its memory. Found there: an H200 (like any A100/H100)
with MIG off still lists its MIG mode ("Disabled"), and explain had read that list as MIG on, dropped the
co-tenant and blamed a sharing limit.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest

from builders import recorded_facts
from oomdoctor.explain.rank import explain_text
from oomdoctor.facts.base import Fact, FactSet
from oomdoctor.facts.gpu import mig_enabled

HERE = Path(__file__).parent / "fixtures" / "here_h200"
GIB = 1 << 30


facts_of = partial(recorded_facts, HERE)


def ranked(case: str, log: str = "log", facts: FactSet | None = None) -> list[str]:
    ex = explain_text((HERE / f"{case}.{log}").read_text().splitlines(), facts)
    return [h.category for h in ex.hypotheses if h.category != "unknown"]


def test_mig_mode_listed_as_disabled_is_not_mig():
    assert not mig_enabled(facts_of("capacity_130"))
    on = facts_of("capacity_130", lambda r: {**r, "sharing.mig": {"value": [{"gpu": 0, "current": "Enabled",
                                                                                "pending": "Enabled", "instances": []}],
                                                                    "source": "NVML"}})
    assert mig_enabled(on)
    assert not mig_enabled(FactSet([Fact("sharing.mig", None, "NVML")]))
    assert not mig_enabled(FactSet([Fact("sharing.mig", "Enabled", "odd bundle")]))  # not the collector's shape


@pytest.mark.parametrize("case, log, expected", [
    ("other_60_50", "log", "other_process"),          # the message names the co-tenant too
    ("other_60_50", "pasted.log", "other_process"),   # only the first sentence: the machine names the co-tenant
    ("other_context", "log", "other_process"),        # 'CUDA error: out of memory' while the co-tenant holds it all
    ("capacity_130", "log", "true_capacity"),
    ("capacity_130", "pasted.log", "true_capacity"),
])
def test_here_facts_from_the_h200(case, log, expected):
    r = ranked(case, log, facts_of(case))
    assert r[0] == expected
    assert "gpu_sharing_limit" not in r[:2]  # MIG is off on that card


def test_pasted_line_alone_cannot_tell_a_co_tenant():
    # without the machine the first sentence of the message reads as the job's own size
    assert ranked("other_60_50", "pasted.log")[0] == "true_capacity"
    assert ranked("other_context", "log")[0] == "context_or_driver"


def test_a_co_tenant_smaller_than_the_missing_memory_is_not_blamed():
    # the 120% job of capacity_130 with a 7 GiB co-tenant beside it (the fact added to the real facts):
    # without it the 72.70 GiB request would still not fit
    def add_small(r):
        r["sharing.processes"]["value"] = [{"gpu": 0, "pid": 4242, "used_bytes": 7 * GIB, "name": "python3",
                                            "self": False}]
        return r
    facts = facts_of("capacity_130", add_small)
    assert ranked("capacity_130", "log", facts)[0] == "true_capacity"
    assert ranked("capacity_130", "pasted.log", facts)[0] == "true_capacity"


def test_mig_on_still_drops_processes_of_other_instances():
    def mig_on(r):
        r["sharing.mig"]["value"][0]["current"] = "Enabled"
        return r
    r = ranked("other_60_50", "pasted.log", facts_of("other_60_50", mig_on))
    assert r[0] != "other_process"


def test_nvml_seeing_the_process_the_message_named_is_not_a_second_witness():
    # a job needing 150% of the GPU beside a 20% co-tenant, failing while it loaded its weights: the message
    # names the co-tenant (it did take the room this allocation needed), NVML sees the same process
    facts = facts_of("capacity_cotenant_20")
    text_only = explain_text((HERE / "capacity_cotenant_20.log").read_text().splitlines())
    here = explain_text((HERE / "capacity_cotenant_20.log").read_text().splitlines(), facts)
    assert [h.category for h in here.hypotheses[:2]] == ["other_process", "true_capacity"]
    # NVML's view adds little to the message's own reading (0.68 -> 0.78 at PRIOR_WEIGHT 1.0; 0.72 -> 0.81 since
    # session 20's 0.5, which leaves the words less room to lift true_capacity), never the 0.96 of two witnesses
    # (0.98 with the bug put back, review); 0.15 leaves room for a recalibration, the score bound above does not move
    assert here.hypotheses[0].confidence - text_only.hypotheses[0].confidence <= 0.15
    assert here.hypotheses[0].confidence < 0.85
    assert here.hypotheses[0].score - text_only.hypotheses[0].score <= 0.5


def test_co_tenant_below_the_request_with_the_free_figure_cut_is_only_a_lead():
    # pasted first sentence, 44.74 GiB asked, the co-tenant holds 42.45 GiB: the text cannot say what was free,
    # so the machine's co-tenant is a lead, not the answer (a miss of the held-out run, kept as the limit)
    r = ranked("other_30_80", "pasted.log", facts_of("other_30_80"))
    assert r[0] == "true_capacity" and "other_process" in r


# Synthetic machines for the review's cases (session 12): an 80 GB card, torch 2.x messages.
def _msg(req: float, free: float, listed: str = "", own: float = 40.0) -> list[str]:
    return [f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {req:.2f} GiB. GPU 0 has a total capacity "
            f"of 79.10 GiB of which {free:.2f} GiB is free. {listed}Including non-PyTorch memory, this process has "
            f"{own:.2f} GiB memory in use. Of the allocated memory {own - 0.5:.2f} GiB is allocated by PyTorch, and "
            "10.00 MiB is reserved by PyTorch but unallocated."]


def _machine(procs: list[tuple[int, int, float]], gpus: int = 1, visible: str | None | bool = False,
             mig: list[tuple[int, str]] = ()) -> FactSet:
    entries = [Fact("sharing.processes", [{"gpu": g, "pid": pid, "used_bytes": int(gib * GIB), "name": "python",
                                           "self": False} for g, pid, gib in procs], "NVML"),
               Fact("driver.gpus", [{"index": i, "memory_total_bytes": 85_520_809_984} for i in range(gpus)], "NVML"),
               Fact("sharing.mig", [{"gpu": g, "current": c, "pending": c, "instances": []} for g, c in mig], "NVML")]
    if visible is not False:
        entries.append(Fact("runtime.cuda_visible_devices", visible, "environment"))
    return FactSet(entries)


def _top(lines, facts):
    return [h.category for h in explain_text(lines, facts).hypotheses if h.category != "unknown"]


def test_a_listed_co_tenant_that_could_not_have_caused_it_is_not_made_the_answer():
    lines = _msg(40, 4, "Process 123 has 30.00 GiB memory in use. ", own=44)
    assert _top(lines, None)[0] == "true_capacity"
    assert _top(lines, _machine([(0, 123, 30)]))[0] == "true_capacity"


def test_a_co_tenant_on_another_gpu_is_not_this_gpus():
    lines = _msg(20, 1, own=77)  # the job filled GPU 0 itself
    assert _top(lines, _machine([(1, 555, 40)], gpus=2, visible=None))[0] == "true_capacity"
    assert _top(lines, _machine([(0, 555, 40)], gpus=2, visible="1,0"))[0] == "true_capacity"  # CUDA 0 is NVML 1
    # the job's CUDA_VISIBLE_DEVICES unknown (explain --here): a lead, not the answer
    assert _top(lines, _machine([(1, 555, 40)], gpus=2))[0] == "true_capacity"


def test_mig_on_another_gpu_does_not_hide_this_gpus_co_tenant():
    # (own 38 GiB, session 15: with 78 of the 79 GiB the message left no room for a 40 GiB co-tenant at the
    # failure, and one NVML sees later on that card is no longer counted)
    lines = _msg(2, 0.5, own=38)
    facts = _machine([(0, 555, 40)], gpus=2, visible=None, mig=[(0, "Disabled"), (1, "Enabled")])
    assert _top(lines, facts)[0] == "other_process"
    assert any("NVML" in e for e in explain_text(lines, facts).hypotheses[0].evidence)
    facts = _machine([(0, 555, 40)], gpus=2, visible=None, mig=[(0, "Enabled"), (1, "Disabled")])
    assert _top(lines, facts)[0] != "other_process" and "gpu_sharing_limit" in _top(lines, facts)


def test_a_co_tenant_below_the_request_plus_the_free_memory_would_have_held_it():
    # 30 GiB asked, 12 free, an unlisted 25 GiB co-tenant (a container the message cannot see): 37 > 30
    assert _top(_msg(30, 12, own=41), _machine([(0, 777, 25)]))[0] == "other_process"
    # ... with 2 GiB free (27 < 30) NVML adds only a lead (the message's own hidden-memory rule stands)
    lines = _msg(30, 2, own=51)
    gain = explain_text(lines, _machine([(0, 777, 25)])).hypotheses[0].score - \
        {h.category: h.score for h in explain_text(lines, None).hypotheses}["other_process"]
    assert gain <= 1.0


def test_a_small_co_tenant_does_not_decide_a_driver_oom():
    lines = ["RuntimeError: CUDA error: out of memory"]
    small = explain_text(lines, _machine([(0, 9, 2)]))
    big = explain_text(lines, _machine([(0, 9, 70)]))
    assert big.hypotheses[0].category == "other_process"
    assert small.hypotheses[0].category != "other_process" or small.hypotheses[0].confidence < 0.6
