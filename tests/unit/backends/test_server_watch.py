"""icrl.backends.server_watch: the first-answer bound and the silence watch in one process (the
runs against stand-ins that never answer, which wait out the 60 s default: tests/integration/
backends/test_server_watch.py)."""

from __future__ import annotations

import time

import pytest

from icrl.backends.server_watch import SilenceWatch, no_first_answer


@pytest.mark.waits
def test_the_first_answer_bound_does_not_depend_on_the_timeout_and_ends_once_a_completion_answers(capsys):
    watch = SilenceWatch("http://127.0.0.1:9/v1", timeout=600, retries=5, first_s=0.5, probe=lambda: True,
                         notice_s=0.2)
    cancelled: list = []
    with watch.watching(lambda: cancelled.append(time.monotonic()), "a completion"):
        time.sleep(1.5)
    assert cancelled and watch.dead and watch.why == "first"
    assert str(watch.failure()).startswith("the server at http://127.0.0.1:9/v1 did not answer the run's first "
                                           "request for a completion in 0.5 s (it answers its model list")
    watch.heard = True  # a completion was answered: the run's usual bounds (--timeout) from now on
    with watch.watching(lambda: cancelled.append(0.0)):
        time.sleep(1.0)
    assert len(cancelled) == 1 and not watch.dead


@pytest.mark.waits
def test_counting_tokens_is_not_cut_short_once_counts_answer():
    """A window search's calls of token counts that answer are not a dead server, however long they
    take before any completion was asked."""
    from types import SimpleNamespace
    import asyncio

    watch = SilenceWatch("http://127.0.0.1:9/v1", timeout=600, retries=5, first_s=0.5, probe=lambda: True)
    path = SimpleNamespace(path="/v1beta/models/m:countTokens")
    count = SimpleNamespace(request=SimpleNamespace(method="POST", url=path))
    with watch.watching(lambda: None, "token counts"):
        asyncio.run(watch.on_response(count))
        time.sleep(1.0)
    assert not watch.dead and not watch.heard  # a count answered this call; no completion yet
    assert "first request for its model list in 60 s; " in str(no_first_answer("u", 60, "its model list", False))
