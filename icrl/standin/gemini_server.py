"""A stand-in for Google's Gemini API on 127.0.0.1 (stdlib only): it speaks the REST protocol
the google-genai SDK sends (``models.get``, ``models:generateContent``, ``models:countTokens``
under /v1beta), checks every request against the published request shape, and answers.
A protocol stand-in for tests, not the service: its answers are a hash of the request.

- ``GET /v1beta/models/<model>``: the model with ``inputTokenLimit`` (``window``); 404 for
  a model not in ``models``; any request without the key ``key`` is answered 400
  API_KEY_INVALID, as the service answers a wrong key.
- ``:generateContent``: a request whose shape differs from the published one is answered 400
  and its fault kept in ``faults``; else the enum value the fake model picks
  (``icrl.backends.fake.fake_label`` of the contents, with the seed when the temperature is
  above 0), with usage metadata (prompt tokens: words of the request; candidates: 2).
- ``:countTokens``: the words of its contents (times ``per_word``: the tokens of a word, the
  same in every count the stand-in gives).
- ``POST /v1beta/cachedContents``: a context cache (its contents and system instruction),
  refused 400 below ``cache_floor`` words, as the service refuses a cache too small;
  ``DELETE /v1beta/cachedContents/<id>`` deletes it. A generateContent request that names a
  cache is checked, answered and counted as the cache's turns followed by its own; its usage
  reports the cache's words as cached tokens. ``caches``: the caches alive; ``created``: all.
- ``mode`` makes generateContent misbehave on cue: ``429`` / ``500`` (the first ``failures``
  requests, or all when None), ``hang`` (never answers), ``garbage`` (a body that is not
  JSON), ``outside`` (an answer outside the enum), ``blocked`` (the prompt blocked, no
  candidate), ``empty`` (a candidate with no text, finish reason SAFETY); ``delay``: seconds
  before each answer (a run slow enough to be killed mid-way)."""

from __future__ import annotations

import json
import re
import threading
import time
from typing import Any, Iterable, Optional, Sequence

from ..backends.fake import fake_label
from .http import HOST, Body, Quiet, QuietServer, Served, send

MODEL = "gemini-1.5-flash-8b"
KEY = "test-gemini-key-0123456789"
HARMS = ["HARM_CATEGORY_HATE_SPEECH", "HARM_CATEGORY_HARASSMENT", "HARM_CATEGORY_DANGEROUS_CONTENT",
         "HARM_CATEGORY_SEXUALLY_EXPLICIT"]
_PATH = re.compile(r"^/v1beta/models/(?P<model>[^:/?]+)(?::(?P<method>\w+))?")
_CACHE = re.compile(r"^/v1beta/cachedContents(?:/(?P<id>[^/?]+))?$")


def words(contents: Iterable[dict[str, Any]]) -> int:
    return sum(len(part.get("text", "").split()) for turn in contents for part in turn.get("parts", []))


def shape_fault(body: dict[str, Any]) -> Optional[str]:
    """What differs from the published request shape (None: nothing)."""
    if set(body) != {"contents", "systemInstruction", "safetySettings", "generationConfig"}:
        return f"fields {sorted(body)}"
    system = body["systemInstruction"]
    if len(system.get("parts", [])) != 1 or not system["parts"][0].get("text"):
        return "the system instruction is not one text part"
    contents = body["contents"]
    roles = [turn.get("role") for turn in contents]
    if not roles or roles != ["user" if i % 2 == 0 else "model" for i in range(len(roles))] or roles[-1] != "user":
        return f"turns {roles} do not alternate user/model from a user turn to a user turn"
    if any(len(turn.get("parts", [])) != 1 or set(turn["parts"][0]) != {"text"} for turn in contents):
        return "a turn is not one text part"
    if body["safetySettings"] != [{"category": c, "threshold": "BLOCK_NONE"} for c in HARMS]:
        return f"safety settings {body['safetySettings']}"
    config = body["generationConfig"]
    if set(config) != {"candidateCount", "temperature", "seed", "responseMimeType", "responseSchema"}:
        return f"generation config fields {sorted(config)}"
    if config["candidateCount"] != 1 or config["responseMimeType"] != "text/x.enum":
        return "candidate count or response type"
    schema = config["responseSchema"]
    enum = schema.get("enum") or []
    prefix = enum[0].split(" ", 1)[0] if enum else ""
    if set(schema) != {"type", "enum"} or schema["type"] != "STRING" or \
            not all(value.startswith(prefix + " ") for value in enum):
        return f"response schema {schema}"
    model_turns = [turn["parts"][0]["text"] for turn in contents if turn["role"] == "model"]
    if any(text not in enum for text in model_turns):
        return "a model turn is not '<prefix> <label>'"
    return None


