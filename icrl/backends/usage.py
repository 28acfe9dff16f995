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

A backend that serves several callers' calls at once (``predict_calls``: the runs of a
lock-step sweep) also implements ``ReportsCallUsage``: ``usage_of(key)`` is the part of its
totals spent on the calls of caller ``key`` (``Call.key``). ``Tally`` keeps both: the backend
adds each response's usage, with ``caller`` set to the key of the call it serves. ``Meter``
is what the loop reads: the usage of a run's models that report it, each model once.
"""

from __future__ import annotations

import dataclasses
import threading
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Hashable, Iterable, Optional, Protocol, TypedDict, runtime_checkable

# The caller whose call the current requests serve (``Call.key``; None: no caller named).
caller: ContextVar[Optional[Hashable]] = ContextVar("icrl_usage_caller", default=None)


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

    def as_dict(self) -> "UsageRecord":
        return UsageRecord(prompt_tokens=self.prompt_tokens, cached_prompt_tokens=self.cached_prompt_tokens,
                           output_tokens=self.output_tokens, requests=self.requests)


class UsageRecord(TypedDict):
    """``usage`` in a run's records (``icrl.records.schema``): ``Usage`` as written, by runs on a
    backend that reports it (the OpenAI-compatible server, Gemini, Anthropic).
    ``cached_prompt_tokens`` is the part of ``prompt_tokens`` its prompt cache served."""

    prompt_tokens: int
    cached_prompt_tokens: int
    output_tokens: int
    requests: int


@runtime_checkable
class ReportsUsage(Protocol):
    """A backend whose API reports usage."""

    def usage(self) -> Usage:
        """Totals since the backend was built."""
        ...


@runtime_checkable
class ReportsCallUsage(Protocol):
    """A backend whose usage can be told apart by caller (the runs of a lock-step sweep)."""

    def usage_of(self, key: Hashable) -> Usage:
        """Totals of the calls made with ``Call.key == key`` since the backend was built."""
        ...


class Tally:
    """Running totals of what an API reported: ``total()`` and, per caller, ``of(key)``; ``add``
    counts one response for the caller in ``caller`` (safe from several threads)."""

    def __init__(self) -> None:
        self._total = Usage()
        self._by_caller: dict[Hashable, Usage] = {}
        self._lock = threading.Lock()

    def add(self, usage: Usage) -> None:
        key = caller.get()
        with self._lock:
            self._total = self._total + usage
            if key is not None:
                self._by_caller[key] = self._by_caller.get(key, Usage()) + usage

    def total(self) -> Usage:
        return self._total

    def of(self, key: Hashable) -> Usage:
        return self._by_caller.get(key, Usage())


class Meter:
    """The usage of a run's models that report it, each model once: ``read()`` is their totals
    summed (None: none of them reports usage), ``since(before)`` the record of what they spent
    since ``read()`` gave ``before`` (``Usage.as_dict()``; None after a None)."""

    def __init__(self, models: Iterable[object] = ()) -> None:
        self.models: list[ReportsUsage] = []
        for model in models:
            if isinstance(model, ReportsUsage) and all(model is not m for m in self.models):
                self.models.append(model)

    def read(self) -> Optional[Usage]:
        if not self.models:
            return None
        return sum((m.usage() for m in self.models), Usage())

    def since(self, before: Optional[Usage]) -> Optional[UsageRecord]:
        now = self.read()
        return None if before is None or now is None else (now - before).as_dict()
