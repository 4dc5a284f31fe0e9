"""A bare PASS/KEY/SESSION before several words reads as prose (session 26), but not when the first word is a token:
`session: Zq9planted0 0` kept its value, and the s26 property test found it now and then (a flaky CI leak)."""

from __future__ import annotations

import pytest

from oomdoctor.redact import MASK, redact_text

TOKEN = "Zq9planted0"


@pytest.mark.parametrize("text", [f"session: {TOKEN} 0", f"config.yaml:12:session: {TOKEN} two words",
                                  f"KEY: {TOKEN} x", f"Session = {TOKEN}, then more", f"  key: {TOKEN} a b"])
def test_a_token_before_several_words_is_hidden(text):
    out = redact_text(text)
    assert TOKEN not in out and MASK in out, out


@pytest.mark.parametrize("text", ["Key: avg_train_loss, Value: 0.86", "PASS: in-quota allocation succeeded",
                                  "session: 3", "session: abc def", "key = torch.randn(B, H, S)",
                                  "self._session = tf_session.TF_NewDeprecatedSession(opts, status)",
                                  "PASS: test_alloc2d passed in 3s", "Session: restarted 2 workers"])
def test_prose_after_a_bare_word_stays_readable(text):
    assert redact_text(text) == text


@pytest.mark.parametrize("text", [f"{{token: [{TOKEN}a, {TOKEN}b]}}", f"{{token: {{{TOKEN}{{}}",
                                  f"{{name: hf, token: {{a: {TOKEN}, b: {TOKEN}2}}}}, next",
                                  f"{{token: [{TOKEN}a,\n  {TOKEN}b]}}", f"{{token: [}}{TOKEN}}}"])
def test_a_flow_collection_under_a_secret_key_is_hidden_whole(text):
    """`{token: [a, b]}` showed `b`; `{token: {Zq9x{}` (no collection YAML would read) showed all (hypothesis)."""
    out = redact_text(text)
    assert TOKEN not in out and MASK in out, out
