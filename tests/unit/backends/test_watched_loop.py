"""backends/watched_loop.py: a batch of requests on the backend's own loop, and a stop
(Ctrl-C) that lands while requests are in flight."""

from __future__ import annotations

import asyncio
import gc
import warnings

import pytest

from icrl.backends.server_watch import SilenceWatch
from icrl.backends.watched_loop import WatchedLoop

URL = "http://127.0.0.1:1/v1"


def watch() -> SilenceWatch:
    return SilenceWatch(URL, timeout=30, retries=0, probe=lambda: True)


def test_a_batch_returns_its_result():
    async def batch():
        await asyncio.sleep(0)
        return [1, 2]

    loop = WatchedLoop(URL, watch())
    assert loop.run(batch()) == [1, 2]
    loop.close()


def test_a_stop_caught_by_one_request_cancels_the_others_and_leaves_nothing_to_warn_about():
    """Ctrl-C raised inside one request's task: the task keeps it and raises it again as the
    batch ends. The stop reaches the caller once; the other requests are cancelled; no
    coroutine is left un-awaited and no task pending."""
    cancelled = []

    async def request(i):
        if i == 0:
            await asyncio.sleep(0.01)
            raise KeyboardInterrupt  # where a signal handler raises it, inside a task's step
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(i)
            raise

    async def batch():
        return await asyncio.gather(*(request(i) for i in range(4)))

    loop = WatchedLoop(URL, watch())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(KeyboardInterrupt):
            loop.run(batch())
        pending = [t for t in asyncio.all_tasks(loop.loop) if not t.done()]
        loop.close()
        gc.collect()
    assert sorted(cancelled) == [1, 2, 3]
    assert not pending, pending
    assert not [w for w in caught if "never awaited" in str(w.message)], [str(w.message) for w in caught]