class _GeminiHandler(Quiet):
    """The routes; ``stand_in``: the stand-in whose settings they read and whose records they keep
    (each stand-in's own subclass sets it, ``_handler``)."""

    stand_in: GeminiServer

    def _send(self, status: int, body: Body) -> None:
        send(self, status, body)

    def _error(self, status: int, reason: str, message: str) -> None:
        self._send(status, {"error": {"code": status, "message": message, "status": reason}})

    def _refused(self) -> bool:
        if self.headers.get("x-goog-api-key") == self.stand_in.key:
            return False
        self._send(400, {"error": {"code": 400, "message": "API key not valid. Please pass a valid API key.",
                                   "status": "INVALID_ARGUMENT", "details": [{"reason": "API_KEY_INVALID"}]}})
        return True

    def do_GET(self) -> None:
        server = self.stand_in
        if self._refused():
            return
        match = _PATH.match(self.path)
        if match is None or match["method"]:
            return self._send(200, {"models": []}) if self.path.startswith("/v1beta/models") else \
                self._error(404, "NOT_FOUND", "not found")
        if match["model"] not in server.models:
            return self._error(404, "NOT_FOUND", f"models/{match['model']} is not found for API version v1beta")
        self._send(200, {"name": f"models/{match['model']}", "inputTokenLimit": server.window, "outputTokenLimit": 8192,
                         "supportedGenerationMethods": ["generateContent", "countTokens"]})

    def do_POST(self) -> None:
        server = self.stand_in
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if self._refused():
            return
        if _CACHE.match(self.path):
            return self._create_cache(server, body)
        match = _PATH.match(self.path)
        if match is None or match["model"] not in server.models:
            return self._error(404, "NOT_FOUND", "not found")
        if match["method"] == "countTokens":
            server.counted.append(body)
            return self._send(200, {"totalTokens": server.per_word * words(body["contents"])})
        if match["method"] != "generateContent":
            return self._error(404, "NOT_FOUND", "not found")
        with server.lock:
            server.requests.append(body)
            number = len(server.requests)
        self._generate(server, body, number)

    def do_DELETE(self) -> None:
        server = self.stand_in
        if self._refused():
            return
        match = _CACHE.match(self.path)
        name = f"cachedContents/{match['id']}" if match and match["id"] else None
        if name not in server.caches:
            return self._error(404, "NOT_FOUND", f"{name} not found")
        del server.caches[name]
        self._send(200, {})

    def _create_cache(self, server: GeminiServer, body: dict[str, Any]) -> None:
        if set(body) - {"model", "ttl", "contents", "systemInstruction"} or \
                body.get("model") not in [f"models/{m}" for m in server.models]:
            return self._error(400, "INVALID_ARGUMENT", f"not a cache of {', '.join(server.models)}: {sorted(body)}")
        size = server.per_word * (words(body["contents"]) + words([body.get("systemInstruction", {})]))
        if size < server.cache_floor:
            return self._error(400, "INVALID_ARGUMENT", f"Cached content is too small. total_token_count={size}, "
                                                        f"min_total_token_count={server.cache_floor}")
        with server.lock:
            name = f"cachedContents/c{len(server.created)}"
            server.created.append(name)
            server.caches[name] = body
        self._send(200, {"name": name, "model": body["model"], "usageMetadata": {"totalTokenCount": size}})

    def _generate(self, server: GeminiServer, body: dict[str, Any], number: int) -> None:
        mode = server.mode
        time.sleep(server.delay)
        cached = 0
        if "cachedContent" in body:
            cache = server.caches.get(body["cachedContent"])
            if cache is None or "systemInstruction" in body:
                return self._error(400, "INVALID_ARGUMENT", "no such cache, or a system instruction beside one")
            body = {**{k: v for k, v in body.items() if k != "cachedContent"},
                    "contents": cache["contents"] + body["contents"]}
            if "systemInstruction" in cache:
                body["systemInstruction"] = cache["systemInstruction"]
            cached = server.per_word * (words(cache["contents"]) + words([cache.get("systemInstruction", {})]))
        if mode in ("429", "500") and (server.failures is None or number <= server.failures):
            return self._error(int(mode), "RESOURCE_EXHAUSTED" if mode == "429" else "INTERNAL", f"cue {mode}")
        if mode == "hang":
            time.sleep(3600)
        if mode == "garbage":
            return self._send(200, b"\x00\xffnot json at all")
        fault = shape_fault(body)
        if fault:
            server.faults.append(fault)
            return self._error(400, "INVALID_ARGUMENT", f"not the published request shape: {fault}")
        usage = {"promptTokenCount": server.per_word * (words(body["contents"]) + words([body["systemInstruction"]])),
                 "candidatesTokenCount": 2, "cachedContentTokenCount": cached}
        usage["totalTokenCount"] = usage["promptTokenCount"] + 2
        if mode == "blocked":
            return self._send(200, {"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}, "usageMetadata": usage})
        if mode == "empty":
            return self._send(200, {"candidates": [{"finishReason": "SAFETY", "index": 0}], "usageMetadata": usage})
        config = body["generationConfig"]
        seed = config["seed"] if float(config.get("temperature") or 0) > 0 else None
        text = "Intent: not-a-label" if mode == "outside" else \
            fake_label(json.dumps(body["contents"]), config["responseSchema"]["enum"], seed)
        self._send(200, {"candidates": [{"content": {"role": "model", "parts": [{"text": text}]},
                                         "finishReason": "STOP", "index": 0}],
                         "usageMetadata": usage, "modelVersion": server.models[0]})


class GeminiServer(Served):
    """``with GeminiServer() as s: s.base_url`` (http://127.0.0.1:PORT); what it has seen:
    ``requests`` (generateContent bodies), ``counted`` (countTokens bodies), ``faults``, ``caches``
    (alive, by name) and ``created`` (every cache's name)."""

    def __init__(self, mode: str = "ok", failures: Optional[int] = None, window: int = 1_048_576,
                 delay: float = 0.0, cache_floor: int = 0, per_word: int = 1, key: str = KEY,
                 models: Sequence[str] = (MODEL,), port: int = 0):
        self.mode, self.failures, self.window, self.delay = mode, failures, window, delay
        self.cache_floor, self.per_word, self.key, self.models = cache_floor, per_word, key, list(models)
        self.caches: dict[str, dict[str, Any]] = {}
        self.created: list[str] = []
        self.requests: list[dict[str, Any]] = []
        self.counted: list[dict[str, Any]] = []
        self.faults: list[str] = []
        self.lock = threading.Lock()
        self.httpd = QuietServer(_handler(self), port)
        self.port = self.httpd.port
        self.base_url = f"http://{HOST}:{self.port}"


def _handler(fake: GeminiServer) -> type[_GeminiHandler]:
    class GeminiHandler(_GeminiHandler):
        stand_in = fake

    return GeminiHandler

