"""What the Anthropic backend sends to the Messages API and reads back, without a network.

The messages are the run's own (``icrl.method.prompts.build_messages``): the system prompt goes
to the request's ``system`` field, the history as alternating ``user`` / ``assistant`` turns
(turns of one role in a row, which the run never builds, are joined with a blank line). The last
context turn (the last ``assistant`` turn before the query, fixed when the prompt is rendered) carries a
cache breakpoint
(``cache_control: {"type": "ephemeral"}``): the system prompt and every context episode before
it are one cacheable prefix, shared by the prompts of a test step.

Two ways to answer (``api_mode``):

* ``completions`` (prefill): the assistant turn is prefilled with the prediction prefix (such as
  ``Intent:``), so the model writes `` <label>`` right after it, as in the published protocol;
  the API cannot restrict that text, so the answer is checked against the labels here.
* ``chat`` (forced tool call): no prefill; ``tool_choice`` forces one call of the tool
  ``answer`` whose one argument ``label`` is an enum of the labels. The API refuses a prefill
  together with tools, so here the prediction prefix is not forced.

``usage_of`` turns the API's ``usage`` into ``icrl.backends.usage.Usage``: input tokens, cache
reads and cache writes together are the prompt tokens, cache reads the cached part.
"""

from __future__ import annotations

import json
from typing import Any, Optional, Sequence

from .choices import max_label_tokens
from .frame import Message
from .usage import Usage

TOOL = "answer"
FIELD = "label"
CACHE = {"type": "ephemeral"}
MODES = ("completions", "chat")
AUTO = -1  # with_breakpoint: the last context turn of the turns given


def turns_of(messages: Sequence[Message]) -> tuple[Optional[str], list[dict[str, Any]]]:
    """(the system prompt or None, the user/assistant turns with turns of one role in a row joined
    by a blank line)."""
    system = None
    turns: list[dict[str, Any]] = []
    for message in messages:
        role, content = message["role"], message["content"]
        if role == "system":
            system = content if system is None else f"{system}\n\n{content}"
        elif turns and turns[-1]["role"] == role:
            turns[-1] = {"role": role, "content": f"{turns[-1]['content']}\n\n{content}"}
        else:
            turns.append({"role": role, "content": content})
    return system, turns


def breakpoint_at(turns: Sequence[dict[str, Any]]) -> Optional[int]:
    """The index of the last context turn: the last assistant turn before the final (query) turn;
    None without a context."""
    for i in range(len(turns) - 2, -1, -1):
        if turns[i]["role"] == "assistant":
            return i
    return None


def with_breakpoint(turns: list[dict[str, Any]], at: Optional[int] = AUTO) -> list[dict[str, Any]]:
    """The turns with a cache breakpoint on turn ``at`` (``AUTO``: ``breakpoint_at(turns)``; None:
    none), an assistant turn."""
    out = [dict(turn) for turn in turns]
    at = breakpoint_at(turns) if at == AUTO else at
    if at is not None and 0 <= at < len(out) and out[at]["role"] == "assistant":
        out[at]["content"] = [{"type": "text", "text": out[at]["content"], "cache_control": dict(CACHE)}]
    return out


def encode_prompt(messages: Sequence[Message], prefix: str) -> str:
    """The backend's "rendered prompt": the messages (the API renders them), the prefix and where
    the breakpoint goes (``cache_at``, fixed here, where the query is the last turn: a reasoning
    frame's answer prompt appends turns after it and keeps it)."""
    _, turns = turns_of(messages)
    return json.dumps({"messages": list(messages), "prefix": prefix, "cache_at": breakpoint_at(turns)},
                      ensure_ascii=False)


def answer_tool(labels: Sequence[str], prefix: str) -> dict[str, Any]:
    """The tool the chat mode forces: one argument, an enum of the labels."""
    what = f"the answer that follows '{prefix.strip()}'" if prefix.strip() else "the answer"
    return {"name": TOOL, "description": f"Give {what}: exactly one of the allowed labels.",
            "input_schema": {"type": "object", "properties": {FIELD: {"type": "string", "enum": list(labels)}},
                             "required": [FIELD], "additionalProperties": False}}


