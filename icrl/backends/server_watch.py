"""How the openai backend tells a user about a server that misbehaves, and how long it waits.

- ``SilenceWatch``: a server that accepts a request and never answers is said on screen
  within ``NOTICE_S`` seconds (half --timeout, when shorter), with its URL, whether it answers
  its model list and how long the run waits, then every ``REPEAT_S`` of silence. While it is
  silent the watch asks the server for its model list (``/models``, every ``PROBE_EVERY_S`` or
  more often): a server that answers that is alive and busy; a server that answers nothing at
  all, neither a request nor the model list it was asked for, for ``DEAD_S`` seconds (or
  --timeout, when shorter) is dead: the call is cancelled and fails in one line
  (``dead_server``). So a hung server costs about two minutes, not --timeout times the tries.
- ``SilenceWatch.bounded``: one request's wait, retries included, is bounded by 2 x --timeout
  (``bound_s``): a request that timed out is tried once more, not --max_retries more times
  (a timeout is not a transient refusal like a 429), and a server that answers its model list
  but never a completion fails in one line after 2 x --timeout (``stuck_server``), saying that
  it is up.
- ``bad_response``: a 200 answer that is not a completion (garbage, invalid JSON, no
  choices) is one line naming the server.
- ``server_error``: a request that failed for good is one line naming the server; a 404 says
  the endpoint is missing (a wrong --base_url path), not that the server failed.
"""

from __future__ import annotations

import asyncio
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
    (``DEAD_S``, or --timeout when shorter) once it has been asked for its model list and has
    not answered that either: a hung server is seen and left, not waited on blindly.
    ``answered()`` marks a response; used as ``with watch.watching(cancel): ...`` around each
    batch of requests, where ``cancel`` stops the batch (called from the watch's thread) once
    the server is dead (``dead`` is then True). ``await watch.bounded(request)``: one request,
    given up on after ``bound_s`` (2 x --timeout); ``await watch.answer(request)``: the same, and
    its response marked."""

    def __init__(self, url: str, timeout: float, retries: int, notice_s: float = NOTICE_S,
                 dead_s: float = DEAD_S, probe: Optional[Callable[[], bool]] = None):
        self.url, self.timeout, self.retries = url, timeout, retries
        self.notice_s = min(notice_s, timeout / 2)
        self.dead_s = min(dead_s, timeout)
        self.bound_s = 2 * timeout  # a request that timed out, tried once more
        self.probe = probe or (lambda: answers(url, timeout=min(PROBE_TIMEOUT_S, self.dead_s / 2)))
        self.last = self.said = self.probed = self.alive = self.unanswered = 0.0
        self.dead = False
        self._cancel: Callable[[], None] = lambda: None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def answered(self) -> None:
        self.last = time.monotonic()

    def models_answer(self) -> Optional[bool]:
        """Whether the server answered its model list since its last answer to a request (None:
        not known yet)."""
        if self.alive > max(self.last, self.unanswered):
            return True
        return False if self.unanswered > max(self.last, self.alive) else None

    def waiting_line(self, silent: float) -> str:
        """What the run says while it waits (``waiting 120 s for a completion from URL; ...``)."""
        models = {True: "it answers its model list, so it is up and busy",
                  False: "it does not answer its model list either",
                  None: "asking for its model list"}[self.models_answer()]
        return (f"waiting {silent:.0f} s for a completion from {self.url}; {models} (a request may take --timeout "
                f"{self.timeout:g} s and is tried once more if it times out: given up on after {self.bound_s:g} s; "
                f"a server that answers nothing, its model list included, after {self.dead_s:g} s)")

    def _watch(self) -> None:
        first_probe = min(self.notice_s / 2, self.dead_s / 2)
        while not self._stop.wait(min(0.5, self.notice_s, first_probe)):
            now = time.monotonic()
            silent = now - self.last
            if silent >= first_probe and now - self.probed >= min(PROBE_EVERY_S, self.dead_s / 4):
                self.probed = now  # in a thread of its own: a probe that hangs holds nothing up
                threading.Thread(target=self._probe, name="icrl-server-probe", daemon=True).start()
            if silent >= self.notice_s and now - max(self.said, self.last) >= (REPEAT_S if self.said > self.last else
                                                                                self.notice_s):
                self.said = now
                print(self.waiting_line(silent), file=sys.stderr, flush=True)
            now = time.monotonic()
            if now - max(self.last, self.alive) >= self.dead_s and self.models_answer() is False \
                    and not self._stop.is_set():
                self.dead = True
                self._cancel()
                return

    def _probe(self) -> None:
        if self.probe():
            self.alive = time.monotonic()
        else:
            self.unanswered = time.monotonic()

    async def bounded(self, request):
        """Await ``request`` (one request to the server, the client's retries included) for
        ``bound_s`` at most; then one line (``stuck_server``) in place of further tries."""
        try:
            return await asyncio.wait_for(request, self.bound_s)
        except asyncio.TimeoutError:
            raise stuck_server(self.url, self.timeout, self.models_answer()) from None

    async def answer(self, request):
        """``request`` awaited as ``bounded`` does, its response marked (``answered``)."""
        response = await self.bounded(request)
        self.answered()
        return response

    def watching(self, cancel: Callable[[], None]) -> "SilenceWatch":
        self._cancel = cancel
        return self

    def __enter__(self):
        now = time.monotonic()
        self.last, self.said, self.probed, self.alive, self.unanswered, self.dead = now, 0.0, 0.0, 0.0, 0.0, False
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


def stuck_server(url: str, timeout: float, models_answer: Optional[bool]) -> UsageError:
    """One line for a request that got no answer in 2 x --timeout (it timed out, and so did its
    one more try)."""
    up = {True: "; it answers its model list, so it is up but slower than --timeout or stuck",
          False: "; it does not answer its model list either", None: ""}[models_answer]
    return UsageError(f"the server at {url} gave no answer to a request in {2 * timeout:g} s (--timeout {timeout:g} "
                      f"s, and one more try after a timeout){up}: raise --timeout if it is busy, or restart it; "
                      f"finished steps are saved: rerun the same command to resume")


OPENAI_ADVICE = "is --base_url an OpenAI-compatible server (it usually ends in /v1)?"


def bad_response(url: str, kind: str, exc: BaseException, advice: str = OPENAI_ADVICE) -> UsageError:
    """One line for a response that is not a valid completion (garbage, invalid JSON, no choices),
    with the backend's own ``advice`` (default: the OpenAI-compatible server's)."""
    detail = (str(exc).splitlines() or [""])[0][:120]
    return UsageError(f"the server at {url} sent something that is not a valid {kind} response "
                      f"({type(exc).__name__}: {detail}); {advice}")


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
