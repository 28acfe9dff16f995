"""Many requests in flight together: how the server and API backends (openai, anthropic, gemini)
send a step's prompts, a sweep's calls and a batch of token counts.

``all_in_flight(items, send, limit)`` starts ``send(item, semaphore)`` for every item at once and
returns their results in the items' order; each ``send`` holds the semaphore around its request,
so at most ``limit`` (--max_concurrency) are at the server at a time.

``gather_or_cancel(coroutines)``: one call's requests as tasks together, their results in order;
when one fails (or the call is cancelled) the others are cancelled and waited for, so that none
is left running on the backend's loop.

``PredictAsOneCall``: a backend's ``predict`` as one call of its ``predict_calls`` (every request
of the step in flight together; progress said once, when they have all answered).
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Coroutine, Iterable, Optional, Sequence, TypeVar

from . import Call

Item = TypeVar("Item")
Result = TypeVar("Result")


async def all_in_flight(items: Iterable[Item], send: Callable[[Item, asyncio.Semaphore], Awaitable[Result]],
                        limit: int) -> list[Result]:
    """``send(item, semaphore)`` for every item, together, at most ``limit`` holding the semaphore."""
    semaphore = asyncio.Semaphore(limit)
    return list(await asyncio.gather(*[send(item, semaphore) for item in items]))


async def gather_or_cancel(coroutines: Iterable[Coroutine[Any, Any, Result]]) -> list[Result]:
    """The coroutines' results in order, run as tasks together; none left running (module docstring)."""
    tasks = [asyncio.ensure_future(coroutine) for coroutine in coroutines]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class PredictAsOneCall:
    """``predict`` through ``predict_calls`` (see the module docstring)."""

    def predict_calls(self, calls: Sequence[Call]) -> list[list[str]]:
        raise NotImplementedError

    def predict(self, prompts: Sequence[str], labels: Sequence[str], temperature: float, seed: int,
                progress: Optional[Callable[[int], Any]] = None) -> list[str]:
        out = self.predict_calls([Call(prompts, labels, temperature, seed)])[0]
        if progress is not None:  # all requests of the call finish together
            progress(len(prompts))
        return out
