"""The transformers backend's choice between packed and call-by-call lock-step calls
(icrl.backends.hf.Choice, TransformersBackend.packs): both ways are tried, alternately, then the
faster one per prompt token is kept; calls that cannot be packed never are."""

from __future__ import annotations

from types import SimpleNamespace

from icrl.backends.hf import Choice, TransformersBackend


def test_choice_tries_both_ways_then_keeps_the_faster():
    for faster in (True, False):
        choice = Choice(trials=3)
        tried = []
        while choice.deciding:
            way = choice.next()
            tried.append(way)
            choice.record(way, 1.0 if way == faster else 2.0)
        assert tried.count(True) == tried.count(False) == 3
        assert all(choice.next() == faster for _ in range(5))


def test_a_slow_outlier_does_not_decide():
    choice = Choice(trials=3)
    for seconds in ((True, 9.0), (False, 2.0), (True, 1.0), (False, 2.0), (True, 1.0), (False, 2.0)):
        choice.record(*seconds)
    assert choice.chosen is True  # medians 1.0 vs 2.0


def _backend(cross_run=None, prefix_reuse=True):
    backend = TransformersBackend.__new__(TransformersBackend)
    backend.cross_run, backend.prefix_reuse, backend._choice = cross_run, prefix_reuse, Choice()
    return backend


def call(key, prompts=("p",)):
    return SimpleNamespace(key=key, prompts=list(prompts))


def test_only_calls_of_distinct_runs_are_packed():
    assert _backend(True).packs([call(0), call(1)])
    assert not _backend(True).packs([call(0)]), "one call: nothing to pack"
    assert not _backend(True).packs([call(0), call(0)]), "one caller twice: its stored prefix would be overwritten"
    assert not _backend(True).packs([call(0), call(1, prompts=())])
    assert not _backend(True, prefix_reuse=False).packs([call(0), call(1)])
    assert not _backend(False).packs([call(0), call(1)])
