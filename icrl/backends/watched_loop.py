"""An API backend's own asyncio loop, watched for a silent server.

``WatchedLoop(url, watch).run(coroutine, asking)`` runs one batch of requests to the end on the
backend's loop while ``watch`` (a ``server_watch.SilenceWatch``) looks on (``asking``: what the
batch asks for, as a waiting line says it): a server that answers nothing at all for the watch's
limit, or no request yet in --first_answer_timeout, cancels the batch and fails in one line
(``SilenceWatch.failure``); a stop (Ctrl-C) with requests in flight cancels them and waits a second at
most (a second stop meanwhile is ignored), so that asyncio prints nothing after the
stop's own line."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Coroutine, Optional, TypeVar

from ..infra.signals import check, ignore_signals, restore
from .server_watch import COMPLETION, SilenceWatch

Result = TypeVar("Result")


class WatchedLoop:
    def __init__(self, url: str, watch: SilenceWatch) -> None:
        self.url, self.watch = url, watch
        self.loop = asyncio.new_event_loop()

    def run(self, coroutine: Coroutine[Any, Any, Result], asking: str = COMPLETION) -> Result:
        task = self.loop.create_task(coroutine)
        def cancel() -> None:  # from the watch's thread
            self.loop.call_soon_threadsafe(task.cancel)

        with self.watch.watching(cancel, asking):
            try:
                result = self.loop.run_until_complete(task)
            except asyncio.CancelledError:
                if not self.watch.dead:
                    raise
                raise self.watch.failure() from None
            except BaseException:
                if not task.done():  # a stop with requests in flight
                    previous = ignore_signals()  # a second Ctrl-C must not cut the cancel short
                    try:
                        self._cancel(task)
                    finally:
                        restore(previous)
                raise
        check()  # a stop that arrived in one of asyncio's callbacks, which swallow it
        return result

    def _cancel(self, task: asyncio.Task[Any]) -> None:
        """Cancel ``task`` and run the loop until it ends, 1 s at most. A request's task that
        caught the stop keeps it and raises it again as it ends: that is caught here, and the
        loop runs on (a future, not a coroutine, is awaited: one never started would warn)."""
        self.loop.set_exception_handler(lambda loop, context: None)
        ended = self.loop.create_future()

        def end(_: object = None) -> None:
            if not ended.done():
                ended.set_result(None)

        task.add_done_callback(end)
        timer = self.loop.call_later(1.0, end)
        deadline = time.monotonic() + 2.0
        task.cancel()
        while not ended.done() and time.monotonic() < deadline:
            try:
                self.loop.run_until_complete(ended)
            except BaseException:  # noqa: BLE001 - the stop again, from a request's task
                continue
        timer.cancel()

    def close(self, last: Optional[Coroutine[Any, Any, Any]] = None) -> None:
        """Run ``last`` (a coroutine: the client's close) and close the loop, once."""
        if self.loop.is_closed():
            if last is not None:
                last.close()
            return
        if last is not None:
            self.loop.run_until_complete(last)
        self.loop.close()
