"""OpenAI-compatible server backend: `vllm serve`, SGLang, llama.cpp's server, or a hosted API.

Uses the official `openai` client (`pip install -e .[openai]`), asynchronously: the prompts of
one `predict` call (a test step) go out together, at most `max_concurrency` at a time. Each
request carries the call's seed and temperature; the client retries 429, 5xx and dropped
connections with backoff (`max_retries`), a timed-out request once (2 x `timeout`: server_watch).

Two ways to restrict the answer to the labels (`api_mode`, recorded in the run's config.json):

* ``completions``: the prompt rendered here exactly as the local backends render it (the
  model's chat template, the generation prompt, then the prediction prefix such as
  ``Intent:``), sent to ``/v1/completions`` with a structured-output choice of `` <label>``
  (vLLM >= 0.12 ``structured_outputs``; ``guided_choice`` on older servers). Same prompt
  protocol as the paper and the in-process backends, so results are comparable.
* ``chat``: the messages sent to ``/v1/chat/completions`` with ``response_format`` a JSON
  schema whose one field is an enum of the labels; for hosted models that take only
  messages. The server applies its own template and the prediction prefix cannot be forced.

``auto`` tries one constrained completion and falls back to chat when the server has no
completions endpoint for the model or ignores the constraint.

``usage()`` (``icrl.backends.usage.ReportsUsage``): the prompt, cached prompt and completion
tokens the server reported, over every request since the backend was built (the warm-up of a
shared prefix and the mode probe included); ``usage_of(key)``: those of the calls of one caller.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from typing import Any, Awaitable, Hashable, Optional, Sequence

from ..errors import UsageError
from ..infra.masking import register_args, strip_userinfo
from . import Call, Generated, Message
from .chat import ChatTokenizer, load_chat_tokenizer
from .in_flight import PredictAsOneCall, all_in_flight, gather_or_cancel
from .keys import find_key, missing_key, refused_key
from .watched_loop import WatchedLoop
from .server_watch import FIRST_ANSWER_S, MODEL_LIST, NETWORK, RESTART, SilenceWatch, bad_response, server_error
from .openai_requests import (chat_frame, chat_request, completion_request, decode_messages, encode_messages,
                              free_completion_request, parse_chat, parse_completion, shared_text_prefix)
from .openai_usage import ServerCounts
from .sdk import check_limits, import_sdk
from .usage import Usage, caller
from .choices import max_label_tokens, sampling_kwargs
from .frame import ReasoningFrame

log = logging.getLogger(__name__)

API_MODES = ("auto", "completions", "chat")
# Completions: the request-body field that restricts the output to a list of strings.
CONSTRAINTS = ("structured_outputs", "guided_choice")
INSTALL_HINT = "the openai backend needs the openai package: pip install -e .[openai] (or pip install openai)"
OPENAI_URL = "https://api.openai.com/v1"
KEY_VARIABLES = ("OPENAI_API_KEY",)


class OpenAIBackend(PredictAsOneCall):
    """The backend protocol (see icrl.backends) over an OpenAI-compatible HTTP server."""

    name = "openai"
    local_model = False  # the model is the server's; its name is a label (icrl.backends)
    window_from_tokenizer = False  # the server's window, not the one a local tokenizer gives

    def __init__(self, model_name: str, *, base_url: Optional[str] = None, api_key: Optional[str] = None,
                 api_model: Optional[str] = None, api_mode: str = "auto", max_concurrency: int = 32,
                 timeout: float = 600.0, max_retries: int = 5, hf_token: Optional[str] = None,
                 max_model_len: Optional[int] = None, eot_token: Optional[str] = None,
                 warm_shared_prefix: bool = True, first_answer_timeout: float = FIRST_ANSWER_S) -> None:
        openai = import_sdk("openai", INSTALL_HINT)
        if api_mode not in API_MODES:
            raise UsageError(f"--api_mode must be one of {', '.join(API_MODES)}, got {api_mode!r}")
        check_limits(max_concurrency, timeout, max_retries, first_answer_timeout)
        self.model_name = model_name
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or OPENAI_URL).rstrip("/")
        self.api_model = api_model or model_name
        self.url = strip_userinfo(self.base_url)  # shown and recorded: never a user:password@
        register_args({"api_key": api_key, "hf_token": hf_token, "base_url": self.base_url})
        self.max_concurrency, self.timeout, self.max_retries = max_concurrency, timeout, max_retries
        self.warm_shared_prefix = warm_shared_prefix
        self._openai = openai
        # The key stays in memory: it is not an attribute that describe() or the run records see.
        # OpenAI's own API needs one; a server of one's own (vllm serve) mostly takes none.
        self._key = find_key(api_key, KEY_VARIABLES)
        if not self._key and self.hosted:
            raise missing_key("OpenAI", self._key)
        watch = SilenceWatch(self.url, timeout, max_retries, first_s=first_answer_timeout,
                             advice=NETWORK if self.hosted else RESTART)
        self._watched = WatchedLoop(self.url, watch)
        self._loop, self._watch, self._run = self._watched.loop, self._watched.watch, self._watched.run
        self._client = openai.AsyncOpenAI(base_url=self.base_url, api_key=self._key.value or "EMPTY",
                                          timeout=timeout, max_retries=max_retries,
                                          http_client=openai.DefaultAsyncHttpxClient(
                                              event_hooks={"response": [watch.on_response]}))
        # The local chat template and tokenizer: needed to render completions, used to count
        # tokens and find the window in both modes; a hosted model may have none.
        self.chat: Optional[ChatTokenizer]
        try:
            self.chat = load_chat_tokenizer(model_name, hf_token=hf_token, eot_token=eot_token,
                                            max_model_len=max_model_len)
        except UsageError as exc:
            if api_mode == "completions":
                raise UsageError(f"--api_mode completions renders the prompt here, which needs the model's "
                                 f"tokenizer: {exc}") from None
            self.chat = None
            log.info("no local tokenizer for %r (%s): chat mode", model_name, exc)
        self._max_model_len = max_model_len
        self.counts = ServerCounts()
        self.stats = self.counts.stats
        self.check_server()
        self.constraint = "structured_outputs"
        self.api_mode = api_mode if api_mode != "auto" else ("chat" if self.chat is None else self._probe())

    @classmethod
    def auto_mode(cls, model_name: str) -> Optional[str]:
        """What --api_mode auto is for ``model_name`` before the backend loads: chat when no tokenizer
        of it can be here (``chat.tokenizer_here``: nothing is loaded or asked of the Hub); None when
        one can, and the server's answer to a constrained completion decides."""
        from .chat import tokenizer_here

        return "chat" if tokenizer_here(model_name) is False else None

    # -- protocol ----------------------------------------------------------------------------
    @property
    def hosted(self) -> bool:
        """Whether the URL is OpenAI's own API (not a server of one's own)."""
        return self.url.startswith(OPENAI_URL.rsplit("/", 1)[0])

    @property
    def max_model_len(self) -> int:
        if self.chat is not None:
            return self.chat.max_model_len
        if self._max_model_len:
            return self._max_model_len
        raise UsageError(f"no local tokenizer for {self.model_name!r}: pass --max_context_examples "
                         f"(and --max_model_len if you want it recorded)")

    @property
    def supports_system_role(self) -> bool:
        return True if self.chat is None else self.chat.supports_system_role

    @property
    def eot_token(self) -> str:
        return "" if self.chat is None else self.chat.eot_token

    def render(self, messages: Sequence[Message], prefix: str) -> str:
        if self.api_mode == "chat":
            return encode_messages(messages, prefix)
        return self._template().render(messages, prefix)

    @property
    def thinks(self) -> bool:
        return self.api_mode == "completions" and bool(getattr(self.chat, "thinking", False))

    def reasoning_frame(self, messages: Sequence[Message], prefix: str) -> ReasoningFrame:
        if self.api_mode == "chat":
            return chat_frame(messages, prefix)
        return self._template().reasoning_frame(messages, prefix)

    def generate(self, prompts: Sequence[str], max_tokens: int, temperature: float, seed: int,
                 stop: Sequence[str] = ()) -> list[Generated]:
        """Free text after each prompt (``icrl.backends.Reasoner``), the requests in flight
        together: completions mode continues the rendered prompt up to ``stop``; chat mode asks
        for the answer to the messages, and a server that returns the reasoning apart (a
        reasoning parser: ``reasoning_content``) gives that as the reasoning."""
        openai = self._openai

        async def one(prompt: str, semaphore: asyncio.Semaphore) -> Generated:
            async with semaphore:
                try:
                    if self.api_mode == "chat":
                        response = await self._watch.answer(self._client.chat.completions.create(
                            model=self.api_model, messages=decode_messages(prompt),
                            **sampling_kwargs(temperature, seed, max_tokens)))
                        message = response.choices[0].message
                        text = getattr(message, "reasoning_content", None) or message.content or ""
                    else:
                        response = await self._watch.answer(self._client.completions.create(
                            **free_completion_request(self.api_model, prompt, max_tokens, temperature, seed, stop)))
                        text = response.choices[0].text or ""
                    self._count(response.usage, None)
                except UsageError:
                    raise
                except openai.APIError:
                    raise
                except (ValueError, LookupError, AttributeError, TypeError) as exc:
                    raise bad_response(self.url, self.api_mode, exc) from None
            tokens = getattr(response.usage, "completion_tokens", None) if response.usage is not None else None
            for marker in stop:
                text = text.split(marker, 1)[0] if marker else text
            if tokens is None:
                tokens = self.chat.count_tokens(text) if self.chat is not None else len(text.split())
            return Generated(text, int(tokens))

        if not prompts:
            return []
        try:
            return self._run(all_in_flight(prompts, one, self.max_concurrency))
        except openai.APIError as exc:
            raise self._fail(exc) from None

    def count_tokens(self, text: str) -> int:
        if self.chat is None:
            raise UsageError(f"no local tokenizer for {self.model_name!r} to count tokens with")
        if self.api_mode == "chat":
            doc = json.loads(text)
            return self.chat.count_tokens(self.chat.render(doc["messages"], ""))
        return self.chat.count_tokens(text)

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"backend": self.name, "model_name": self.model_name, "api_model": self.api_model,
               "base_url": self.url, "api_mode": self.api_mode,
               "constraint": self.constraint if self.api_mode == "completions" else "response_format json_schema enum",
               "local_tokenizer": self.chat is not None, "supports_system_role": self.supports_system_role}
        if self.chat is not None:
            out.update(max_model_len=self.max_model_len, eot_token=self.eot_token)
        return out

    def usage(self) -> Usage:
        return self.counts.tally.total()

    def usage_of(self, key: Hashable) -> Usage:
        return self.counts.tally.of(key)

    def predict_calls(self, calls: Sequence[Call]) -> list[list[str]]:
        """Several calls (runs of a sweep) with all their requests in flight together, at most
        --max_concurrency at a time overall."""
        if self.api_mode == "completions" and self.chat is not None:
            from . import check_prompt_lengths

            for call in calls:
                if call.prompts:
                    check_prompt_lengths([self.chat.encode(p) for p in call.prompts],
                                         max_label_tokens(call.labels), self.max_model_len)

        def send(call: Call, semaphore: asyncio.Semaphore) -> Awaitable[list[str]]:
            return self._predict_all(list(call.prompts), list(call.labels), call.temperature, call.seed, semaphore,
                                     call.key)

        return [list(x) for x in self._run(all_in_flight(calls, send, self.max_concurrency))]

    def close(self) -> None:
        if not self._loop.is_closed():
            self._watched.close(self._client.close())

    # -- internals -----------------------------------------------------------------------------
    def _template(self) -> ChatTokenizer:
        """The local chat template that completions mode renders with (a backend without one is
        in chat mode: __init__ refuses completions without it)."""
        if self.chat is None:
            raise UsageError(f"no local tokenizer for {self.model_name!r} to render the prompt with")
        return self.chat

    def _fail(self, exc: BaseException) -> UsageError:
        return server_error(self.url, exc, self.max_retries)

    def check_server(self) -> None:
        """The server answers and serves `api_model` (else one line naming the URL)."""
        openai = self._openai
        try:
            served = self._run(self._models(), MODEL_LIST)
        except openai.APIConnectionError as exc:
            todo = "check the network, or --base_url" if self.hosted else "start it (e.g. vllm serve) or fix --base_url"
            raise UsageError(f"no server answers at {self.url} ({type(exc).__name__}: {exc}); {todo}") from None
        except openai.AuthenticationError as exc:
            raise refused_key("OpenAI" if self.hosted else "OpenAI-compatible", self.url, self._key,
                              getattr(exc, "status_code", 401)) from None
        except (openai.NotFoundError, openai.PermissionDeniedError):
            return  # some servers have no model list; the first request will tell
        except openai.APIError as exc:
            raise self._fail(exc) from None
        except UsageError:
            raise
        except (ValueError, LookupError, AttributeError, TypeError) as exc:  # not a model list
            raise bad_response(self.url, "model list", exc) from None
        if served and self.api_model not in served:
            raise UsageError(f"the server at {self.url} does not serve {self.api_model!r} (it serves: "
                             f"{', '.join(sorted(served)[:20])}); pass --api_model NAME")

    async def _models(self) -> list[str]:
        # At most one retry: a server that is not there is said at once, not after the backoff.
        client = self._client.with_options(max_retries=min(1, self.max_retries))
        return [m.id async for m in client.models.list()]

    def _probe(self) -> str:
        """auto: completions when the server constrains a completion to given choices, else chat,
        when the server constrains chat answers to given choices (else one line: it can do
        neither). The mode is said only when chat is what works, so a server that answers 404 to
        everything gets the 404's line, not a word about modes."""
        openai = self._openai
        labels = ["yes", "no"]
        question = [{"role": "user", "content": "Answer yes or no."}]
        prompt = self._template().render(question, "Answer:")
        why = f"has no completions endpoint for {self.api_model!r}"
        for constraint in CONSTRAINTS:
            try:
                text = self._run(self._complete(prompt, labels, 0.0, 0, constraint, probe=True))
            except (openai.NotFoundError, openai.BadRequestError, openai.UnprocessableEntityError) as exc:
                log.info("completions with %s refused (%s)", constraint, exc)
                continue
            except openai.APIError as exc:
                raise self._fail(exc) from None
            if parse_completion(text, labels) is not None:
                self.constraint = constraint
                return "completions"
            why = f"does not constrain completions to a choice (it answered {text!r} for yes or no)"
        try:
            answer = self._run(self._chat(question, labels, 0.0, 0))
        except openai.APIError as exc:
            raise self._fail(exc) from None
        if parse_chat(answer, labels) is None:
            raise UsageError(f"the server at {self.url} {why}, and its chat completions are not constrained either "
                             f"(it answered {answer!r} for yes or no): it cannot restrict answers to the labels; "
                             f"use a server with structured outputs (e.g. vllm serve)")
        log.warning("%s %s: using chat completions", self.url, why)
        return "chat"

    async def _complete(self, prompt: str, labels: Sequence[str], temperature: float, seed: int, constraint: str,
                        probe: bool = False) -> str:
        try:
            response = await self._watch.answer(self._client.completions.create(
                **completion_request(self.api_model, prompt, labels, temperature, seed, constraint)))
            text = response.choices[0].text
            self._count(response.usage, None if probe else prompt)  # a probe's tokens: counted, not compared
        except UsageError:
            raise
        except (ValueError, LookupError, AttributeError, TypeError) as exc:  # not a completion
            raise bad_response(self.url, "completions", exc) from None
        return text

    async def _chat(self, messages: Sequence[Message], labels: Sequence[str], temperature: float,
                    seed: int) -> Optional[str]:
        try:
            response = await self._watch.answer(self._client.chat.completions.create(
                **chat_request(self.api_model, messages, labels, temperature, seed)))
            text = response.choices[0].message.content
            self._count(response.usage, None)
        except UsageError:
            raise
        except (ValueError, LookupError, AttributeError, TypeError) as exc:  # not a chat completion
            raise bad_response(self.url, "chat completions", exc) from None
        return text

    def _count(self, usage: Any, prompt: Optional[str]) -> None:
        self.counts.add(usage, prompt, self.chat)

    async def _one(self, semaphore: asyncio.Semaphore, prompt: str, labels: Sequence[str], temperature: float,
                   seed: int) -> str:
        async with semaphore:
            if self.api_mode == "chat":
                text = await self._chat(decode_messages(prompt), labels, temperature, seed)
                label = parse_chat(text, labels)
            else:
                text = await self._complete(prompt, labels, temperature, seed, self.constraint)
                label = parse_completion(text, labels)
        if label is None:
            raise UsageError(f"the server at {self.url} answered {text!r}, which is not one of the "
                             f"{len(labels)} labels: it does not apply the {self.api_mode} constraint; "
                             f"try --api_mode {'chat' if self.api_mode == 'completions' else 'completions'}")
        return label

    async def _predict_all(self, prompts: Sequence[str], labels: Sequence[str], temperature: float, seed: int,
                           semaphore: Optional[asyncio.Semaphore] = None, key: Optional[Hashable] = None) -> list[str]:
        openai = self._openai
        if not prompts:
            return []
        caller.set(key)  # this call's task (and the requests it starts): counted for its caller
        semaphore = semaphore or asyncio.Semaphore(self.max_concurrency)
        try:
            head = shared_text_prefix(prompts) if self.api_mode == "completions" and self.warm_shared_prefix else ""
            if head and self.chat is not None and self.chat.count_tokens(head) >= 32:
                # Requests scheduled together cannot reuse each other's KV blocks: compute the
                # shared context once (one token), so the prefix cache serves all the others.
                warm = await self._watch.bounded(self._client.completions.create(
                    model=self.api_model, prompt=head, max_tokens=1, temperature=0.0,
                    extra_body={"add_special_tokens": False}))
                self.counts.warmed(getattr(warm, "usage", None))
            return await gather_or_cancel(self._one(semaphore, p, labels, temperature, seed) for p in prompts)
        except openai.APIError as exc:
            raise self._fail(exc) from None
