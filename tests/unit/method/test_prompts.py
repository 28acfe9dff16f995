"""Prompt rendering and feedback noise, pinned string for string to the published protocol."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from icrl.method.episode import Episode
from icrl.errors import UsageError
from icrl.method.feedback import shown_feedback
from icrl.method.prompts import SYSTEM_PROMPT_ICL, SYSTEM_PROMPT_ICRL, build_messages, feedback_message

TASK = SimpleNamespace(prediction_prefix="Intent:", description="")

ICRL_SYSTEM = ("You are an useful assistant. Answer the following questions. Feedback will indicate "
               "if you answered correctly. You must answer correctly, using previous feedback to make "
               "better predictions.\n")
ICL_SYSTEM = "You are an useful assistant. Answer the following questions.\n"

CONTEXT = [
    Episode("Query: card lost", "lost_or_stolen_card", 1, "lost_or_stolen_card", 1),
    Episode("Query: where is my money", "card_arrival", 0, "pending_transfer", 0),
]
NEW = "Query: how do I top up"


def sys(content):
    return {"role": "system", "content": content}


def user(content):
    return {"role": "user", "content": content}


def bot(content):
    return {"role": "assistant", "content": content}


def test_system_prompt_constants():
    assert SYSTEM_PROMPT_ICRL + "\n" == ICRL_SYSTEM
    assert SYSTEM_PROMPT_ICL + "\n" == ICL_SYSTEM


def test_feedback_messages():
    assert feedback_message("card_arrival", 1) == "'card_arrival' is the correct answer! Good job!"
    assert feedback_message("card_arrival", 0) == "The answer 'card_arrival' is wrong! You can do better!"
    with pytest.raises(ValueError):
        feedback_message("card_arrival", None)


def test_icrl_with_feedback():
    messages, prefix = build_messages(TASK, CONTEXT, NEW, "icrl")
    assert prefix == "Intent:"
    assert messages == [
        sys(ICRL_SYSTEM),
        user("Query: card lost"),
        bot("Intent: lost_or_stolen_card"),
        user("'lost_or_stolen_card' is the correct answer! Good job!\n\nQuery: where is my money"),
        bot("Intent: card_arrival"),
        user("The answer 'card_arrival' is wrong! You can do better!\n\nQuery: how do I top up"),
    ]


def test_icrl_without_feedback():
    messages, _ = build_messages(TASK, CONTEXT, NEW, "icrl", omit_feedback=True)
    assert messages == [
        sys(ICRL_SYSTEM),
        user("Query: card lost"),
        bot("Intent: lost_or_stolen_card"),
        user("Query: where is my money"),
        bot("Intent: card_arrival"),
        user("Query: how do I top up"),
    ]


def test_icrl_empty_context():
    messages, _ = build_messages(TASK, [], NEW, "icrl")
    assert messages == [sys(ICRL_SYSTEM), user("Query: how do I top up")]


def test_supervised_icl_shows_gold_answers():
    context = [Episode(e.prompt, None, None, e.answer, None) for e in CONTEXT]
    messages, prefix = build_messages(TASK, context, NEW, "icl")
    assert prefix == "Intent:"
    assert messages == [
        sys(ICL_SYSTEM),
        user("Query: card lost"),
        bot("Intent: lost_or_stolen_card"),
        user("Query: where is my money"),
        bot("Intent: pending_transfer"),
        user("Query: how do I top up"),
    ]


def test_icl_ignores_predictions_and_feedback():
    messages, _ = build_messages(TASK, CONTEXT, NEW, "icl")
    assert "card_arrival" not in str(messages) and "Good job" not in str(messages)


def test_zero_shot():
    task = SimpleNamespace(prediction_prefix="Type:", description="")
    messages, prefix = build_messages(task, [], "Question: who wrote Hamlet?", "zero_shot")
    assert prefix == "Type:"
    assert messages == [sys(ICL_SYSTEM), user("Question: who wrote Hamlet?")]
    with pytest.raises(UsageError):
        build_messages(task, CONTEXT, NEW, "zero_shot")


def test_exemplars_come_first_in_icrl():
    exemplars = [("Query: exchange rate?", "exchange_rate")]
    messages, _ = build_messages(TASK, CONTEXT[1:], NEW, "icrl", exemplars=exemplars)
    assert messages == [
        sys(ICRL_SYSTEM),
        user("Query: exchange rate?"),
        bot("Intent: exchange_rate"),
        user("'exchange_rate' is the correct answer! Good job!\n\nQuery: where is my money"),
        bot("Intent: card_arrival"),
        user("The answer 'card_arrival' is wrong! You can do better!\n\nQuery: how do I top up"),
    ]
    without, _ = build_messages(TASK, [], NEW, "icrl", exemplars=exemplars, omit_feedback=True)
    assert without == [sys(ICRL_SYSTEM), user("Query: exchange rate?"), bot("Intent: exchange_rate"),
                       user("Query: how do I top up")]


def test_exemplars_come_first_in_icl_and_zero_shot():
    exemplars = [Episode("Query: exchange rate?", None, None, "exchange_rate", None),
                 ("Query: card stuck", "card_swallowed")]
    context = [Episode("Query: card lost", None, None, "lost_or_stolen_card", None)]
    messages, _ = build_messages(TASK, context, NEW, "icl", exemplars=exemplars)
    assert messages == [
        sys(ICL_SYSTEM),
        user("Query: exchange rate?"),
        bot("Intent: exchange_rate"),
        user("Query: card stuck"),
        bot("Intent: card_swallowed"),
        user("Query: card lost"),
        bot("Intent: lost_or_stolen_card"),
        user("Query: how do I top up"),
    ]
    zero, _ = build_messages(TASK, [], NEW, "zero_shot", exemplars=exemplars[1:])
    assert zero == [sys(ICL_SYSTEM), user("Query: card stuck"), bot("Intent: card_swallowed"),
                    user("Query: how do I top up")]


def test_template_without_system_role():
    messages, _ = build_messages(TASK, CONTEXT[:1], NEW, "icrl", supports_system_role=False)
    assert messages == [
        user(ICRL_SYSTEM + "\n\nQuery: card lost"),
        bot("Intent: lost_or_stolen_card"),
        user("'lost_or_stolen_card' is the correct answer! Good job!\n\nQuery: how do I top up"),
    ]
    assert messages[0]["content"].startswith("You are an useful assistant.")
    assert "predictions.\n\n\nQuery: card lost" in messages[0]["content"]
    zero, _ = build_messages(TASK, [], NEW, "zero_shot", supports_system_role=False)
    assert zero == [user("You are an useful assistant. Answer the following questions.\n\n\n"
                         "Query: how do I top up")]


def test_task_description_follows_the_system_prompt():
    task = SimpleNamespace(prediction_prefix="Intent:", description="Classify banking queries.")
    messages, _ = build_messages(task, [], NEW, "icl")
    assert messages[0] == sys("You are an useful assistant. Answer the following questions.\n"
                              "Classify banking queries.")


def test_unknown_mode():
    with pytest.raises(UsageError) as err:
        build_messages(TASK, [], NEW, "few_shot")
    assert all(m in str(err.value) for m in ("icrl", "icl", "zero_shot"))


def test_inputs_are_not_mutated():
    context = list(CONTEXT)
    build_messages(TASK, context, NEW, "icrl")
    assert context == CONTEXT


# --- feedback noise --------------------------------------------------------------------------

@pytest.mark.parametrize("q", [0.1, 0.5, 0.9])
def test_flip_exactly_when_the_step_draw_is_below_q(q):
    seed = 17
    flips = 0
    for t in range(200):
        draw = np.random.default_rng(seed + t).random()
        for reward in (0, 1):
            want = 1 - reward if draw < q else reward
            assert shown_feedback(reward, seed, t, True, q) == want
        flips += draw < q
    assert 0 < flips < 200


def test_flip_literal():
    # default_rng(0).random() = 0.6369..., default_rng(1).random() = 0.5118...
    assert shown_feedback(1, 0, 0, True, 0.6) == 1
    assert shown_feedback(1, 0, 0, True, 0.65) == 0
    assert shown_feedback(0, 0, 1, True, 0.52) == 1


def test_flip_edges():
    for t in range(100):
        for reward in (0, 1):
            assert shown_feedback(reward, 3, t, True, 0.0) == reward
            assert shown_feedback(reward, 3, t, True, 1.0) == 1 - reward
            assert shown_feedback(reward, 3, t, False, 1.0) == reward
            assert shown_feedback(reward, 3, t, False, None) == reward


@pytest.mark.parametrize("q", [None, -0.1, 1.5])
def test_flip_needs_a_probability(q):
    with pytest.raises(UsageError):
        shown_feedback(1, 0, 0, True, q)


def test_an_icrl_context_episode_without_a_prediction_is_refused_not_shown_as_none():
    unanswered = Episode("Input: where is my card?", None, None, "card_arrival", None, 4)
    with pytest.raises(ValueError, match="the episode of step 4 has none"):
        build_messages(TASK, [unanswered], NEW, "icrl")
    messages, _ = build_messages(TASK, [unanswered], NEW, "icl")  # supervised ICL shows the gold answer
    assert "card_arrival" in messages[-2]["content"] and "None" not in messages[-2]["content"]
