"""A stand-in for an OpenAI-compatible chat API on 127.0.0.1 (stdlib only): ``GET /v1/models``
and ``POST /v1/chat/completions`` as the ``openai`` client sends them, answering from the fake
model (``icrl.backends.fake.fake_label`` of the request's messages, its seed when the
temperature is above 0) within the request's JSON-schema enum, and reporting 2 prompt tokens
(1 of them from its prompt cache) and 1 completion token. ``/v1/completions`` is answered 404,
as the hosted API answers it for a chat model.

``key``: the key it takes (``Authorization: Bearer``; a request without it gets the API's 401);
None takes any. ``models``: the model list it serves. ``mode`` makes it misbehave on purpose:
``404`` (no such endpoint), ``slow`` (0.3 s per answer), ``hang`` (a completion is never
answered; the model list is), ``garbage`` / ``invalid_json`` / ``empty_choices`` (a 200 that is
not a completion), ``nonlabel`` (an answer outside the labels), ``flaky`` (a share
``error_rate`` of its completion requests answered 429 or 500, half each, drawn from a
``random.Random(seed)`` in the order requests arrive, counted in ``injected`` by status).
``SilentServer`` accepts connections and never answers anything (a hung server)."""

from __future__ import annotations

import json
import random
import socket
import threading
import time
from email.message import Message
from typing import Any, Optional, Self, Sequence

from ..backends.fake import fake_label
from .http import HOST, QuietServer, Reply, Served, routed

MODEL = "org/fake-model"


def _error(status: int, message: str, kind: str = "invalid_request_error") -> tuple[int, dict[str, Any]]:
    return status, {"error": {"message": message, "type": kind}}


class FakeOpenAIServer(Served):
    """``with FakeOpenAIServer() as s: s.base_url`` (http://127.0.0.1:PORT/v1)."""

    def __init__(self, mode: str = "ok", error_rate: float = 0.2, seed: int = 0, key: Optional[str] = None,
                 models: Sequence[str] = (MODEL,), port: int = 0) -> None:
        self.mode, self.error_rate, self.rng, self.key, self.models = mode, error_rate, random.Random(seed), key, \
            list(models)
        self.injected: dict[int, int] = {}
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.lock = threading.Lock()
        self.httpd = QuietServer(routed(self.handle), port)
        self.port = self.httpd.port
        self.base_url = f"http://{HOST}:{self.port}/v1"

    def fault(self) -> int:
        """``flaky``: 429 or 500 for a share ``error_rate`` of the requests, else 0 (answer)."""
        with self.lock:
            if self.rng.random() >= self.error_rate:
                return 0
            status = 429 if self.rng.random() < 0.5 else 500
            self.injected[status] = self.injected.get(status, 0) + 1
            return status

    def handle(self, method: str, path: str, headers: Message, body: dict[str, Any]) -> Reply:
        """(status, body) of one request."""
        if method == "POST":
            with self.lock:
                self.requests.append((path, body))
        if self.mode == "404" or not path.startswith("/v1/"):
            return _error(404, "not found")
        if self.key is not None and (headers.get("authorization") or "") != f"Bearer {self.key}":
            return _error(401, "Incorrect API key provided.")
        if method == "GET":
            if path.startswith("/v1/models"):
                return 200, {"object": "list", "data": [{"id": m, "object": "model", "created": 0, "owned_by": "x"}
                                                        for m in self.models]}
            return _error(404, "not found")
        if not path.startswith("/v1/chat/completions"):
            return _error(404, "This is a chat model and not supported in the v1/completions endpoint.")
        return self.complete(body)

    def complete(self, body: dict[str, Any]) -> Reply:
        mode = self.mode
        if mode == "hang":
            time.sleep(3600)
        if mode == "slow":
            time.sleep(0.3)
        status = self.fault() if mode == "flaky" else 0
        if status:
            return _error(status, f"injected {status}", "injected")
        if mode in ("garbage", "invalid_json"):
            return 200, b"\x00\xffnot json at all" if mode == "garbage" else b'{"id": "x", "choices": ['
        if body.get("model") not in self.models:
            return _error(404, f"The model `{body.get('model')}` does not exist or you do not have access to it.")
        head = {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"]}
        if mode == "empty_choices":
            return 200, {**head, "choices": []}
        labels = body["response_format"]["json_schema"]["schema"]["properties"]["label"]["enum"]
        seed = body.get("seed") if float(body.get("temperature") or 0) > 0 else None
        label = "not-a-label" if mode == "nonlabel" else fake_label(json.dumps(body["messages"]), labels, seed)
        return 200, {**head, "choices": [{"index": 0, "finish_reason": "stop",
                                          "message": {"role": "assistant", "content": json.dumps({"label": label})}}],
                     "usage": {"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3,
                               "prompt_tokens_details": {"cached_tokens": 1}}}


class SilentServer:
    """Accepts connections on 127.0.0.1 and never answers (a hung server)."""

    def __init__(self, port: int = 0) -> None:
        self.sock = socket.socket()
        self.sock.bind((HOST, port))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.base_url = f"http://{HOST}:{self.port}/v1"
        self.conns: list[socket.socket] = []
        self.accepted: list[float] = []  # time.monotonic() of each connection
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)

    def _accept(self) -> None:
        self.sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
                self.conns.append(conn)
                self.accepted.append(time.monotonic())
            except OSError:
                continue

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.thread.join(2)
        for c in self.conns:
            c.close()
        self.sock.close()
