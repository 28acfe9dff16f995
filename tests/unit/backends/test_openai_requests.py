"""What the OpenAI-compatible backend sends and reads back (icrl.backends.openai_requests): request
bodies constrained to the labels, the label parsed from a reply, the prompts' shared prefix."""

from __future__ import annotations

import pytest

from icrl.backends import openai_requests as ob
from icrl.errors import UsageError

LABELS = ["card_lost", "card_arrival", "refund"]


def test_completion_request_constrains_to_labels_and_keeps_the_prompt():
    req = ob.completion_request("served", "<|im_start|>user\nhi<|im_end|>\nIntent:", LABELS, 0.0, 7)
    assert req["prompt"].endswith("Intent:") and req["model"] == "served"
    assert req["seed"] == 7 and req["temperature"] == 0.0
    assert req["max_tokens"] >= max(len(x) for x in LABELS) + 1
    assert req["extra_body"] == {"structured_outputs": {"choice": [" card_lost", " card_arrival", " refund"]},
                                 "add_special_tokens": False}
    old = ob.completion_request("served", "p", LABELS, 1.0, 1, constraint="guided_choice")
    assert old["extra_body"]["guided_choice"] == [" " + x for x in LABELS]
    with pytest.raises(UsageError):
        ob.completion_request("served", "p", LABELS, -1.0, 1)


def test_chat_request_uses_a_json_schema_enum():
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    req = ob.chat_request("gpt-x", messages, LABELS, 1.0, 5)
    assert req["messages"] == messages and req["seed"] == 5 and req["temperature"] == 1.0
    schema = req["response_format"]["json_schema"]["schema"]
    assert req["response_format"]["type"] == "json_schema"
    assert schema["properties"]["label"]["enum"] == LABELS and schema["required"] == ["label"]


def test_parsing():
    assert ob.parse_completion(" refund", LABELS) == "refund"
    assert ob.parse_completion(" refunds", LABELS) is None and ob.parse_completion(None, LABELS) is None
    assert ob.parse_chat('{"label": "card_lost"}', LABELS) == "card_lost"
    assert ob.parse_chat('"refund"', LABELS) == "refund"
    assert ob.parse_chat('{"label": "other"}', LABELS) is None and ob.parse_chat("not json", LABELS) is None
    # a server that ignores the schema's JSON form but answers a label as plain text: that label
    assert ob.parse_chat("refund", LABELS) == "refund" and ob.parse_chat(" card_lost\n", LABELS) == "card_lost"
    assert ob.parse_chat("42", ["41", "42"]) == "42" and ob.parse_chat("refund, I think", LABELS) is None
    rendered = ob.encode_messages([{"role": "user", "content": "é"}], "Intent:")
    assert ob.decode_messages(rendered) == [{"role": "user", "content": "é"}]


def test_shared_text_prefix_ends_at_a_newline():
    assert ob.shared_text_prefix(["ctx\nline\nA?", "ctx\nline\nB?"]) == "ctx\nline\n"
    assert ob.shared_text_prefix(["ctx\nlin A", "ctx\nlin B"]) == "ctx\n"
    assert ob.shared_text_prefix(["only one"]) == "" and ob.shared_text_prefix(["a", "b"]) == ""
