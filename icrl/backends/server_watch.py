"""How an API backend tells a user about a server that misbehaves, and how long it waits.

- ``SilenceWatch``: a server that accepts a request and never answers is said on screen
  within ``NOTICE_S`` seconds (half --timeout, when shorter), with its URL, what the run asked
  for, whether the server answers its model list and how long the run waits, then every
  ``REPEAT_S`` of silence. While it is silent the watch asks the server for its model list
  (``/models``, every ``PROBE_EVERY_S`` or more often): a server that answers that is alive and
  busy; a server that answers nothing at all, neither a request nor the model list it was asked
  for, for ``DEAD_S`` seconds (or --timeout, when shorter) is dead: the call is cancelled and
  fails in one line (``failure``).
- Before the server has answered any completion request of the backend's (``heard``: any
  HTTP answer, an error's included, to a request for a completion; the backends mark it from
  their HTTP client's responses, ``on_response``), a call is given up on after ``first_s``
  seconds (--first_answer_timeout, ``FIRST_ANSWER_S`` by default) with no answer to what it
  asks for (a call of token counts: a count answered), whatever --timeout says and whether or
  not the model list answers: a dead or stuck server is noticed in a minute, not after 2 x
  --timeout.
- ``SilenceWatch.bounded``: one request's wait, retries included, is bounded by 2 x --timeout
  (``bound_s``): a request that timed out is tried once more, not --max_retries more times
  (a timeout is not a transient refusal like a 429), and a server that answers its model list
  but never a completion fails in one line after 2 x --timeout (``stuck_server``), saying that
  it is up.
- ``bad_response``: a 200 answer that is not a completion (garbage, invalid JSON, no
  choices) is one line naming the server, with the backend's advice.
- ``server_error``: a request that failed for good is one line naming the server; a 404 says
  the endpoint is missing (a wrong --base_url path), not that the server failed.

The lines of a server that stopped answering are ``ServiceFailure``s: a run adds whether any
step was saved (``icrl.errors``).
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Awaitable, Callable, Optional, TypeVar

from ..errors import ServiceFailure, UsageError
from ..infra.masking import strip_userinfo
from . import FIRST_ANSWER_S  # --first_answer_timeout's default: no completion answered yet, given up on

# What a call asks for, as the waiting line says it (``SilenceWatch.watching``).
COMPLETION, COUNTS, MODEL_LIST, MODEL_DETAILS = "a completion", "token counts", "its model list", "the model's details"
RESTART = "restart it"  # what to do about a server of one's own that does not answer; a hosted API's: NETWORK
NETWORK = "check the network and --base_url"
NOTICE_S = 5.0  # silence (no response at all) after which the wait is said on screen
REPEAT_S = 60.0
DEAD_S = 120.0  # silence, the model list unanswered too, after which the server is given up on
PROBE_EVERY_S = 10.0
PROBE_TIMEOUT_S = 10.0
Response = TypeVar("Response")


def model_list_answers(url: str, headers: Optional[dict[str, str]] = None, timeout: float = PROBE_TIMEOUT_S) -> bool:
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
    again every ``REPEAT_S`` of silence), gives a server that has answered no request of the
    backend's yet up after ``first_s``, and a silent one after ``dead_s`` (``DEAD_S``, or
    --timeout when shorter) once it has been asked for its model list and has not answered that
    either: a hung server is seen and left, not waited on blindly. ``answered()`` marks a
    response, ``on_response`` (an HTTP client's response hook) any answer to a request that asks
    something; used as ``with watch.watching(cancel, asking): ...`` around each batch of
    requests (``asking``: what it asks for, as the waiting line says it), where ``cancel`` stops
    the batch (called from the watch's thread) once the server is given up on (``dead`` is then
    True and ``failure()`` the line). ``await watch.bounded(request)``: one request, given up on
    after ``bound_s`` (2 x --timeout); ``await watch.answer(request)``: the same, and its response
    marked. ``advice``: what to do about a server that does not answer (``RESTART``, ``NETWORK``)."""

    def __init__(self, url: str, timeout: float, retries: int, notice_s: float = NOTICE_S,
                 dead_s: float = DEAD_S, probe: Optional[Callable[[], bool]] = None,
                 first_s: float = FIRST_ANSWER_S, advice: str = RESTART) -> None:
        self.url, self.timeout, self.retries, self.first_s, self.advice = url, timeout, retries, first_s, advice
        self.notice_s = min(notice_s, timeout / 2)
        self.dead_s = min(dead_s, timeout)
        self.bound_s = 2 * timeout  # a request that timed out, tried once more
        self.probe = probe or (lambda: model_list_answers(url, timeout=min(PROBE_TIMEOUT_S, self.dead_s / 2)))
        self.last = self.said = self.probed = self.alive = self.unanswered = self.started = 0.0
        self.dead, self.why, self.heard, self.asking, self.batch_heard = False, "", False, COMPLETION, False
        self._cancel: Callable[[], None] = lambda: None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def answered(self) -> None:
        self.last = time.monotonic()

    async def on_response(self, response: object) -> None:
        """An HTTP client's response hook: an answer (any status) to a request for a completion
        means the server has been heard (``heard``); one to a request of what the call asks for,
        that the call has (``batch_heard``)."""
        request = getattr(response, "request", None)
        kind = _kind_of(str(getattr(request, "method", "")), str(getattr(getattr(request, "url", None), "path", "")))
        self.heard = self.heard or kind == COMPLETION
        self.batch_heard = self.batch_heard or kind == _asked(self.asking)

    def models_answer(self) -> Optional[bool]:
        """Whether the server answered its model list since its last answer to a request (None:
        not known yet)."""
        if self.alive > max(self.last, self.unanswered):
            return True
        return False if self.unanswered > max(self.last, self.alive) else None

    def waiting_line(self, silent: float) -> str:
        """What the run says while it waits (``waiting 5 s for a completion from URL; ...``)."""
        models = {True: "it answers its model list, so it is up and busy",
                  False: "it does not answer its model list either",
                  None: "asking for its model list"}[self.models_answer()]
        bound = (f"it has answered no request yet: given up on after {self.first_s:g} s (--first_answer_timeout)"
                 if not self.heard else
                 f"a request may take --timeout {self.timeout:g} s and is tried once more if it times out: given up "
                 f"on after {self.bound_s:g} s; a server that answers nothing, its model list included, after "
                 f"{self.dead_s:g} s")
        models = "" if _asked(self.asking) == MODEL_LIST else f"; {models}"  # what it waits for is the model list
        return f"waiting {silent:.0f} s for {self.asking} from {self.url}{models} ({bound})"

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
            first = not (self.heard or self.batch_heard) and now - self.started >= self.first_s
            if (first or now - max(self.last, self.alive) >= self.dead_s and self.models_answer() is False) \
                    and not self._stop.is_set():
                self.dead, self.why = True, "first" if first else "silent"
                self._cancel()
                return

    def _probe(self) -> None:
        if self.probe():
            self.alive = time.monotonic()
        else:
            self.unanswered = time.monotonic()

    def failure(self) -> ServiceFailure:
        """The line of a server given up on (``dead``)."""
        if self.why == "first":
            return no_first_answer(self.url, self.first_s, self.asking, self.models_answer(), self.advice)
        return dead_server(self.url, self.dead_s, self.advice)

    async def bounded(self, request: Awaitable[Response]) -> Response:
        """Await ``request`` (one request to the server, the client's retries included) for
        ``bound_s`` at most; then one line (``stuck_server``) in place of further tries."""
        try:
            return await asyncio.wait_for(request, self.bound_s)
        except asyncio.TimeoutError:
            raise stuck_server(self.url, self.timeout, self.models_answer(), self.advice) from None

    async def answer(self, request: Awaitable[Response]) -> Response:
        """``request`` awaited as ``bounded`` does, its response marked (``answered``)."""
        response = await self.bounded(request)
        self.answered()
        return response

    def watching(self, cancel: Callable[[], None], asking: str = COMPLETION) -> "SilenceWatch":
        self._cancel, self.asking = cancel, asking
        return self

    def __enter__(self) -> SilenceWatch:
        now = time.monotonic()
        self.last, self.said, self.probed, self.alive, self.unanswered, self.dead = now, 0.0, 0.0, 0.0, 0.0, False
        self.started, self.why, self.batch_heard = now, "", False
        self._stop.clear()
        self._thread = threading.Thread(target=self._watch, name="icrl-silence-watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._cancel = lambda: None


def _kind_of(method: str, path: str) -> str:
    """What a request asked for: a lookup (a GET: the model list or details), token counts, a
    context cache or a completion (every other POST: chat or text completions, messages,
    generateContent)."""
    if method != "POST":
        return MODEL_LIST
    if "count" in path.lower():
        return COUNTS
    return "a context cache" if "cachedContents" in path else COMPLETION


def _asked(asking: str) -> str:
    """The kind of request (``_kind_of``) whose answer answers a call that asks for ``asking``."""
    return MODEL_LIST if asking in (MODEL_LIST, MODEL_DETAILS) else asking


def no_first_answer(url: str, seconds: float, asking: str, models_answer: Optional[bool],
                    advice: str = RESTART) -> ServiceFailure:
    """One line for a server that did not answer the run's first request for ``asking`` in ``seconds``."""
    up = {True: " (it answers its model list, so it is up but stuck or busy)",
          False: " (it does not answer its model list either)", None: ""}[models_answer]
    return ServiceFailure(f"the server at {url} did not answer the run's first request for {asking} in "
                          f"{seconds:g} s{up if _asked(asking) != MODEL_LIST else ''}",
                          f"{advice} and rerun the same command (--first_answer_timeout {seconds:g} is how long its "
                          f"first answer may take)")


def dead_server(url: str, seconds: float, advice: str = RESTART) -> ServiceFailure:
    """One line for a server that answered nothing at all for ``seconds``."""
    return ServiceFailure(f"the server at {url} answered nothing for {seconds:g} s, not even its model list: it is "
                          f"hung or unreachable", f"{advice} and rerun the same command (--timeout sets how long a "
                                                  f"request may take)")


def stuck_server(url: str, timeout: float, models_answer: Optional[bool], advice: str = RESTART) -> ServiceFailure:
    """One line for a request that got no answer in 2 x --timeout (it timed out, and so did its
    one more try)."""
    up = {True: "; it answers its model list, so it is up but slower than --timeout or stuck",
          False: "; it does not answer its model list either", None: ""}[models_answer]
    return ServiceFailure(f"the server at {url} gave no answer to a request in {2 * timeout:g} s (--timeout "
                          f"{timeout:g} s, and one more try after a timeout){up}",
                          f"raise --timeout if it is busy, or {advice}, and rerun the same command")


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
    return ServiceFailure(f"the server at {base_url} failed ({what}: {detail}) after {retries} retries",
                          "fix or restart the server and rerun the same command")
