"""Curated retrieval (icrl.method.strategies.curated): utilities from the rewards of the contexts
that held an episode, pruning after enough uses, what the records say, refusals, resuming."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import TOY, files_under, one_error_line, run_and_resume, untimed_records
from icrl.cli.run import main
from icrl.method.episode import Episode
from icrl.method.strategies import make_strategy
from icrl.records import read_jsonl

RUN = [*TOY, "--icrl", "--max_context_examples", "3", "--train_k", "30", "--test_every", "10", "--test_k", "4"]


def episodes(n: int) -> list:
    return [Episode(f"parcel question {i}", "delivery", 1, None, None, i) for i in range(n)]


def test_an_episode_below_the_threshold_after_enough_uses_is_never_retrieved_again():
    curated = make_strategy("knn_lexical_curated", 2, curate_min_uses=2, curate_threshold=0.5)
    history = episodes(4)
    curated.observe_reward(0, [history[0], history[1]])
    assert curated.pruned == set()  # one use each: not yet judged
    curated.observe_reward(1, [history[0], history[2]])
    assert curated.utility(0) == 0.5 and curated.pruned == set()  # not below 0.5
    curated.observe_reward(0, [history[0], history[1]])
    assert curated.pruned == {0, 1}  # 1/3 and 0/2
    assert curated.metrics()["pruned"] == [0, 1] and curated.metrics()["pruned"] == []  # said once
    chosen = curated.select(history, np.random.default_rng(0), query="parcel question")
    assert {e.step for e in chosen} == {2, 3}
    curated.reset()
    assert curated.pruned == set() and np.isnan(curated.utility(0))


def test_knn_curated_equals_knn_until_something_is_pruned(tmp_path):
    assert main([*RUN, "--context_strategy_name", "knn_lexical", "--output_dir", str(tmp_path / "knn")]) == 0
    assert main([*RUN, "--context_strategy_name", "knn_lexical_curated", "--output_dir", str(tmp_path / "cur")]) == 0
    knn = read_jsonl(next((tmp_path / "knn").rglob("train.jsonl")))
    cur = read_jsonl(next((tmp_path / "cur").rglob("train.jsonl")))
    first = next(r["step"] for r in cur if r["metrics"]["pruned"])
    assert 0 < first < 30
    assert [r["context"] for r in cur[:first]] == [r["context"] for r in knn[:first]]
    pruned: set = set()
    for r in cur:  # from the step that says it, a pruned episode is in no context
        pruned |= set(r["metrics"]["pruned"])
        assert not pruned & set(r["context"])
    # the records say why: each pruned episode's contexts so far rewarded below the threshold
    uses: dict = {}
    for r in cur:
        for s in set(r["metrics"]["pruned"]):
            assert uses[s][0] >= 3 and uses[s][1] / uses[s][0] < 0.3
        for s in r["context"]:
            n, total = uses.get(s, (0, 0))
            uses[s] = (n + 1, total + r["accuracy"])


@pytest.mark.parametrize("flags, message", [
    (["--curate_threshold", "1.5"], "--curate_threshold must be a probability in [0, 1]"),
    (["--curate_min_uses", "0"], "--curate_min_uses must be a number of uses >= 1"),
])
def test_bad_settings_are_refused_in_one_line(flags, message, tmp_path, capsys):
    assert main([*RUN, "--context_strategy_name", "knn_lexical_curated", *flags,
                 "--output_dir", str(tmp_path / "out")]) == 2
    assert message in one_error_line(capsys)
    assert files_under(tmp_path / "out") == []


def test_curating_supervised_icl_is_refused(tmp_path, capsys):
    argv = [w for w in RUN if w != "--icrl"]
    assert main([*argv, "--no-icrl", "--context_strategy_name", "knn_lexical_curated",
                 "--output_dir", str(tmp_path)]) == 2
    assert "prunes by reward: supervised ICL (--no-icrl) has none" in one_error_line(capsys)


@pytest.mark.parametrize("extra", [[], ["--prob_reset", "0.1"], ["--p_exploration", "0.2"]])
def test_a_resumed_curated_run_equals_an_uninterrupted_one(extra, tmp_path, monkeypatch):
    whole, cut = run_and_resume(tmp_path, monkeypatch, [*RUN, "--context_strategy_name", "knn_lexical_curated",
                                                        *extra], at_call=19)
    assert untimed_records(cut) == untimed_records(whole)
    assert any(r["metrics"]["pruned"] for r in read_jsonl(whole / "train.jsonl"))
