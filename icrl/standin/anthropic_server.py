"""A stand-in for Anthropic's Messages API on 127.0.0.1 (stdlib only), for the anthropic backend's
tests: the real ``anthropic`` SDK talks to it through ``--base_url``. A protocol stand-in, not
the service: no model, no real token counts, no minimum cacheable length.

It serves ``GET /v1/models/{id}`` (and the list), ``POST /v1/messages`` and
``POST /v1/messages/count_tokens`` as the SDK sends them, and checks every request's shape
(``problems`` collects what is wrong; such a request gets a 400): the key (``x-api-key``, or
``Authorization: Bearer`` as SDK 2 sends it), an
``anthropic-version`` header, a known model, the system prompt in ``system``, alternating turns
that start with ``user``, at most one cache breakpoint, on an assistant turn before the last, and
either a forced call of the ``answer`` tool whose ``label`` is an enum (chat mode; no prefill,
which the API refuses with tools), or no tool: text after a prefilled prediction prefix
(completions mode: the last turn the assistant's, not ending in white space), else free text
(--reasoning) after the last user turn.

The label it answers is the fake model's (``icrl.backends.fake.fake_label``) of the query only
(the last user turn; the API takes no seed), so a run gives the same records however often it
is interrupted. Its usage counts words as tokens and emulates the prompt cache: the prefix up to
the breakpoint is written the first time and read after.

``fail``: cues answered to ``/v1/messages`` in order before real answers: ``"429"``, ``"500"``,
``"hang"`` (never answers), ``"malformed"`` (a 200 that is not JSON), ``"nonlabel"`` (an answer
outside the labels), ``"empty"`` (no content).
"""

from __future__ import annotations

import json
import threading
import time
from email.message import Message
from typing import Any, Optional, Sequence

from ..backends.fake import fake_label
from .http import HOST, QuietServer, Reply, Served, routed

MODEL = "claude-standin-1"
KEY = "sk-ant-standin-SECRET"


def _words(value: object) -> int:
    return len(json.dumps(value, ensure_ascii=False).split())


