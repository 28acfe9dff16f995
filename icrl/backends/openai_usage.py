"""What an OpenAI-compatible server reported about the backend's requests.

``reported_usage(usage)`` reads one response's ``usage`` as ``icrl.backends.usage.Usage``: its
``prompt_tokens``, the cached part of them (``prompt_tokens_details.cached_tokens``, which
OpenAI's prompt cache and vLLM's ``--enable-prompt-tokens-details`` report; 0 where the server
reports none) and its ``completion_tokens``. ``ServerCounts`` keeps the backend's totals: the
usage tally (``usage()``, per caller ``usage_of(key)``) and ``stats`` (requests, prompt and
completion tokens of the answering requests, prompts the server counts differently from the
local tokenizer, warm-up requests of a shared prefix).
"""

from __future__ import annotations

import logging
from typing import Any, Optional

from . import ChatTemplate
from .usage import Tally, Usage

log = logging.getLogger(__name__)


def reported_usage(usage: Any) -> Usage:
    """One response's ``usage`` (None: a server that reports none) as one request's Usage."""
    if usage is None:
        return Usage(requests=1)
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) if details is not None else None
    return Usage(int(usage.prompt_tokens or 0), int(cached or 0), int(usage.completion_tokens or 0), 1)


class ServerCounts:
    """The backend's running counts of what the server reported (module docstring)."""

    def __init__(self) -> None:
        self.tally = Tally()
        self.stats = {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0, "token_mismatches": 0,
                      "warmup_requests": 0}

    def add(self, usage: Any, prompt: Optional[str], chat: Optional[ChatTemplate]) -> None:
        """One answering request's ``usage``; with its ``prompt`` and the local tokenizer
        (``chat``, None: none), the prompt's length checked against the server's count."""
        self.stats["requests"] += 1
        self.tally.add(reported_usage(usage))
        if usage is None:
            return
        self.stats["prompt_tokens"] += int(usage.prompt_tokens or 0)
        self.stats["completion_tokens"] += int(usage.completion_tokens or 0)
        if prompt is not None and chat is not None and usage.prompt_tokens is not None:
            local = chat.count_tokens(prompt)
            if local != usage.prompt_tokens:
                self.stats["token_mismatches"] += 1
                if self.stats["token_mismatches"] == 1:
                    log.warning("the server counts %d prompt tokens where the local tokenizer counts %d: it "
                                "tokenizes differently (another model or tokenizer?)", usage.prompt_tokens, local)

    def warmed(self, usage: Any) -> None:
        """A warm-up request of a shared prefix (one token generated): billed, not an answer."""
        self.stats["warmup_requests"] += 1
        self.tally.add(reported_usage(usage))
