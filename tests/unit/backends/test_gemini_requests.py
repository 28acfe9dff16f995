"""The Gemini request of a fixed history is the published one (lil-lab/icrl, the Gemini wrapper's
message formatting and generation config, derived here by hand), and the answers read back."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from icrl.backends import gemini_requests as req
from icrl.errors import UsageError
from icrl.method.episode import Episode
from icrl.method.prompts import build_messages

TASK = SimpleNamespace(prediction_prefix="Intent:", description="Classify the customer's message.")
LABELS = ["billing", "refund", "delivery"]
# The published ICRL system prompt, its task description after a newline.
SYSTEM = ("You are an useful assistant. Answer the following questions. Feedback will indicate if you answered "
          "correctly. You must answer correctly, using previous feedback to make better predictions."
          "\nClassify the customer's message.")


def _user(text):
    return {"role": "user", "parts": [{"text": text}]}


def _model(text):
    return {"role": "model", "parts": [{"text": text}]}


def test_an_icrl_history_gives_the_published_turns_and_config():
    # inputs q1, q2 with predictions billing (right) and refund (wrong), then the new input q3:
    # the published formatter opens with q1, answers each with "<prefix> <prediction>", and merges
    # each feedback and the next input into one user turn, a blank line between them.
    context = [Episode("Message: q1", "billing", 1, "billing", 1), Episode("Message: q2", "refund", 0, "delivery", 0)]
    rendered = req.render(*build_messages(TASK, context, "Message: q3", "icrl"))
    request = req.decode(rendered)
    assert request["system_instruction"] == SYSTEM
    assert request["contents"] == [
        _user("Message: q1"), _model("Intent: billing"),
        _user("'billing' is the correct answer! Good job!\n\nMessage: q2"), _model("Intent: refund"),
        _user("The answer 'refund' is wrong! You can do better!\n\nMessage: q3")]
    config = req.generation_config(request["system_instruction"], request["prefix"], LABELS, 0.7, None)
    assert config == {
        "system_instruction": SYSTEM, "candidate_count": 1, "temperature": 0.7,
        "response_mime_type": "text/x.enum",
        "response_schema": {"type": "STRING", "enum": ["Intent: billing", "Intent: refund", "Intent: delivery"]},
        "safety_settings": [{"category": c, "threshold": "BLOCK_NONE"} for c in (
            "HARM_CATEGORY_HATE_SPEECH", "HARM_CATEGORY_HARASSMENT", "HARM_CATEGORY_DANGEROUS_CONTENT",
            "HARM_CATEGORY_SEXUALLY_EXPLICIT")]}


def test_supervised_icl_answers_with_gold_labels_in_model_turns():
    context = [Episode("Message: q1", "refund", 0, "billing", 0)]
    request = req.decode(req.render(*build_messages(TASK, context, "Message: q2", "icl")))
    assert request["system_instruction"].startswith("You are an useful assistant. Answer the following questions.\n")
    assert request["contents"] == [_user("Message: q1"), _model("Intent: billing"), _user("Message: q2")]


def test_the_seed_is_ours_and_only_added_when_given():
    assert req.generation_config("s", "Intent:", LABELS, 0.0, 7)["seed"] == 7
    assert "seed" not in req.generation_config("s", "Intent:", LABELS, 0.0, None)
    with pytest.raises(UsageError, match="temperature"):
        req.generation_config("s", "Intent:", LABELS, -1.0, 0)


def test_plain_text_is_not_a_rendered_prompt():
    assert req.decode("Message: q1") is None
    assert req.decode('{"messages": []}') is None


def test_a_system_message_after_a_turn_is_refused():
    with pytest.raises(ValueError, match="first"):
        req.turns([{"role": "user", "content": "a"}, {"role": "system", "content": "b"}])


def test_count_contents_put_the_instruction_first_as_a_user_turn():
    request = {"system_instruction": "S", "contents": [_user("q")], "prefix": "Intent:"}
    assert req.counted_contents(request) == [_user("S"), _user("q")]
    assert req.text_contents("hello") == [_user("hello")]


def _response(text=None, block=None, finish="STOP"):
    content = SimpleNamespace(parts=[SimpleNamespace(text=text)]) if text is not None else None
    candidates = [] if block else [SimpleNamespace(content=content, finish_reason=finish)]
    return SimpleNamespace(prompt_feedback=SimpleNamespace(block_reason=block) if block else None,
                           candidates=candidates)


def test_answers_are_read_back_to_labels():
    assert req.label_of(req.answer_text(_response("Intent: refund")), "Intent:", LABELS) == "refund"
    assert req.label_of(" Intent: refund\n", "Intent:", LABELS) == "refund"
    assert req.label_of("refund", "Intent:", LABELS) is None
    assert req.label_of("Intent: nothing", "Intent:", LABELS) is None


@pytest.mark.parametrize("response, why", [
    (_response(block="PROHIBITED_CONTENT"), "blocked (PROHIBITED_CONTENT)"),
    (_response(None, finish="SAFETY"), "empty (finish reason SAFETY)"),
    (SimpleNamespace(prompt_feedback=None, candidates=None), "no candidate"),
])
def test_a_blocked_or_empty_answer_says_why(response, why):
    with pytest.raises(req.Blocked, match=why.replace("(", r"\(").replace(")", r"\)")):
        req.answer_text(response)


def test_the_shared_head_is_every_turn_but_the_last_when_all_requests_share_it():
    context = [Episode("Message: q1", "billing", 1, "billing", 1)]
    a, b = (req.decode(req.render(*build_messages(TASK, context, q, "icrl"))) for q in ("Message: q2", "Message: q3"))
    assert req.shared_head([a, b]) == (SYSTEM, [_user("Message: q1"), _model("Intent: billing")])
    assert req.shared_head([a]) is None  # one request: nothing to share
    other = req.decode(req.render(*build_messages(TASK, [], "Message: q3", "icrl")))
    assert req.shared_head([a, other]) is None  # another context
    assert req.shared_head([other, other]) is None  # no context: nothing but the last turn


def test_a_cached_request_names_its_cache_in_place_of_the_instruction():
    config = req.generation_config(SYSTEM, "Intent:", LABELS, 0.0, 1, cache="cachedContents/x")
    assert config["cached_content"] == "cachedContents/x" and "system_instruction" not in config
