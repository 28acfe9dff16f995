"""Gemini backend: Google's Gemini API through its official SDK, ``google-genai``
(``pip install -e .[gemini]``), with the published request shape (``gemini_requests``).

- The key comes from --api_key, else ``$GEMINI_API_KEY``, ``$GOOGLE_API_KEY`` or the published
  ``$API_KEY``; it is kept in memory only (never in ``describe()``, the records or a message).
- --base_url points the SDK at another endpoint (a proxy, a test server); the API version
  (``v1beta``, or the one the URL ends with) is appended by the SDK.
- At load: ``models.get`` checks the key and the model and gives the window
  (``input_token_limit``; --max_model_len in its place when given).
- ``predict``: one ``generateContent`` request per prompt, all of a call (or of a sweep's calls,
  ``predict_calls``) in flight together, at most --max_concurrency at a time. The SDK retries
  408, 429, 5xx, timeouts and dropped connections with exponential backoff (1 s doubling, 60 s
  at most), --max_retries times; one request waits 2 x --timeout at most (a timeout is tried
  once more, not --max_retries more times), and a server silent for two minutes is given up on
  (``server_watch``). What cannot be retried is one line: a refused key, an unknown model, a
  blocked prompt or an empty candidate, an answer outside the labels.
- A call's prompts that share their context (a test step's) share one context cache: the
  system instruction and every turn but the last go into a ``cachedContents`` (when they
  reach ``cache_min_tokens``), each request sends its last turn and the cache's name, and the
  cache is deleted when the call ends.
- ``count_tokens``: the API's ``countTokens`` (each text once), which the window search reads
  through ``chat``; ``usage()``: the prompt, cached and candidate tokens the API reported (a
  cache's writing counted as one request of its tokens).
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any, Coroutine, NoReturn, Optional, Sequence, TypeVar

from ..errors import ServiceFailure, UsageError
from ..infra.masking import scrub, strip_userinfo
from . import Call, Generated, Message
from . import gemini_requests as req
from .chat import ChatTokenizer
from .in_flight import PredictAsOneCall, all_in_flight, gather_or_cancel
from .keys import find_key, missing_key, refused_key
from .sdk import check_limits, import_sdk
from .server_watch import (COMPLETION, COUNTS, DEAD_S, FIRST_ANSWER_S, MODEL_DETAILS, NETWORK, PROBE_TIMEOUT_S,
                           SilenceWatch, model_list_answers)
from .usage import Usage
from .watched_loop import WatchedLoop

log = logging.getLogger(__name__)

Result = TypeVar("Result")

INSTALL_HINT = ("the gemini backend needs the google-genai package: pip install -e .[gemini] "
                "(or pip install google-genai)")
KEY_VARIABLES = ("GEMINI_API_KEY", "GOOGLE_API_KEY", "API_KEY")
URL_VARIABLE = "GOOGLE_GEMINI_BASE_URL"  # the SDK's own, read when --base_url is not given
DEFAULT_URL = "https://generativelanguage.googleapis.com"
API_VERSIONS = ("v1beta", "v1alpha", "v1")
CACHE_MIN_TOKENS = 1024  # the smallest context cache the API takes (Gemini 2.x Flash; a refusal raises it)
CACHE_TTL = "3600s"  # deleted after its call; the TTL only bounds a cache a killed run leaves


def split_version(base_url: str) -> tuple[str, str]:
    """(endpoint, API version) of --base_url: a URL that ends with a version keeps it."""
    url = base_url.rstrip("/")
    head, _, last = url.rpartition("/")
    return (head, last) if last in API_VERSIONS and head else (url, "v1beta")


class GeminiBackend(PredictAsOneCall):
    """The backend protocol (see icrl.backends) over the Gemini API; ``usage()`` as
    ``icrl.backends.usage.ReportsUsage`` declares."""

    name = "gemini"
    local_model = False  # a hosted model: its name is a label (icrl.backends)

    @classmethod
    def offline_chat(cls, model_name: str, **options: Any) -> ChatTokenizer:
        """The tokenizer ``icrl.backends.offline_chat`` asks for: a local model's, when --model_name
        names one (an estimate counted with it and priced as --api_model); a Gemini model has none
        here (the API counts tokens, it does not give their ids)."""
        from .chat import load_chat_tokenizer

        try:
            return load_chat_tokenizer(model_name, **options)
        except UsageError:
            raise UsageError("the Gemini API gives token counts only, not token ids: there is no tokenizer of "
                             f"{model_name} to load here; give a local model of similar size as --model_name and "
                             f"the Gemini model as --api_model") from None
    supports_system_role = True
    eot_token = ""
    thinks = False

    def __init__(self, model_name: str, *, base_url: Optional[str] = None, api_key: Optional[str] = None,
                 api_model: Optional[str] = None, max_concurrency: int = 32, timeout: float = 600.0,
                 max_retries: int = 5, max_model_len: Optional[int] = None, cache_min_tokens: int = CACHE_MIN_TOKENS,
                 first_answer_timeout: float = FIRST_ANSWER_S) -> None:
        genai = import_sdk("google.genai", INSTALL_HINT)
        self._errors = import_sdk("google.genai.errors", INSTALL_HINT)
        types = self._types = import_sdk("google.genai.types", INSTALL_HINT)
        check_limits(max_concurrency, timeout, max_retries, first_answer_timeout)
        self._key = find_key(api_key, KEY_VARIABLES)  # masked wherever it could be shown or written
        key = self._key.value
        if not key:
            raise missing_key("Gemini", self._key)
        self.model_name, self.api_model = model_name, api_model or model_name
        self.endpoint, self.api_version = split_version(base_url or os.environ.get(URL_VARIABLE) or DEFAULT_URL)
        self.url = strip_userinfo(f"{self.endpoint}/{self.api_version}") or self.endpoint  # shown and recorded
        self.max_concurrency, self.timeout, self.max_retries = max_concurrency, timeout, max_retries
        self.cache_min_tokens = cache_min_tokens  # 0: no context caches
        import httpx2  # the SDK's own HTTP client: its timeouts are retried (aiohttp's would not be)

        retry = types.HttpRetryOptions(attempts=max_retries + 1, initial_delay=1.0, exp_base=2.0, max_delay=60.0)
        probe_url, headers = f"{self.endpoint}/{self.api_version}", {"x-goog-api-key": key}
        wait = min(PROBE_TIMEOUT_S, DEAD_S, timeout) / 2  # the watch's own probe's wait
        watch = SilenceWatch(self.url, timeout, max_retries, probe=lambda: model_list_answers(probe_url, headers, wait),
                             first_s=first_answer_timeout, advice=NETWORK)
        self._client = genai.Client(api_key=key, http_options=types.HttpOptions(
            base_url=self.endpoint, api_version=self.api_version, timeout=int(timeout * 1000), retry_options=retry,
            async_client_args={"transport": httpx2.AsyncHTTPTransport(),
                               "event_hooks": {"response": [watch.on_response]}}))
        self._loop = WatchedLoop(self.url, watch)
        self._usage = Usage()
        self._counts: dict[str, int] = {}
        self.chat = self  # what the window search reads: render, count_tokens, max_model_len
        self.max_model_len = self._check_model() if max_model_len is None else max_model_len

    # -- protocol ----------------------------------------------------------------------------
    def render(self, messages: Sequence[Message], prefix: str) -> str:
        return req.render(messages, prefix)

    def reasoning_frame(self, messages: Sequence[Message], prefix: str) -> NoReturn:
        raise UsageError("--reasoning needs free text before the answer, and the gemini backend sends the published "
                         "protocol (one enum answer per request): drop --reasoning")

    def generate(self, prompts: Sequence[str], max_tokens: int, temperature: float, seed: int,
                 stop: Sequence[str] = ()) -> list[Generated]:
        self.reasoning_frame([], "")

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "model_name": self.model_name, "api_model": self.api_model,
                "base_url": self.url, "max_model_len": self.max_model_len,
                "constraint": f"response_mime_type {req.ENUM_MIME_TYPE}", "seed": "generation_config.seed",
                "context_cache_min_tokens": self.cache_min_tokens, "supports_system_role": True}

    def usage(self) -> Usage:
        return self._usage

    def predict_calls(self, calls: Sequence[Call]) -> list[list[str]]:
        """Several calls (runs of a sweep), all their requests in flight together, at most
        --max_concurrency at a time overall."""
        return [list(x) for x in self._run(all_in_flight(calls, self._predict_all, self.max_concurrency))]

    def count_tokens(self, text: str) -> int:
        return self.count_many([text])[0]

    def count_many(self, texts: Sequence[str]) -> list[int]:
        """Tokens of each text (a rendered prompt: its whole request, the system instruction
        counted as a user turn; else the text as one user turn), by the API's countTokens,
        each text asked once, the requests in flight together."""
        missing = [t for t in dict.fromkeys(texts) if t not in self._counts]
        if missing:
            self._counts.update(zip(missing, self._run(all_in_flight(missing, self._count_one, self.max_concurrency),
                                                       COUNTS)))
        return [self._counts[t] for t in texts]

    def close(self) -> None:
        self._loop.close(self._client.aio.aclose())

    # -- internals -----------------------------------------------------------------------------
    def _run(self, coroutine: Coroutine[Any, Any, Result], asking: str = COMPLETION,
             retries: Optional[int] = None) -> Result:
        """Run ``coroutine`` on the watched loop (``asking``: what it asks for; ``retries``: the
        tries after the first it has, when not --max_retries); a failure is one line."""
        try:
            return self._loop.run(coroutine, asking)
        except UsageError:
            raise
        except self._errors.APIError as exc:
            raise self._api_error(exc) from None
        except req.Blocked as exc:
            raise ServiceFailure(f"the Gemini API gave no answer for a prompt of {self.api_model!r}: {exc}",
                                 "rerun the same command, or use another model") from None
        except (ValueError, LookupError, AttributeError, TypeError) as exc:  # the SDK could not read it
            detail = scrub((str(exc).splitlines() or [""])[0][:120])
            raise UsageError(f"the server at {self.url} sent something that is not a Gemini API response "
                             f"({type(exc).__name__}: {detail}); is --base_url the Gemini API "
                             f"({DEFAULT_URL})?") from None
        except (OSError, asyncio.TimeoutError) as exc:
            raise self._transport_error(exc, retries) from None
        except Exception as exc:  # the HTTP client's errors, after the SDK's retries
            if type(exc).__module__.split(".")[0] in ("httpx2", "httpcore2", "httpx", "httpcore"):
                raise self._transport_error(exc, retries) from None
            raise

    def _transport_error(self, exc: BaseException, retries: Optional[int] = None) -> ServiceFailure:
        detail = scrub((str(exc).splitlines() or [""])[0][:80])
        tried = self.max_retries if retries is None else retries
        return ServiceFailure(f"no answer from the Gemini API at {self.url} ({type(exc).__name__}"
                              f"{': ' + detail if detail else ''}; tried {tried} more time{'s' if tried != 1 else ''})",
                              "check --base_url and the network and rerun the same command (--timeout sets how long "
                              "a request may take)")

    def _api_error(self, exc: BaseException) -> UsageError:
        code, status = getattr(exc, "code", None), str(getattr(exc, "status", "") or "")
        message = scrub((str(getattr(exc, "message", "") or "").splitlines() or [""])[0][:160])
        if code in (401, 403) or "API_KEY" in str(getattr(exc, "details", "")) or "API key" in message:
            return refused_key("Gemini", self.url, self._key, code)
        if code == 404:
            return UsageError(f"the Gemini API at {self.url} does not know the model {self.api_model!r} (HTTP 404): "
                              f"check --model_name (or --api_model), e.g. gemini-1.5-flash-8b")
        return ServiceFailure(f"the Gemini API at {self.url} failed (HTTP {code} {status}: {message}) after "
                              f"{self.max_retries} retries", "rerun the same command")

    def _check_model(self) -> int:
        """The model's window, from the API; at most one retry, so a missing API is said at once."""
        retries = min(1, self.max_retries)
        once = self._types.GetModelConfig(http_options=self._types.HttpOptions(
            retry_options=self._types.HttpRetryOptions(attempts=retries + 1, initial_delay=1.0)))

        async def get() -> Any:
            return await self._loop.watch.bounded(self._client.aio.models.get(model=self.api_model, config=once))

        model = self._run(get(), MODEL_DETAILS, retries)
        limit = getattr(model, "input_token_limit", None)
        if not isinstance(limit, int) or limit <= 0:
            raise UsageError(f"the Gemini API at {self.url} gives no input token limit for {self.api_model!r}: "
                             f"pass --max_model_len (its window in tokens)")
        return limit

    async def _count_one(self, text: str, semaphore: asyncio.Semaphore) -> int:
        request = req.decode(text)
        contents = req.counted_contents(request) if request is not None else req.text_contents(text)
        async with semaphore:
            response = await self._loop.watch.answer(
                self._client.aio.models.count_tokens(model=self.api_model, contents=contents))
        return int(response.total_tokens)

    async def _predict_all(self, call: Call, semaphore: asyncio.Semaphore) -> list[str]:
        decoded = [req.decode(p) for p in call.prompts]
        requests = [r for r in decoded if r is not None]
        if len(requests) < len(decoded):
            raise UsageError("the gemini backend predicts on prompts it rendered itself (render), not on plain text")
        cache = await self._cache(requests)
        try:
            return await gather_or_cancel(self._one(r, call.labels, call.temperature, call.seed, semaphore, cache)
                                          for r in requests)
        finally:
            if cache is not None:
                await self._drop(cache)

    async def _cache(self, requests: Sequence[dict[str, Any]]) -> Optional[str]:
        """A context cache of the call's shared head (``gemini_requests.shared_head``) when it
        has at least ``cache_min_tokens`` tokens; None otherwise, or when the API refuses it
        (then heads as small are not offered again)."""
        head = req.shared_head(requests) if self.cache_min_tokens > 0 else None
        if head is None:
            return None
        system, turns = head
        tokens = await self._count_one(req.encode(system, turns), asyncio.Semaphore(1))
        if tokens < self.cache_min_tokens:
            return None
        config = {"contents": turns, "ttl": CACHE_TTL, **({"system_instruction": system} if system else {})}
        try:
            cache = await self._loop.watch.answer(self._client.aio.caches.create(model=self.api_model, config=config))
        except self._errors.ClientError as exc:  # too small for this model, or no caching for it
            log.info("no context cache of %d tokens for %s (%s)", tokens, self.api_model, exc)
            self.cache_min_tokens = tokens + 1
            return None
        self._usage += Usage(tokens, 0, 0, 1)  # writing the cache: its tokens, at the input price
        return cache.name

    async def _drop(self, name: str) -> None:
        try:
            await self._client.aio.caches.delete(name=name)
        except Exception as exc:  # noqa: BLE001 - it expires after CACHE_TTL anyway
            log.warning("could not delete the context cache %s (%s); it expires after %s", name, exc, CACHE_TTL)

    async def _one(self, request: dict[str, Any], labels: Sequence[str], temperature: float, seed: int,
                   semaphore: asyncio.Semaphore, cache: Optional[str] = None) -> str:
        config = req.generation_config(request["system_instruction"], request["prefix"], labels, temperature, seed,
                                       cache)
        contents = request["contents"][-1:] if cache is not None else request["contents"]
        async with semaphore:
            response = await self._loop.watch.answer(self._client.aio.models.generate_content(
                model=self.api_model, contents=contents, config=config))
        self._count(response.usage_metadata)
        text = req.answer_text(response)
        label = req.label_of(text, request["prefix"], labels)
        if label is None:
            raise UsageError(f"the Gemini API answered {scrub(text[:80])!r}, which is not one of the {len(labels)} "
                             f"answers the request allowed ('{request['prefix']} <label>'): {self.api_model!r} "
                             f"ignored the response schema; use a model that supports {req.ENUM_MIME_TYPE}")
        return label

    def _count(self, metadata: Any) -> None:
        def get(name: str) -> int:
            return int(getattr(metadata, name, None) or 0) if metadata is not None else 0

        self._usage += Usage(get("prompt_token_count"), get("cached_content_token_count"),
                             get("candidates_token_count"), 1)
