"""Failure metrics from the records (icrl.analysis.failures): finding a label in free text,
greediness, history frequency bias, the knowing-doing gap and early collapse, by their definitions."""

from __future__ import annotations

import math

import pytest

from icrl.analysis.failures import collapse, concluded_label, label_mentions, run_failures, step_failures
from icrl.records.schema import TrainLine

LABELS = ["card_arrival", "card", "refund", "exchange rate"]


@pytest.mark.parametrize("text, said", [
    ("It is about a card arrival, so card_arrival.", "card_arrival"),
    ("Not a refund; the card is what they mean", "card"),
    ("maybe Card-Arrival ... no: REFUND", "refund"),
    ("the Exchange  Rate question", "exchange rate"),
    ("refunded cards and exchanges", None),  # no label as whole words
    ("", None),
])
def test_the_label_a_text_concludes_with(text, said):
    assert concluded_label(text, LABELS) == said


def test_mentions_are_whole_words_and_a_longer_label_wins_at_the_same_end():
    mentions = label_mentions("card arrival", LABELS)
    assert [m[2] for m in mentions] == ["card", "card_arrival"]  # in text order: same start, the shorter first
    assert concluded_label("card arrival", LABELS) == "card_arrival"


def record(step, prediction, accuracy, reasoning=None, **extra):
    return TrainLine(step, step, "a question", prediction, accuracy, "card", accuracy, 0, [], {}, reasoning=reasoning,
                     **extra)


def test_history_frequency_and_knowing_doing_per_step():
    train = [record(0, "card", 0, "it is a refund"), record(1, "card", 1, "card, clearly"),
             record(2, "refund", 0, "I cannot tell"), record(3, "refund", 0),
             record(4, "refund", 1, "card")]
    rows = step_failures(train, LABELS)
    assert [r["history_frequency_match"] for r in rows][1:] == [1.0, 0.0, 0.0, 1.0]  # a tie at step 4: refund counts
    assert math.isnan(rows[0]["history_frequency_match"])
    assert [r["reasoning_label"] for r in rows] == ["refund", "card", None, None, "card"]
    metrics = run_failures(train, LABELS)
    assert metrics["greediness"] == 0.5 and metrics["never_predicted"] == 2
    assert metrics["reasoning_steps"] == 4 and metrics["reasoning_names_label"] == 0.75
    assert metrics["knowing_doing_gap"] == pytest.approx(2 / 3)  # steps 0 and 4 of 0, 1, 4
    assert metrics["history_frequency_bias"] == 0.5


def test_a_run_collapses_early_when_it_repeats_one_unrewarded_label():
    steady = [record(t, LABELS[t % 4], t % 2) for t in range(100)]
    window, start = collapse(steady)
    assert window == 5 and math.isnan(start)
    assert run_failures(steady, LABELS)["early_collapse"] == 0.0
    stuck = steady[:10] + [record(t, "card", int(t % 5 == 0)) for t in range(10, 100)]
    assert collapse(stuck) == (5, 9.0)  # steps 9-13 all say card (9 is steady's card too), 2 of 5 right
    assert run_failures(stuck, LABELS)["early_collapse"] == 1.0
    late = steady[:80] + [record(t, "card", 0) for t in range(80, 100)]
    assert collapse(late)[1] == 80.0 and run_failures(late, LABELS)["early_collapse"] == 0.0
    graded = [record(t, "card", 1, reward=0.0) for t in range(10)]  # the recorded reward counts, not accuracy
    assert collapse(graded) == (5, 0.0)
