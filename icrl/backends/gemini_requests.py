"""What the gemini backend sends to Google's Gemini API and reads back, without a network.

The published protocol (lil-lab/icrl, its Gemini wrapper), field for field:

- the system prompt is the request's ``system_instruction``; the history is ``contents``,
  alternating ``user`` and ``model`` turns, each one text part; a feedback and the next input
  share one user turn, joined by a blank line (``icrl.method.prompts`` already joins them);
- ``generation_config``: ``candidate_count`` 1, the run's ``temperature``,
  ``response_mime_type`` ``text/x.enum`` and a ``STRING`` schema whose enum is
  ``"<prediction prefix> <label>"`` for every label;
- ``safety_settings``: the four harm categories at ``BLOCK_NONE``.

Ours besides: the run's seed as ``generation_config.seed`` (the published SDK had none).

A "rendered prompt" of this backend is the request's messages as JSON (``render``): the
loop passes it to ``predict`` unchanged, and ``decode`` reads it back.
"""

from __future__ import annotations

import json
from typing import Any, Optional, Sequence

from ..errors import UsageError
from .frame import Message

HARM_CATEGORIES = ("HARM_CATEGORY_HATE_SPEECH", "HARM_CATEGORY_HARASSMENT", "HARM_CATEGORY_DANGEROUS_CONTENT",
                   "HARM_CATEGORY_SEXUALLY_EXPLICIT")
ENUM_MIME_TYPE = "text/x.enum"
_MARK = "gemini_request"  # the key that tells a rendered prompt from plain text


def turns(messages: Sequence[Message]) -> tuple[str, list[dict[str, Any]]]:
    """(system instruction, contents) of chat messages: the system message becomes the
    instruction, ``assistant`` turns become ``model`` turns, each turn one text part."""
    system = ""
    contents: list[dict[str, Any]] = []
    for message in messages:
        role, text = message["role"], message["content"]
        if role == "system":
            if contents or system:
                raise ValueError("the system message must come first, and only once")
            system = text
            continue
        if role not in ("user", "assistant"):
            raise ValueError(f"unknown message role {role!r}")
        contents.append({"role": "model" if role == "assistant" else "user", "parts": [{"text": text}]})
    return system, contents


def render(messages: Sequence[Message], prefix: str) -> str:
    """The backend's rendered prompt: the request's messages and the prediction prefix, as JSON."""
    return encode(*turns(messages), prefix)


def encode(system: str, contents: Sequence[dict[str, Any]], prefix: str = "") -> str:
    return json.dumps({_MARK: {"system_instruction": system, "contents": list(contents), "prefix": prefix}},
                      ensure_ascii=False)


def shared_head(requests: Sequence[dict[str, Any]]) -> Optional[tuple[str, list[dict[str, Any]]]]:
    """(system instruction, turns) that every request of a call starts with: all turns but the
    last (the user turn with the new input), when two or more requests share them; else None.
    A context cache holds them, and each request then sends its last turn alone."""
    if len(requests) < 2:
        return None
    first = requests[0]
    head = first["contents"][:-1]
    if not head or any(r["system_instruction"] != first["system_instruction"] or r["contents"][:-1] != head
                       for r in requests[1:]):
        return None
    return first["system_instruction"], head


def decode(rendered: str) -> Optional[dict[str, Any]]:
    """The request's messages of a rendered prompt (None for plain text)."""
    if not rendered.startswith('{"' + _MARK):
        return None
    return json.loads(rendered)[_MARK]


def enum_answers(prefix: str, labels: Sequence[str]) -> list[str]:
    """The enum the answer is held to: the prediction prefix, a space, the label."""
    return [f"{prefix} {label}" for label in labels]


def generation_config(system: str, prefix: str, labels: Sequence[str], temperature: float,
                      seed: Optional[int], cache: Optional[str] = None) -> dict[str, Any]:
    """The ``config`` of ``models.generate_content`` (the SDK's GenerateContentConfig fields);
    with ``cache`` (a context cache's name, which holds the system instruction) no instruction."""
    if temperature < 0:
        raise UsageError(f"--temperature must be >= 0, got {temperature}")
    config: dict[str, Any] = {
        "candidate_count": 1, "temperature": float(temperature), "response_mime_type": ENUM_MIME_TYPE,
        "response_schema": {"type": "STRING", "enum": enum_answers(prefix, labels)},
        "safety_settings": [{"category": c, "threshold": "BLOCK_NONE"} for c in HARM_CATEGORIES]}
    if cache is not None:
        config["cached_content"] = cache
    elif system:
        config["system_instruction"] = system
    if seed is not None:
        config["seed"] = int(seed)
    return config


def counted_contents(request: dict[str, Any]) -> list[dict[str, Any]]:
    """What ``countTokens`` counts for a request: the Gemini API counts no system instruction
    there, so it goes first as a user turn of its own."""
    system = request["system_instruction"]
    return (text_contents(system) if system else []) + list(request["contents"])


def text_contents(text: str) -> list[dict[str, Any]]:
    """``countTokens`` contents of plain text (a prompt, a feedback): one user turn."""
    return [{"role": "user", "parts": [{"text": text}]}]


class Blocked(Exception):
    """The API answered with no usable candidate (a safety block, an empty candidate)."""


def answer_text(response: Any) -> str:
    """The text of a generateContent response's one candidate; ``Blocked`` with the reason
    when the prompt or the candidate was blocked or the candidate is empty."""
    feedback = getattr(response, "prompt_feedback", None)
    reason = getattr(feedback, "block_reason", None) if feedback is not None else None
    if reason:
        raise Blocked(f"the prompt was blocked ({_name(reason)})")
    candidates = response.candidates or []
    if not candidates:
        raise Blocked("no candidate came back")
    candidate = candidates[0]
    parts = (candidate.content.parts if candidate.content is not None else None) or []
    text = "".join(part.text or "" for part in parts)
    if not text:
        finish = getattr(candidate, "finish_reason", None)
        raise Blocked(f"the candidate is empty (finish reason {_name(finish) if finish else 'none'})")
    return text


def label_of(text: str, prefix: str, labels: Sequence[str]) -> Optional[str]:
    """The label whose ``"<prefix> <label>"`` the answer is (None when it is none of them)."""
    wanted = dict(zip(enum_answers(prefix, labels), labels))
    return wanted.get(text.strip())


def _name(value: object) -> str:
    return str(getattr(value, "name", value))