def prefill(prefix: str) -> str:
    """The prefilled assistant text: the API refuses one that ends in white space."""
    return prefix.rstrip()


def message_request(model: str, messages: Sequence[Message], prefix: str, labels: Sequence[str], mode: str,
                    cache_at: Optional[int] = AUTO) -> dict[str, Any]:
    """Keyword arguments of ``client.messages.create`` for one prompt. No seed and no temperature:
    the Messages API version the SDK speaks (``anthropic.ANTHROPIC_API_VERSION``) takes neither."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}")
    system, turns = turns_of(messages)
    body: dict[str, Any] = {"model": model, "messages": with_breakpoint(turns, cache_at)}
    if system is not None:
        body["system"] = system
    if mode == "completions":
        if prefill(prefix):
            body["messages"].append({"role": "assistant", "content": prefill(prefix)})
        body["max_tokens"] = max_label_tokens(labels)
        body["stop_sequences"] = ["\n"]
    else:
        body["tools"] = [answer_tool(labels, prefix)]
        body["tool_choice"] = {"type": "tool", "name": TOOL}
        body["max_tokens"] = 64 + max(len(label.encode("utf-8")) for label in labels)
    return body


def free_message_request(model: str, messages: Sequence[Message], max_tokens: int, stop: Sequence[str],
                         cache_at: Optional[int] = AUTO) -> dict[str, Any]:
    """Keyword arguments of ``client.messages.create`` for free text after the messages."""
    system, turns = turns_of(messages)
    body: dict[str, Any] = {"model": model, "messages": with_breakpoint(turns, cache_at),
                            "max_tokens": int(max_tokens)}
    if system is not None:
        body["system"] = system
    if [s for s in stop if s.strip()]:
        body["stop_sequences"] = [s for s in stop if s.strip()]
    return body


def count_request(model: str, messages: Sequence[Message], prefix: str) -> dict[str, Any]:
    """Keyword arguments of ``client.messages.count_tokens``: the prompt as the completions mode
    sends it (system, turns, the prefilled prefix), without the chat mode's tool. A prompt whose
    first turn is not the user's (the window search's context of no episode: the system prompt and
    the prefix) is counted with that turn as the user's, since the API takes no other."""
    system, turns = turns_of(messages)
    if prefill(prefix):
        turns.append({"role": "assistant", "content": prefill(prefix)})
    if turns and turns[0]["role"] != "user":
        turns[0] = {**turns[0], "role": "user"}
    body: dict[str, Any] = {"model": model, "messages": turns}
    if system is not None:
        body["system"] = system
    return body


def text_of(response: Any) -> str:
    """The text blocks of a response, joined (a response without content is an error)."""
    blocks = list(response.content)
    return "".join(getattr(block, "text", "") for block in blocks if getattr(block, "type", None) == "text")


def parse_text(text: str, labels: Sequence[str]) -> Optional[str]:
    """The label written after the prefilled prefix (`` <label>``), or None when it is not one."""
    label = text.strip()
    return label if label in labels else None


def parse_tool(response: Any, labels: Sequence[str]) -> tuple[Optional[str], str]:
    """(the label of the forced tool call or None, what the model gave, for the error line)."""
    for block in response.content:
        if getattr(block, "type", None) == "tool_use" and getattr(block, "name", None) == TOOL:
            value = block.input.get(FIELD) if isinstance(block.input, dict) else None
            return (value if isinstance(value, str) and value in labels else None), repr(block.input)
    return None, repr(text_of(response))


def usage_of(usage: Any) -> Usage:
    """One response's usage: prompt tokens are the uncached input, the cache reads and the cache
    writes together; the cache reads are the cached part."""
    if usage is None:
        return Usage(requests=1)
    read = int(getattr(usage, "cache_read_input_tokens", None) or 0)
    written = int(getattr(usage, "cache_creation_input_tokens", None) or 0)
    return Usage(prompt_tokens=int(usage.input_tokens or 0) + read + written, cached_prompt_tokens=read,
                 output_tokens=int(usage.output_tokens or 0), requests=1)
