"""GIVEN a log with OOMs of two frameworks (a PyTorch job and a JAX job in one log) WHEN a cause comes only from the
other framework's event THEN its deciding command asks that framework's allocator, not the primary event's (review
of session 25: every cause took the primary event's kind)."""

from __future__ import annotations

from oomdoctor.explain.events import OomEvent
from oomdoctor.explain.rank import Explanation, Hypothesis, _category_kinds
from oomdoctor.explain.rules import Board


def board(**scores: float) -> Board:
    b = Board()
    for cat, s in scores.items():
        b.add(cat, s, "why")
    return b


def test_a_cause_only_the_other_event_gave_takes_its_kind():
    events = [OomEvent("jax_oom", 1, "RESOURCE_EXHAUSTED"), OomEvent("torch_oom", 3, "CUDA out of memory")]
    boards = [board(fragmentation=2.0, true_capacity=1.0), board(other_process=3.0, true_capacity=0.5)]
    kinds = _category_kinds(boards, events, p=1)
    assert kinds == {"other_process": "torch_oom", "true_capacity": "torch_oom", "fragmentation": "jax_oom"}
    hyps = [Hypothesis(c, 0.3, [], []) for c in ("other_process", "fragmentation", "true_capacity")]
    ex = Explanation(events=events, hypotheses=hyps, primary=events[1], category_kinds=kinds)
    cmds = {h["category"]: h["decided_by"]["command"] for h in (h.to_json() for h in ex.hypotheses)}
    assert "XLA_PYTHON_CLIENT_ALLOCATOR" in cmds["fragmentation"]  # JAX's allocator, not PYTORCH_CUDA_ALLOC_CONF
    assert "torch" in cmds["true_capacity"]


def test_the_most_giving_other_event_wins_and_the_primary_kind_is_the_default():
    events = [OomEvent("torch_oom", 1, "a"), OomEvent("tf_oom", 2, "b"), OomEvent("jax_oom", 3, "c")]
    boards = [board(true_capacity=1.0), board(fragmentation=0.5), board(fragmentation=1.5)]
    assert _category_kinds(boards, events, p=0) == {"true_capacity": "torch_oom", "fragmentation": "jax_oom"}
    ex = Explanation(events=events, hypotheses=[Hypothesis("leak_in_code", 0.2, [], [])], primary=events[0])
    assert ex.hypotheses[0].kind == "torch_oom"
