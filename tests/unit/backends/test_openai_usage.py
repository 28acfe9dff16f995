"""icrl.backends.openai_usage: a response's usage read as Usage, cached tokens where reported."""

from types import SimpleNamespace

from icrl.backends.openai_usage import ServerCounts, reported_usage
from icrl.backends.usage import Usage


def test_a_response_without_cached_tokens_counts_none_cached():
    plain = SimpleNamespace(prompt_tokens=10, completion_tokens=2, prompt_tokens_details=None)
    cached = SimpleNamespace(prompt_tokens=10, completion_tokens=2,
                             prompt_tokens_details=SimpleNamespace(cached_tokens=8))
    assert reported_usage(plain) == Usage(10, 0, 2, 1)
    assert reported_usage(cached) == Usage(10, 8, 2, 1)
    assert reported_usage(None) == Usage(0, 0, 0, 1)  # a server that reports no usage: a request all the same


def test_warm_ups_are_billed_but_not_answers():
    counts = ServerCounts()
    counts.add(SimpleNamespace(prompt_tokens=10, completion_tokens=2), None, None)
    counts.warmed(SimpleNamespace(prompt_tokens=8, completion_tokens=1))
    assert counts.tally.total() == Usage(18, 0, 3, 2)
    assert counts.stats["requests"] == 1 and counts.stats["warmup_requests"] == 1
