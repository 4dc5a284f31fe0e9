"""The stated confidence: softmax over scores with its own temperature for the words-only leaning
(session 18, fitted out of fold to whether the top answer is right), never overflowing."""

from oomdoctor.explain import rank
from oomdoctor.explain.rank import explain_text
from oomdoctor.explain.rules import Board

GROWING = ["After a few hundred iterations the GPU memory keeps growing and growing.",
           "I append the loss to a list every step to plot it later."]


def test_words_only_leaning_uses_its_own_temperature(monkeypatch):
    before = explain_text(GROWING).hypotheses
    assert before and not explain_text(GROWING).events
    monkeypatch.setattr(rank, "TEMPERATURE_WORDS", 5.0)  # much flatter
    flat = explain_text(GROWING).hypotheses
    assert [h.category for h in flat] == [h.category for h in before]  # ranks never move with the temperature
    assert flat[0].confidence < before[0].confidence


def test_answers_with_a_failure_line_do_not_use_the_words_temperature(monkeypatch):
    log = ["torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.90 GiB total "
           "capacity; 13.50 GiB already allocated; 1.00 GiB free; 14.00 GiB reserved in total by PyTorch)"]
    before = [(h.category, h.confidence) for h in explain_text(log).hypotheses]
    monkeypatch.setattr(rank, "TEMPERATURE_WORDS", 5.0)
    assert [(h.category, h.confidence) for h in explain_text(log).hypotheses] == before


def test_huge_scores_and_a_small_temperature_do_not_overflow():
    b = Board()
    b.add("true_capacity", 5000.0, "x")
    b.add("fragmentation", 4999.5, "y")
    hyps = rank._rank(b, 0.01, 0.0)
    assert [h.category for h in hyps] == ["true_capacity", "fragmentation"]
    assert hyps[0].confidence == 0.99 and hyps[1].confidence == 0.01
    assert all(0.0 <= h.confidence <= 1.0 for h in rank._rank(b))
    small = Board()
    small.add("true_capacity", 0.5, "x")
    assert rank._rank(small, 0.01, 10.0)[0].confidence == 0.01  # a none-score far above every score: no overflow either


def test_text_output_prints_evidence_for_at_most_four_causes_and_lists_the_rest():
    from oomdoctor.explain.rank import Hypothesis
    from oomdoctor.render.explain import to_text

    ex = explain_text(["RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"])
    cats = ["host_oom", "gpu_sharing_limit", "true_capacity", "not_oom", "other_process", "fragmentation"]
    ex.hypotheses = [Hypothesis(c, round(0.2 - 0.02 * i, 2), [f"evidence of {c}"], [], 1.0) for i, c in enumerate(cats)]
    out = to_text(ex)
    assert "4. not_oom" in out and "5. other_process" not in out and "evidence of other_process" not in out
    assert "also ranked: other_process 0.12, fragmentation 0.10" in out
    # a clear answer: the runner-up is always shown, causes under 0.05 after it are not
    ex.hypotheses = [Hypothesis("true_capacity", 0.9, ["e1"], [], 3.0), Hypothesis("leak_in_code", 0.04, ["e2"], [], 0.1),
                     Hypothesis("fragmentation", 0.03, ["e3"], [], 0.1)]
    out = to_text(ex)
    assert "2. leak_in_code" in out and "3. fragmentation" not in out and "also ranked: fragmentation 0.03" in out


def test_a_leaning_from_words_alone_is_never_stated_surer_than_the_cap(monkeypatch):
    capped = explain_text(GROWING).hypotheses
    assert capped[0].confidence <= rank.WORDS_MAX_CONFIDENCE
    monkeypatch.setattr(rank, "WORDS_MAX_CONFIDENCE", 0.99)
    assert explain_text(GROWING).hypotheses[0].confidence > capped[0].confidence  # the cap is what held it down