class FakeAnthropicServer(Served):
    """``with FakeAnthropicServer(labels) as s: s.base_url`` (http://127.0.0.1:PORT)."""

    def __init__(self, labels: Sequence[str] = (), fail: Sequence[str] = (), models: Sequence[str] = (MODEL,),
                 key: str = KEY, fail_all: Optional[str] = None, delay: float = 0.0, window: Optional[int] = 200000,
                 port: int = 0) -> None:
        self.labels, self.fail, self.models, self.key = list(labels), list(fail), list(models), key
        self.window = window  # the models' max_input_tokens (None: not said, as older API versions)
        self.delay = delay  # seconds before each answer to /v1/messages
        self.fail_all = fail_all  # a cue answered to every /v1/messages request
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.problems: list[str] = []
        self.cached: set[str] = set()
        self.lock = threading.Lock()
        self.httpd = QuietServer(routed(self.handle), port)
        self.port = self.httpd.port
        self.base_url = f"http://{HOST}:{self.port}"
        self.serve()  # from the start: some tests use it without ``with``

    @property
    def messages(self) -> list[dict[str, Any]]:
        return [body for path, body in self.requests if path == "/v1/messages"]

    # -- routes ------------------------------------------------------------------------------
    def handle(self, method: str, path: str, headers: Message, body: dict[str, Any]) -> Reply:
        with self.lock:
            self.requests.append((path, body))
        if self.key not in (headers.get("x-api-key"), (headers.get("authorization") or "").removeprefix("Bearer ")):
            return 401, _error("authentication_error", "invalid x-api-key")
        if not headers.get("anthropic-version"):
            return 400, _error("invalid_request_error", "anthropic-version header is required")
        if method == "GET" and path == "/v1/models":
            return 200, {"data": [_model(m, self.window) for m in self.models], "has_more": False, "first_id": None,
                         "last_id": None}
        if method == "GET" and path.startswith("/v1/models/"):
            name = path.rsplit("/", 1)[1]
            if name not in self.models:
                return 404, _error("not_found_error", f"model: {name}")
            return 200, _model(name, self.window)
        if method != "POST" or path not in ("/v1/messages", "/v1/messages/count_tokens"):
            return 404, _error("not_found_error", f"no route {method} {path}")
        if body.get("model") not in self.models:
            return 404, _error("not_found_error", f"model: {body.get('model')}")
        problems = self.check(body, counting=path.endswith("count_tokens"))
        if problems:
            with self.lock:
                self.problems += problems
            return 400, _error("invalid_request_error", "; ".join(problems))
        if path.endswith("count_tokens"):
            return 200, {"input_tokens": _words([body.get("system"), body["messages"], body.get("tools")])}
        with self.lock:
            cue = self.fail_all or (self.fail.pop(0) if self.fail else None)
        return self.answer(body, cue)

    def check(self, body: dict[str, Any], counting: bool = False) -> list[str]:
        """What is wrong with a request's shape (nothing: an empty list)."""
        out: list[str] = []
        turns = body.get("messages") or []
        if "system" in body and not isinstance(body["system"], str):
            out.append("system is not a string")
        if any(t.get("role") not in ("user", "assistant") for t in turns):
            out.append("a turn's role is neither user nor assistant")
        if not turns or turns[0].get("role") != "user":
            out.append("the first turn is not the user's")
        if any(a.get("role") == b.get("role") for a, b in zip(turns, turns[1:])):
            out.append("two turns of one role in a row")
        marked = [i for i, t in enumerate(turns) if isinstance(t.get("content"), list)
                  and any("cache_control" in block for block in t["content"])]
        if len(marked) > 1 or marked and (turns[marked[0]]["role"] != "assistant" or marked[0] == len(turns) - 1):
            out.append(f"cache breakpoints on turns {marked}, not on one context turn")
        if counting:
            return out
        prefilled = bool(turns) and turns[-1].get("role") == "assistant"
        if body.get("tools"):
            tool = body["tools"][0]
            enum = tool["input_schema"]["properties"]["label"]["enum"]
            if body.get("tool_choice") != {"type": "tool", "name": tool["name"]} or prefilled:
                out.append("a tool without a forced tool_choice, or with a prefill (the API refuses it)")
            if self.labels and enum != self.labels:
                out.append(f"the tool's enum {enum} is not the labels")
        elif prefilled and str(turns[-1]["content"]) != str(turns[-1]["content"]).rstrip():
            out.append("a prefill ending in white space (the API refuses it)")
        if not isinstance(body.get("max_tokens"), int):
            out.append("no max_tokens")
        if "seed" in body or "temperature" in body:
            out.append("a seed or a temperature (the API version takes neither)")
        return out

    def answer(self, body: dict[str, Any], cue: Optional[str]) -> Reply:
        """A message answering a label chosen from the query (or the cue's misbehaviour)."""
        time.sleep(self.delay)
        if cue == "hang":
            time.sleep(3600)
        if cue in ("429", "500"):
            kind = "rate_limit_error" if cue == "429" else "api_error"
            return int(cue), _error(kind, f"stand-in {cue}"), {"retry-after-ms": "1"}
        if cue == "malformed":
            return 200, b'{"id": "msg_1", "content": [', {}
        tools = body.get("tools")
        labels = tools[0]["input_schema"]["properties"]["label"]["enum"] if tools else self.labels
        query = [t for t in body["messages"] if t["role"] == "user"][-1]["content"]
        label = "not-a-label" if cue == "nonlabel" else fake_label(json.dumps(query), labels, None)
        content: list[dict[str, Any]]
        if cue == "empty":
            content = []
        elif tools:
            content = [{"type": "tool_use", "id": "toolu_1", "name": tools[0]["name"], "input": {"label": label}}]
        elif body["messages"][-1]["role"] == "assistant":
            content = [{"type": "text", "text": " " + label}]
        else:  # free text (reasoning), ending with the prediction prefix's answer
            content = [{"type": "text", "text": f"It reads like {label}.\nIntent: {label}"}]
        return 200, {"id": "msg_1", "type": "message", "role": "assistant", "model": body["model"],
                     "content": content, "stop_reason": "tool_use" if tools else "end_turn",
                     "stop_sequence": None, "usage": self.usage(body)}, {}

    def usage(self, body: dict[str, Any]) -> dict[str, int]:
        """Words as tokens; the prefix up to the breakpoint written to the cache once, read after."""
        turns = body["messages"]
        cut = next((i + 1 for i, t in enumerate(turns) if isinstance(t["content"], list)), 0)
        head = [body.get("tools"), body.get("system"), turns[:cut]] if cut else None
        total = _words([body.get("system"), turns, body.get("tools")])
        prefix = _words(head) if head else 0
        key = json.dumps(head, sort_keys=True)
        with self.lock:
            hit = bool(head) and key in self.cached
            if head:
                self.cached.add(key)
        return {"input_tokens": max(total - prefix, 1), "output_tokens": 3,
                "cache_read_input_tokens": prefix if hit else 0,
                "cache_creation_input_tokens": 0 if hit else prefix}


def _model(name: str, window: Optional[int]) -> dict[str, Any]:
    said = {"max_input_tokens": window, "max_tokens": 64000} if window else {}
    return {"type": "model", "id": name, "display_name": name, "created_at": "2025-01-01T00:00:00Z",
            "lifecycle": "active", **said}


def _error(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}
