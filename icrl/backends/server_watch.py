"""How the openai backend tells a user about a server that misbehaves.

- ``SilenceWatch``: a server that accepts a request and never answers is said on screen
  within ``NOTICE_S`` seconds, with its URL and how long a request may wait (--timeout, and
  the retries), then every ``REPEAT_S`` of silence; the request itself fails at its limit.
- ``bad_response``: a 200 answer that is not a completion (garbage, invalid JSON, no
  choices) is one line naming the server.
- ``server_error``: a request that failed for good is one line naming the server; a 404 says
  the endpoint is missing (a wrong --base_url path), not that the server failed.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Optional

from ..errors import UsageError
from ..infra.masking import strip_userinfo

NOTICE_S = 5.0  # silence (no response at all) after which the wait is said on screen
REPEAT_S = 60.0


class SilenceWatch:
    """Says on stderr, within ``notice_s``, that the server at ``url`` has not answered
    (and again every ``REPEAT_S`` of silence): a hung server is seen, not waited on blindly.
    ``answered()`` marks a response; used as ``with watch: ...`` around each batch of requests."""

    def __init__(self, url: str, timeout: float, retries: int, notice_s: float = NOTICE_S):
        self.url, self.timeout, self.retries, self.notice_s = url, timeout, retries, notice_s
        self.last = self.said = 0.0
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
                print(f"waiting for the server at {self.url}: no answer for {silent:.0f} s (a request gives up "
                      f"after --timeout {self.timeout:g} s, tried {self.retries + 1} times)", file=sys.stderr,
                      flush=True)

    def __enter__(self):
        self.last, self.said = time.monotonic(), 0.0
        self._stop.clear()
        self._thread = threading.Thread(target=self._watch, name="icrl-silence-watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


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
