"""What the three stand-ins share: a quiet threaded HTTP server on 127.0.0.1 and a JSON answer.

``QuietServer(handler)``: bound to 127.0.0.1 (port 0: a free one), its handler threads daemons,
a client that went away (a killed run) not printed, many requests in flight at once (a backend
sends up to --max_concurrency together: the default backlog of 5 resets some). ``send(handler,
status, body, headers)``: a JSON body (or raw bytes, for the cues that send garbage) with its
length. ``routed(handle)``: a handler class that answers GET and POST with ``handle(method, path,
headers, body)`` (its ``Reply``). ``serving(server)`` runs ``serve_forever`` in a daemon thread;
``Served``: a stand-in whose ``httpd`` serves from ``with`` (or from its start, once ``serve`` is
called) to the end of it.
"""

from __future__ import annotations

import json
import threading
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Mapping, Optional, Self, Union

HOST = "127.0.0.1"  # never another interface: a stand-in answers this machine only
Body = Union[dict[str, Any], bytes]  # an answer's JSON, or raw bytes (the cues that send garbage)
Reply = Union[tuple[int, Body], tuple[int, Body, dict[str, str]]]  # (status, body) or (status, body, headers)


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # a hanging answer does not hold up the shutdown
    request_queue_size = 256

    def __init__(self, handler: type[BaseHTTPRequestHandler], port: int = 0) -> None:
        super().__init__((HOST, port), handler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def handle_error(self, request: object, client_address: object) -> None:  # a client that went away (a killed run)
        pass


def send(handler: BaseHTTPRequestHandler, status: int, body: Body, headers: Optional[Mapping[str, str]] = None) -> None:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.end_headers()
    handler.wfile.write(data)


def read_body(handler: BaseHTTPRequestHandler) -> Optional[dict[str, Any]]:
    """The request's JSON body ({} when empty); None when the client went away mid-request."""
    length = int(handler.headers.get("Content-Length") or 0)
    raw = handler.rfile.read(length) if length else b""
    if len(raw) < length:
        handler.close_connection = True
        return None
    return json.loads(raw) if raw else {}


def serving(server: ThreadingHTTPServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, name="icrl-standin", daemon=True)
    thread.start()
    return thread


class Served:
    """``with stand_in: ...``: its ``httpd`` serves (``serve``, once) and is closed at the end."""

    httpd: QuietServer
    thread: Optional[threading.Thread] = None
    port: int
    base_url: str  # http://127.0.0.1:PORT, and the API's path

    def serve(self) -> None:
        if self.thread is None:
            self.thread = serving(self.httpd)

    def __enter__(self) -> Self:
        self.serve()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class Quiet(BaseHTTPRequestHandler):
    """A handler that logs nothing."""

    def log_message(self, *args: object) -> None:
        pass


def routed(handle: Callable[[str, str, Message, dict[str, Any]], Reply]) -> type[Quiet]:
    """A handler class that answers each GET and POST with ``handle(method, path, headers, body)``
    (the path without its query, the JSON body; a client that went away mid-request is not answered):
    (status, body) or (status, body, headers)."""

    class Routed(Quiet):
        def _answer(self, method: str) -> None:
            body = read_body(self)
            if body is None:  # the client went away mid-request (a killed run): nothing to answer
                return
            out = handle(method, self.path.split("?")[0], self.headers, body)
            status, payload, headers = out if len(out) == 3 else (*out, {})
            send(self, status, payload, headers)

        def do_GET(self) -> None:  # http.server's names
            self._answer("GET")

        def do_POST(self) -> None:
            self._answer("POST")

    return Routed
