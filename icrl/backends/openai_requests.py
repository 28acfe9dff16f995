"""What the OpenAI-compatible backend sends and reads back, without a network: the request bodies
(a constrained completion, a chat request whose JSON schema allows only the labels, free text
after a rendered prompt), the label parsed from a reply, chat mode's messages passed as the
"rendered prompt" and its reasoning frame, and the prompts' shared text prefix."""

from __future__ import annotations

import json
import os
from typing import Any, Optional, Sequence

from .choices import choices, max_label_tokens, sampling_kwargs
from .frame import Message, ReasoningFrame

CHAT_FIELD = "label"


def constraint_body(labels: Sequence[str], constraint: str) -> dict[str, Any]:
    """`extra_body` of a completions request that only allows ` <label>`."""
    if constraint == "structured_outputs":
        return {"structured_outputs": {"choice": choices(labels)}}
    if constraint == "guided_choice":
        return {"guided_choice": choices(labels)}
    raise ValueError(f"unknown constraint {constraint!r}")


def completion_request(model: str, prompt: str, labels: Sequence[str], temperature: float, seed: int,
                       constraint: str = "structured_outputs") -> dict[str, Any]:
    """Keyword arguments of `client.completions.create` for one rendered prompt. The rendered
    template already holds its special tokens, so the server must not add a BOS again."""
    sampling = sampling_kwargs(temperature, seed, max_label_tokens(labels))
    return {"model": model, "prompt": prompt, **sampling,
            "extra_body": {**constraint_body(labels, constraint), "add_special_tokens": False}}


def label_schema(labels: Sequence[str]) -> dict[str, Any]:
    """`response_format` of a chat request: a JSON object whose one field is one of the labels."""
    return {"type": "json_schema", "json_schema": {
        "name": "prediction", "strict": True,
        "schema": {"type": "object", "properties": {CHAT_FIELD: {"type": "string", "enum": list(labels)}},
                   "required": [CHAT_FIELD], "additionalProperties": False}}}


def chat_request(model: str, messages: Sequence[Message], labels: Sequence[str], temperature: float,
                 seed: int) -> dict[str, Any]:
    """Keyword arguments of `client.chat.completions.create` for one prompt."""
    sampling = sampling_kwargs(temperature, seed, 0)
    sampling["max_tokens"] = 32 + max(len(label.encode("utf-8")) for label in labels) + len(CHAT_FIELD)
    return {"model": model, "messages": list(messages), **sampling, "response_format": label_schema(labels)}


def parse_completion(text: Optional[str], labels: Sequence[str]) -> Optional[str]:
    """The label a completion wrote (` <label>`), or None when it is not one."""
    label = (text or "").strip()
    return label if label in labels else None


def parse_chat(text: Optional[str], labels: Sequence[str]) -> Optional[str]:
    """The label of a chat answer (`{"label": "..."}`, as the schema asks; a JSON string, or a
    label as plain text from a server that ignores the schema's form but answers a label), or
    None when it is not one."""
    try:
        value = json.loads(text or "")
    except ValueError:
        value = None
    if not isinstance(value, (dict, str)):  # plain text (a label "42" reads as a JSON number)
        value = (text or "").strip()
    label = value.get(CHAT_FIELD) if isinstance(value, dict) else value
    return label if isinstance(label, str) and label in labels else None


def encode_messages(messages: Sequence[Message], prefix: str) -> str:
    """Chat mode's 'rendered prompt': the messages themselves, as JSON (the server renders)."""
    return json.dumps({"messages": list(messages), "prefix": prefix}, ensure_ascii=False)


def decode_messages(rendered: str) -> list[Message]:
    return json.loads(rendered)["messages"]


def free_completion_request(model: str, prompt: str, max_tokens: int, temperature: float, seed: int,
                            stop: Sequence[str]) -> dict[str, Any]:
    """Keyword arguments of `client.completions.create` for free text after a rendered prompt."""
    return {"model": model, "prompt": prompt, **sampling_kwargs(temperature, seed, max_tokens), "stop": list(stop),
            "extra_body": {"add_special_tokens": False}}


def chat_frame(messages: Sequence[Message], prefix: str) -> ReasoningFrame:
    """Chat mode's reasoning frame: the messages (the server renders them); the answer's
    prompt adds the reasoning as the assistant's message and asks for the answer."""
    class ChatFrame(ReasoningFrame):
        def answer_prompt(self, reasoning: str) -> str:
            doc = json.loads(self.prompt)
            doc["messages"] += [{"role": "assistant", "content": reasoning.strip()},
                                {"role": "user", "content": f"Now give your answer ({doc['prefix']})."}]
            return json.dumps(doc, ensure_ascii=False)

    return ChatFrame(encode_messages(messages, prefix), prefix, "", prefix)


def shared_text_prefix(prompts: Sequence[str]) -> str:
    """The prompts' longest common text prefix, cut after its last newline (a clean token
    boundary in chat templates), so that it tokenizes as the start of every prompt."""
    if len(prompts) < 2:
        return ""
    head = os.path.commonprefix(list(prompts))
    cut = head.rfind("\n")
    return head[:cut + 1] if cut >= 0 else ""
