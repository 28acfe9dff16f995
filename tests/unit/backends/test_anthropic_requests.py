"""What the anthropic backend sends, without a network: the run's messages as the Messages API
takes them, the two answer modes, the cache breakpoint after the last context episode, and
the usage read back."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from icrl.backends import anthropic_requests as ar
from icrl.backends.usage import Usage
from icrl.method.episode import Episode
from icrl.method.prompts import SYSTEM_PROMPT_ICRL, build_messages

LABELS = ["billing", "refund", "delivery", "account"]
TASK = SimpleNamespace(prediction_prefix="Intent:", description="Classify each customer message by its intent.")


def history():
    """A fixed ICRL history: two episodes (one right, one wrong), then the query."""
    context = [Episode(prompt="Message: where is my parcel", prediction="delivery", feedback=1, answer="delivery",
                       accuracy=1),
               Episode(prompt="Message: charge me once", prediction="refund", feedback=0, answer="billing",
                       accuracy=0)]
    return build_messages(TASK, context, "Message: I want my money back", "icrl")


def test_the_run_messages_become_system_and_alternating_turns_with_one_breakpoint_after_the_context():
    messages, prefix = history()
    body = ar.message_request("claude-x", messages, prefix, LABELS, "chat")
    assert body["system"] == f"{SYSTEM_PROMPT_ICRL}\n{TASK.description}"
    cached = {"type": "text", "cache_control": {"type": "ephemeral"}, "text": "Intent: refund"}
    assert body["messages"] == [
        {"role": "user", "content": "Message: where is my parcel"},
        {"role": "assistant", "content": "Intent: delivery"},
        {"role": "user", "content": "'delivery' is the correct answer! Good job!\n\nMessage: charge me once"},
        {"role": "assistant", "content": [cached]},
        {"role": "user",
         "content": "The answer 'refund' is wrong! You can do better!\n\nMessage: I want my money back"}]
    assert "temperature" not in body and "seed" not in body  # the API's version takes neither


def test_chat_mode_forces_one_tool_call_whose_label_is_an_enum_and_prefills_nothing():
    messages, prefix = history()
    body = ar.message_request("claude-x", messages, prefix, LABELS, "chat")
    (tool,) = body["tools"]
    assert body["tool_choice"] == {"type": "tool", "name": tool["name"]}
    assert tool["input_schema"]["properties"]["label"] == {"type": "string", "enum": LABELS}
    assert tool["input_schema"]["required"] == ["label"] and "Intent:" in tool["description"]
    assert body["messages"][-1]["role"] == "user"  # the API refuses a prefill with tools


def test_completions_mode_prefills_the_prediction_prefix_and_stops_at_the_line_end():
    messages, _ = history()
    body = ar.message_request("claude-x", messages, "Intent: ", LABELS, "completions")
    assert body["messages"][-1] == {"role": "assistant", "content": "Intent:"}  # no trailing space: refused
    assert body["stop_sequences"] == ["\n"] and "tools" not in body
    assert body["max_tokens"] == len(" delivery") + 1
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user", "assistant", "user", "assistant"]
    assert isinstance(body["messages"][3]["content"], list)  # the breakpoint: the last context turn, not the prefill


def test_a_zero_shot_prompt_has_no_breakpoint_and_turns_of_one_role_are_joined():
    messages, prefix = build_messages(TASK, [], "Message: hello", "zero_shot")
    body = ar.message_request("claude-x", messages, prefix, LABELS, "chat")
    assert body["messages"] == [{"role": "user", "content": "Message: hello"}]
    system, turns = ar.turns_of([{"role": "system", "content": "s"}, {"role": "user", "content": "a"},
                                 {"role": "user", "content": "b"}])
    assert system == "s" and turns == [{"role": "user", "content": "a\n\nb"}]


def test_the_token_count_request_is_the_prompt_as_the_completions_mode_sends_it():
    messages, prefix = history()
    body = ar.count_request("claude-x", messages, prefix)
    assert body["messages"][-1] == {"role": "assistant", "content": "Intent:"} and "tools" not in body
    assert body["system"].startswith(SYSTEM_PROMPT_ICRL) and "max_tokens" not in body


def test_a_prompt_with_no_user_turn_is_counted_with_its_first_turn_as_the_users():
    """The window search's context of no episode: the system prompt and the prefix alone."""
    body = ar.count_request("claude-x", [{"role": "system", "content": "s"}], "Intent:")
    assert body == {"model": "claude-x", "system": "s", "messages": [{"role": "user", "content": "Intent:"}]}


def block(**fields):
    return SimpleNamespace(**fields)


@pytest.mark.parametrize("text, label", [(" refund", "refund"), ("refund\n", "refund"), (" refunds", None),
                                         (" Refund", None), ("", None)])
def test_the_text_after_the_prefix_is_a_label_or_none(text, label):
    assert ar.parse_text(text, LABELS) == label


def test_the_tool_call_gives_its_label_or_none_with_what_the_model_gave():
    ok = SimpleNamespace(content=[block(type="tool_use", name="answer", input={"label": "billing"})])
    off = SimpleNamespace(content=[block(type="tool_use", name="answer", input={"label": "other"})])
    text = SimpleNamespace(content=[block(type="text", text="I cannot")])
    assert ar.parse_tool(ok, LABELS)[0] == "billing"
    assert ar.parse_tool(off, LABELS) == (None, "{'label': 'other'}")
    assert ar.parse_tool(text, LABELS) == (None, "'I cannot'")


def test_usage_counts_cache_reads_and_writes_as_prompt_tokens_and_the_reads_as_cached():
    usage = SimpleNamespace(input_tokens=10, cache_read_input_tokens=900, cache_creation_input_tokens=50,
                            output_tokens=4)
    assert ar.usage_of(usage) == Usage(prompt_tokens=960, cached_prompt_tokens=900, output_tokens=4, requests=1)
    plain = SimpleNamespace(input_tokens=7, cache_read_input_tokens=None, cache_creation_input_tokens=None,
                            output_tokens=2)
    assert ar.usage_of(plain) == Usage(7, 0, 2, 1)


def test_the_rendered_prompt_fixes_the_breakpoint_before_turns_are_added_after_the_query():
    messages, prefix = history()
    doc = json.loads(ar.encode_prompt(messages, prefix))
    assert doc["cache_at"] == 3 and doc["prefix"] == "Intent:"  # the context's last prediction
    longer = [*messages, {"role": "assistant", "content": "Some reasoning."}, {"role": "user", "content": "Answer."}]
    body = ar.message_request("claude-x", longer, prefix, LABELS, "chat", doc["cache_at"])
    assert [i for i, t in enumerate(body["messages"]) if isinstance(t["content"], list)] == [3]
    assert ar.message_request("claude-x", longer, prefix, LABELS, "chat", None)["messages"] == ar.turns_of(longer)[1]
