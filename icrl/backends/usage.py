"""What a hosted API says a run used: prompt tokens, the part of them its prompt cache served,
output tokens, requests.

A backend that talks to an API reporting usage (the OpenAI-compatible server, Gemini, Anthropic)
implements ``ReportsUsage``: ``usage()`` returns its totals since it was built, as the API
reported them. The run takes the difference across a step to record that step's usage;
backends that compute locally (transformers, vLLM in process, the fake) do not implement it
and their records carry no usage.

    before = backend.usage()
    ...                              # a step's calls
    step = backend.usage() - before  # Usage(prompt_tokens=..., cached_prompt_tokens=..., ...)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class Usage:
    """Token counts as an API reported them; ``cached_prompt_tokens`` is the part of
    ``prompt_tokens`` its prompt cache served (billed at the cached-input price)."""

    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    output_tokens: int = 0
    requests: int = 0

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(*(a + b for a, b in zip(dataclasses.astuple(self), dataclasses.astuple(other))))

    def __sub__(self, other: "Usage") -> "Usage":
        return Usage(*(a - b for a, b in zip(dataclasses.astuple(self), dataclasses.astuple(other))))

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


@runtime_checkable
class ReportsUsage(Protocol):
    """A backend whose API reports usage."""

    def usage(self) -> Usage:
        """Totals since the backend was built."""
        ...
