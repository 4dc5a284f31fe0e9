"""bench/explain_rule_audit.py: the per-site tally behind session 20's rule-precision audit."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from oomdoctor.explain import rules

ROOT = Path(__file__).resolve().parents[1]


def _audit_module():
    sys.path.insert(0, str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location("explain_rule_audit", ROOT / "bench" / "explain_rule_audit.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_tally_counts_fires_labels_and_wrong_answers_per_site():
    A = _audit_module()
    bare = "RuntimeError: out of memory"  # rules_by_kind's bare-message default: true_capacity
    items = [{"text": bare, "category": "true_capacity"}, {"text": bare, "category": "other_process"},
             {"text": "all good, step 10 loss 0.3", "category": "true_capacity"}]
    out = A.audit(items, None)
    sites = {k: v for k, v in out.items() if k[1] == "true_capacity" and k[0].startswith("rules_by_kind.py:")}
    assert sites, out
    fired, label, wrong = max(sites.values())
    assert (fired, label, wrong) == (2, 1, 1)
    assert all(not k[0].startswith("rank.py:") and k[1] != "unknown" for k in out)
    assert rules.Board.add is A._ORIGINAL_ADD  # the hook is taken off again
