"""Anthropic backend: Claude models through the Messages API, on the official ``anthropic`` SDK
(``pip install -e .[anthropic]``).

Asynchronous like the OpenAI-compatible backend: the prompts of one ``predict`` call (a test
step) go out together, at most ``max_concurrency`` at a time; the SDK retries 429, 529, 5xx,
timeouts and dropped connections with exponential backoff (``max_retries``); one request waits
2 x --timeout at most (a timeout is tried once more, not ``max_retries`` more times), and an
endpoint that answers nothing at all is given up on by the silence watch (``server_watch``). The request
bodies, the two answer modes (a prefilled prediction prefix, or a forced tool call with an enum
of the labels) and the cache breakpoint after the last context episode: ``anthropic_requests``.

The key comes from ``--api_key`` or ``ANTHROPIC_API_KEY``, stays in memory and is never written
(not an attribute ``describe()`` or the records see). ``--base_url`` points the SDK at another
endpoint (a proxy, the tests' stand-in server). The API version the SDK speaks takes no seed and
no temperature: neither is sent (the model samples at its own setting, said once per backend),
so a run's labels do not repeat across reruns. ``usage()`` sums the API's reported
usage (``icrl.backends.usage.ReportsUsage``); ``count_tokens`` asks the API's token counter.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from typing import Any, Awaitable, Coroutine, Optional, Sequence, TypeVar

from ..errors import ServiceFailure, UsageError
from ..infra.masking import register_args, strip_userinfo
from . import Call, Generated, Message
from .anthropic_requests import (MODES, count_request, encode_prompt, free_message_request, message_request, parse_text,
                                 parse_tool, text_of, usage_of)
from .frame import ReasoningFrame
from .in_flight import PredictAsOneCall, all_in_flight, gather_or_cancel
from .keys import find_key, missing_key, refused_key
from .sdk import check_limits, import_sdk
from .watched_loop import WatchedLoop
from .server_watch import (COMPLETION, COUNTS, FIRST_ANSWER_S, MODEL_DETAILS, NETWORK, SilenceWatch,
                           bad_response, model_list_answers)
from .usage import Usage

log = logging.getLogger(__name__)

Result = TypeVar("Result")

DEFAULT_URL = "https://api.anthropic.com"
INSTALL_HINT = ("the anthropic backend needs the anthropic package: pip install -e .[anthropic] (or pip install "
                "anthropic)")
KEY_VARIABLES = ("ANTHROPIC_API_KEY",)
ADVICE = f"is --base_url the Anthropic API ({DEFAULT_URL}, or a proxy of it)?"


class AnthropicBackend(PredictAsOneCall):
    """The backend protocol (see icrl.backends) over Anthropic's Messages API."""

    name = "anthropic"
    local_model = False  # a hosted model: its name is a label (icrl.backends)
    supports_system_role = True
    eot_token = ""
    thinks = False  # --reasoning writes its reasoning in the answer's text (see reasoning_frame)

    def __init__(self, model_name: str, *, base_url: Optional[str] = None, api_key: Optional[str] = None,
                 api_model: Optional[str] = None, api_mode: str = "auto", max_concurrency: int = 32,
                 timeout: float = 600.0, max_retries: int = 5, max_model_len: Optional[int] = None,
                 first_answer_timeout: float = FIRST_ANSWER_S) -> None:
        anthropic = import_sdk("anthropic", INSTALL_HINT)
        if api_mode not in ("auto", *MODES):
            raise UsageError(f"--api_mode must be one of auto, {', '.join(MODES)}, got {api_mode!r}")
        check_limits(max_concurrency, timeout, max_retries, first_answer_timeout)
        self.base_url = (base_url or os.environ.get("ANTHROPIC_BASE_URL") or DEFAULT_URL).rstrip("/")
        self.url = str(strip_userinfo(self.base_url))  # shown and recorded: never a user:password@
        register_args({"api_key": api_key, "base_url": self.base_url})
        self._key = find_key(api_key, KEY_VARIABLES)  # masked wherever it could be shown or written
        if not self._key:
            raise missing_key("Anthropic", self._key)
        self.model_name, self.api_model = model_name, api_model or model_name
        self.api_mode = "chat" if api_mode == "auto" else api_mode
        self.max_concurrency, self.timeout, self.max_retries = max_concurrency, timeout, max_retries
        self._max_model_len = max_model_len
        self._anthropic = anthropic
        watch = SilenceWatch(self.url, timeout, max_retries, probe=lambda: model_list_answers(f"{self.url}/v1"),
                             first_s=first_answer_timeout, advice=NETWORK)
        self._client = anthropic.AsyncAnthropic(base_url=self.base_url, api_key=self._key.value, timeout=timeout,
                                                max_retries=max_retries, http_client=anthropic.DefaultAsyncHttpxClient(
                                                    event_hooks={"response": [watch.on_response]}))
        self._watched = WatchedLoop(self.url, watch)
        self._loop, self._watch, self._run = self._watched.loop, self._watched.watch, self._watched.run
        self._usage = Usage()
        self._counted: dict[str, int] = {}
        self.chat = self  # what the window search reads: render, count_many, max_model_len
        self._said: set[float] = set()  # the temperatures said not to be sent
        self.check_model()

    @classmethod
    def auto_mode(cls, model_name: str) -> Optional[str]:
        """What --api_mode auto is before the backend loads: chat, always."""
        return "chat"

    # -- protocol ----------------------------------------------------------------------------
    @property
    def max_model_len(self) -> int:
        """--max_model_len, else the window the API gives for the model (``max_input_tokens``)."""
        window = self._max_model_len or self.max_input_tokens
        if window:
            return int(window)
        raise UsageError(f"the Anthropic API does not say the window of {self.model_name!r}: pass --max_model_len "
                         f"(its window in tokens, e.g. 200000; the automatic context size is then searched with the "
                         f"API's token counter) or --max_context_examples")

    def render(self, messages: Sequence[Message], prefix: str) -> str:
        """The messages themselves, as JSON: the API renders them."""
        return encode_prompt(messages, prefix)

    def reasoning_frame(self, messages: Sequence[Message], prefix: str) -> ReasoningFrame:
        """Reasoning in the answer's text: the messages, then the reasoning as the assistant's turn
        and a user turn asking for the answer."""
        from .openai_requests import chat_frame

        frame = chat_frame(messages, prefix)
        return frame._replace(prompt=self.render(messages, prefix))  # with the breakpoint before the query

    def predict_calls(self, calls: Sequence[Call]) -> list[list[str]]:
        """Several calls (runs of a sweep) with all their requests in flight together, at most
        --max_concurrency at a time overall. The seeds are not sent (the API takes none)."""
        for call in calls:
            self._say_temperature(call.temperature)

        def send(call: Call, semaphore: asyncio.Semaphore) -> Awaitable[list[str]]:
            return self._call(list(call.prompts), list(call.labels), semaphore)

        return [list(x) for x in self._guarded(all_in_flight(calls, send, self.max_concurrency))]

    def generate(self, prompts: Sequence[str], max_tokens: int, temperature: float, seed: int,
                 stop: Sequence[str] = ()) -> list[Generated]:
        """Free text after each prompt's messages (``icrl.backends.Reasoner``), up to ``stop``."""

        async def one(prompt: str, semaphore: asyncio.Semaphore) -> Generated:
            async with semaphore:
                doc = json.loads(prompt)
                body = free_message_request(self.api_model, doc["messages"], max_tokens, stop, doc.get("cache_at"))
                response = await self._create(body)
            text = text_of(response)
            for marker in stop:
                text = text.split(marker, 1)[0] if marker else text
            return Generated(text, int(getattr(response.usage, "output_tokens", 0) or 0))

        return self._guarded(all_in_flight(prompts, one, self.max_concurrency)) if prompts else []

    def count_tokens(self, text: str) -> int:
        return self.count_many([text])[0]

    def count_many(self, texts: Sequence[str]) -> list[int]:
        """Input tokens of each text by the API's token counter: a rendered prompt as the
        completions mode sends it, any other text as one user turn; each text asked once, the
        requests in flight together (at most --max_concurrency). The window search reads it."""
        missing = [t for t in dict.fromkeys(texts) if t not in self._counted]
        if missing:
            async def one(text: str, semaphore: asyncio.Semaphore) -> int:
                try:
                    doc = json.loads(text)
                    messages, prefix = doc["messages"], doc.get("prefix", "")
                except (ValueError, TypeError, KeyError):  # not a rendered prompt: a plain text
                    messages, prefix = [{"role": "user", "content": text}], ""
                body = count_request(self.api_model, messages, prefix)
                async with semaphore:
                    response = await self._watch.answer(self._client.messages.count_tokens(**body))
                return int(response.input_tokens)

            self._counted.update(zip(missing, self._guarded(all_in_flight(missing, one, self.max_concurrency),
                                                            COUNTS)))
        return [self._counted[t] for t in texts]

    def _say_temperature(self, temperature: float) -> None:
        if temperature not in self._said:
            self._said.add(temperature)
            log.warning("the Anthropic API takes no temperature: --temperature %g is not sent, %s samples at its "
                        "own setting", temperature, self.api_model)

    def usage(self) -> Usage:
        return self._usage

    def describe(self) -> dict[str, Any]:
        constraint = ("prefilled prediction prefix, text checked against the labels" if self.api_mode == "completions"
                      else "forced tool call, label enum")
        out: dict[str, Any] = {
            "backend": self.name, "model_name": self.model_name, "api_model": self.api_model, "base_url": self.url,
            "api_mode": self.api_mode, "constraint": constraint,
            "prompt_cache": "breakpoint after the last context episode", "seed": "not supported by the API",
            "temperature": "not supported by the API", "supports_system_role": True}
        if self._max_model_len:
            out["max_model_len"] = self._max_model_len
        if self.max_input_tokens:
            out["max_input_tokens"] = self.max_input_tokens
        return out

    def close(self) -> None:
        if not self._loop.is_closed():
            self._watched.close(self._client.close())

    # -- internals -----------------------------------------------------------------------------
    def check_model(self) -> None:
        """The API answers, takes the key and knows ``api_model`` (else one line)."""
        client = self._client.with_options(max_retries=min(1, self.max_retries))  # a missing API is said at once
        info = self._guarded(client.models.retrieve(self.api_model), MODEL_DETAILS)
        # the model's window, when the API says
        self.max_input_tokens: Optional[int] = getattr(info, "max_input_tokens", None)

    def _guarded(self, coroutine: Coroutine[Any, Any, Result], asking: str = COMPLETION) -> Result:
        """Run ``coroutine`` on the backend's loop under the silence watch (``asking``: what it asks
        for); a failure of the API is one line."""
        try:
            return self._run(coroutine, asking)
        except self._anthropic.APIError as exc:
            raise self._fail(exc) from None

    def _fail(self, exc: BaseException) -> UsageError:
        """One line for a request that failed for good (after the SDK's retries)."""
        anthropic = self._anthropic
        body = getattr(exc, "body", None)
        said = body.get("error", body) if isinstance(body, dict) else None
        said = said.get("message") if isinstance(said, dict) else None
        detail = (str(said or getattr(exc, "message", "") or exc).splitlines() or [""])[0][:200]
        status = getattr(exc, "status_code", None)
        if isinstance(exc, anthropic.APIConnectionError):
            return ServiceFailure(f"no answer from the Anthropic API at {self.url} ({type(exc).__name__}: {detail}) "
                                  f"after {self.max_retries} retries", "check --base_url and the network, then rerun "
                                                                       "the same command")
        if status == 401:
            return refused_key("Anthropic", self.url, self._key, 401)
        if status == 403:
            return UsageError(f"the Anthropic API at {self.url} does not let this key use {self.api_model!r} (HTTP "
                              f"403: {detail})")
        if status == 404:
            return UsageError(f"the Anthropic API at {self.url} does not know the model {self.api_model!r} (HTTP 404): "
                              f"check --model_name (or --api_model), e.g. claude-haiku-4-5")
        if status == 400:
            hint = "; a model that takes no prefill needs --api_mode chat" if self.api_mode == "completions" else ""
            return UsageError(f"the Anthropic API at {self.url} refused the request (HTTP 400: {detail}){hint}")
        what = f"HTTP {status}" if status else type(exc).__name__
        return ServiceFailure(f"the Anthropic API at {self.url} failed ({what}: {detail}) after {self.max_retries} "
                              f"retries", "rerun the same command")

    async def _create(self, body: dict[str, Any]) -> Any:
        """One Messages request; its usage counted; a 200 that is not a message is one line."""
        try:
            response = await self._watch.answer(self._client.messages.create(**body))
            content = list(response.content)
            self._usage = self._usage + usage_of(response.usage)
        except UsageError:
            raise
        except (ValueError, LookupError, AttributeError, TypeError) as exc:  # not a message
            raise bad_response(self.url, "Anthropic messages", exc, ADVICE) from None
        if not content:
            raise UsageError(f"the Anthropic API at {self.url} answered with no content (stop reason "
                             f"{getattr(response, 'stop_reason', None)!r}): nothing to read a label from")
        return response

    async def _one(self, semaphore: asyncio.Semaphore, prompt: str, labels: Sequence[str]) -> str:
        doc = json.loads(prompt)
        body = message_request(self.api_model, doc["messages"], doc["prefix"], labels, self.api_mode,
                               doc.get("cache_at"))
        async with semaphore:
            response = await self._create(body)
        if self.api_mode == "completions":
            label, given = parse_text(text_of(response), labels), repr(text_of(response))
        else:
            label, given = parse_tool(response, labels)
        if label is None:
            other = "chat" if self.api_mode == "completions" else "completions"
            raise ServiceFailure(f"the Anthropic API at {self.url} answered {given[:120]}, which is not one of the "
                                 f"{len(labels)} labels (--api_mode {self.api_mode})",
                                 f"rerun the same command, or try --api_mode {other}")
        return label

    async def _call(self, prompts: Sequence[str], labels: Sequence[str], semaphore: asyncio.Semaphore) -> list[str]:
        if not prompts:
            return []
        return await gather_or_cancel(self._one(semaphore, p, labels) for p in prompts)
