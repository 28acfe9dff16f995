"""How the openai backend tells a user about a server that misbehaves.

- ``SilenceWatch``: a server that accepts a request and never answers is said on screen
  within ``NOTICE_S`` seconds, with its URL and how long the run waits, then every ``REPEAT_S``
  of silence. While it is silent the watch asks the server for its model list (``/models``,
  ``PROBE_TIMEOUT_S`` at most, every ``PROBE_EVERY_S`` or more often): a server that answers that is alive
  and busy, and its request may take up to --timeout (tried --max_retries more times); a server
  that answers nothing at all, neither a request nor the model list, for ``DEAD_S`` seconds
  (or --timeout, when shorter) is dead: the call is cancelled and fails in one line
  (``dead_server``). So a hung server costs about two minutes, not --timeout times the tries.
- ``bad_response``: a 200 answer that is not a completion (garbage, invalid JSON, no
  choices) is one line naming the server.
- ``server_error``: a request that failed for good is one line naming the server; a 404 says
  the endpoint is missing (a wrong --base_url path), not that the server failed.
"""

from __future__ import annotations

import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Callable, Optional

from ..errors import UsageError
from ..infra.masking import strip_userinfo

NOTICE_S = 5.0  # silence (no response at all) after which the wait is said on screen
REPEAT_S = 60.0
DEAD_S = 120.0  # silence, the model list unanswered too, after which the server is given up on
PROBE_EVERY_S = 10.0
PROBE_TIMEOUT_S = 10.0


def answers(url: str, headers: Optional[dict] = None, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """Whether the server at ``url`` (a base URL) answers a GET of its model list at all within
    ``timeout``: any HTTP status counts (an error page is an answer), silence or a refused
    connection does not."""
    request = urllib.request.Request(f"{url.rstrip('/')}/models", headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            response.read(1)
        return True
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):  # timeouts, refused or reset connections, a URL urllib cannot open
        return False


class SilenceWatch:
    """Says on stderr, within ``notice_s``, that the server at ``url`` has not answered (and
    again every ``REPEAT_S`` of silence), and gives a silent server up after ``dead_s``
    (``DEAD_S``, or --timeout when shorter) unless it answers its model list: a hung server is
    seen and left, not waited on blindly. ``answered()`` marks a response; used as
    ``with watch.watching(cancel): ...`` around each batch of requests, where ``cancel`` stops
    the batch (called from the watch's thread) once the server is dead (``dead`` is then True)."""

    def __init__(self, url: str, timeout: float, retries: int, notice_s: float = NOTICE_S,
                 dead_s: float = DEAD_S, probe: Optional[Callable[[], bool]] = None):
        self.url, self.timeout, self.retries, self.notice_s = url, timeout, retries, notice_s
        self.dead_s = min(dead_s, timeout)
        self.probe = probe or (lambda: answers(url))
        self.last = self.said = self.probed = self.alive = 0.0
        self.dead = False
        self._cancel: Callable[[], None] = lambda: None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def answered(self) -> None:
        self.last = time.monotonic()

    def _watch(self) -> None:
        while not self._stop.wait(min(0.5, self.notice_s)):
            now = time.monotonic()
            silent = now - self.last
            if silent >= self.notice_s and now - max(self.said, self.last) >= (REPEAT_S if self.said > self.last else
                                                                                self.notice_s):
                self.said = now
                print(f"waiting for the server at {self.url}: no answer for {silent:.0f} s (a server that answers "
                      f"nothing for {self.dead_s:g} s is given up on; a request it works on may take --timeout "
                      f"{self.timeout:g} s, tried {self.retries + 1} times)", file=sys.stderr, flush=True)
            if silent >= self.notice_s and now - self.probed >= min(PROBE_EVERY_S, self.dead_s / 4):
                self.probed = now  # in a thread of its own: a probe that hangs holds nothing up
                threading.Thread(target=self._probe, name="icrl-server-probe", daemon=True).start()
            now = time.monotonic()
            if now - max(self.last, self.alive) >= self.dead_s and not self._stop.is_set():
                self.dead = True
                self._cancel()
                return

    def _probe(self) -> None:
        if self.probe():
            self.alive = time.monotonic()

    def watching(self, cancel: Callable[[], None]) -> "SilenceWatch":
        self._cancel = cancel
        return self

    def __enter__(self):
        self.last, self.said, self.probed, self.alive, self.dead = time.monotonic(), 0.0, 0.0, 0.0, False
        self._stop.clear()
        self._thread = threading.Thread(target=self._watch, name="icrl-silence-watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._cancel = lambda: None


def dead_server(url: str, seconds: float) -> UsageError:
    """One line for a server that answered nothing at all for ``seconds``."""
    return UsageError(f"the server at {url} answered nothing for {seconds:g} s, not even its model list: it is hung "
                      f"or unreachable; restart it (finished steps are saved) and rerun the same command to resume "
                      f"(--timeout sets how long a request may take)")


def bad_response(url: str, kind: str, exc: BaseException) -> UsageError:
    """One line for a response that is not a valid completion (garbage, invalid JSON, no choices)."""
    detail = (str(exc).splitlines() or [""])[0][:120]
    return UsageError(f"the server at {url} sent something that is not a valid {kind} response "
                      f"({type(exc).__name__}: {detail}); is --base_url an OpenAI-compatible server (it usually "
                      f"ends in /v1)?")


def server_error(base_url: str, exc: BaseException, retries: int) -> UsageError:
    """One line for a request that failed for good (after the client's retries)."""
    detail = str(exc).splitlines()[0] if str(exc) else ""
    status = getattr(exc, "status_code", None)
    if status == 404:
        path = getattr(getattr(exc, "request", None), "url", None)
        return UsageError(f"the server at {base_url} has no such endpoint (HTTP 404 for "
                          f"{strip_userinfo(str(path)) if path else 'the request'}): check --base_url (it usually "
                          f"ends in /v1) and --api_mode")
    what = f"HTTP {status}" if status else type(exc).__name__
    return UsageError(f"the server at {base_url} failed ({what}: {detail}) after {retries} retries; "
                      f"finished steps are saved: fix or restart the server and rerun the same command to resume")
