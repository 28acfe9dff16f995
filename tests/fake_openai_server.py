"""A tiny OpenAI-compatible server on 127.0.0.1 (stdlib only) for end-to-end runs of the
openai backend without a model: /v1/models and /v1/chat/completions, answering the first
label of the request's JSON-schema enum and reporting 2 prompt tokens (1 of them from its
prompt cache) and 1 completion token. ``mode`` makes it misbehave on purpose; ``flaky``
answers a share ``error_rate`` of its completion requests with a 429 or a 500 (half each),
drawn from a ``random.Random(seed)`` (the draws are in the order requests arrive), and counts
them in ``injected`` by status."""

from __future__ import annotations

import json
import random
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "org/fake-model"


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # quiet
        pass

    def _send(self, status: int, body) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        mode = self.server.mode
        if mode == "404" or not self.path.startswith("/v1/"):
            return self._send(404, {"error": {"message": "not found"}})
        if self.path.startswith("/v1/models"):
            return self._send(200, {"object": "list", "data": [
                {"id": MODEL, "object": "model", "created": 0, "owned_by": "x"}]})
        self._send(404, {"error": {"message": "not found"}})

    def do_POST(self):
        mode = self.server.mode
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        self.server.requests.append((self.path, body))
        if mode == "404" or not self.path.startswith("/v1/"):
            return self._send(404, {"error": {"message": "not found"}})
        if not self.path.startswith("/v1/chat/completions"):
            return self._send(404, {"error": {"message": "not found"}})
        if mode == "slow":
            time.sleep(0.3)
        if mode == "flaky":
            status = self.server.fault()
            if status:
                return self._send(status, {"error": {"message": f"injected {status}", "type": "injected"}})
        if mode == "garbage":
            return self._send(200, b"\x00\xffnot json at all")
        if mode == "invalid_json":
            return self._send(200, b'{"id": "x", "choices": [')
        if mode == "empty_choices":
            return self._send(200, {"id": "x", "object": "chat.completion", "created": 0, "model": MODEL,
                                    "choices": []})
        labels = body["response_format"]["json_schema"]["schema"]["properties"]["label"]["enum"]
        content = json.dumps({"label": "not-a-label" if mode == "nonlabel" else labels[0]})
        self._send(200, {"id": "x", "object": "chat.completion", "created": 0, "model": MODEL,
                         "choices": [{"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": content}}],
                         "usage": {"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3,
                                   "prompt_tokens_details": {"cached_tokens": 1}}})


class _Quiet(ThreadingHTTPServer):
    daemon_threads = True
    error_rate, rng, injected = 0.0, random.Random(0), {}
    lock = threading.Lock()

    def fault(self) -> int:
        """``flaky``: 429 or 500 for a share ``error_rate`` of the requests, else 0 (answer)."""
        with self.lock:
            if self.rng.random() >= self.error_rate:
                return 0
            status = 429 if self.rng.random() < 0.5 else 500
            self.injected[status] = self.injected.get(status, 0) + 1
            return status

    def handle_error(self, request, client_address):  # a client that went away (killed run)
        pass


class FakeOpenAIServer:
    """``with FakeOpenAIServer() as s: s.base_url`` (http://127.0.0.1:PORT/v1)."""

    def __init__(self, mode: str = "ok", error_rate: float = 0.2, seed: int = 0):
        self.httpd = _Quiet(("127.0.0.1", 0), _Handler)
        self.httpd.mode = mode
        self.httpd.error_rate, self.httpd.rng, self.httpd.injected = error_rate, random.Random(seed), {}
        self.httpd.requests = []
        self.port = self.httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def requests(self):
        return self.httpd.requests

    @property
    def injected(self) -> dict:
        """``flaky``: the errors answered so far, by HTTP status."""
        return dict(self.httpd.injected)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


class SilentServer:
    """Accepts connections on 127.0.0.1 and never answers (a hung server)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.conns = []
        self.accepted: list = []  # time.monotonic() of each connection
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)

    def _accept(self):
        self.sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
                self.conns.append(conn)
                self.accepted.append(time.monotonic())
            except OSError:
                continue

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self.thread.join(2)
        for c in self.conns:
            c.close()
        self.sock.close()


if __name__ == "__main__":  # python tests/fake_openai_server.py [mode]: serve until killed
    import sys

    with FakeOpenAIServer(sys.argv[1] if len(sys.argv) > 1 else "ok") as s:
        print(s.base_url, flush=True)
        while True:
            time.sleep(3600)
