"""Summarised histories (icrl.method.strategies.summary): the summary's exact text, where it
stands in the prompt, which episodes follow it, the settings it refuses, and a resumed run."""

from __future__ import annotations

import pytest

from helpers import TOY, files_under, one_error_line, run_and_resume, untimed_records
from icrl.backends.fake import FakeBackend
from icrl.cli.run import main
from icrl.method.episode import Episode
from icrl.method.strategies import make_strategy
from icrl.method.strategies.retrieval import KnnLexical
from icrl.method.strategies.summary import summary_text
from icrl.records import read_jsonl

LABELS = ["billing", "refund", "delivery", "account"]
RUN = [*TOY, "--icrl", "--train_k", "12", "--test_every", "6", "--test_k", "3"]


def history(*answers) -> list:
    """Episodes of (prediction, feedback) pairs, one a step."""
    return [Episode(f"Q{i}?", p, f, None, None, i) for i, (p, f) in enumerate(answers)]


def test_the_summary_text_is_pinned():
    three = history(("billing", 1), ("refund", 0), ("billing", 0))
    assert summary_text(three, LABELS) == (
        "Your answers so far (label: times you gave it, times it was rewarded):\n"
        "- billing: 2 given, 1 rewarded\n"
        "- refund: 1 given, 0 rewarded\n"
        "- delivery: 0 given, 0 rewarded\n"
        "- account: 0 given, 0 rewarded")
    assert summary_text([], LABELS) == "Your answers so far: none yet."
    # coarse credit shows 0.5 for a partly right answer: the summary adds what was shown
    assert "- refund: 2 given, 1.5 rewarded" in summary_text(history(("refund", 1), ("refund", 0.5)), LABELS)


def test_summary_keeps_the_most_recent_episodes_and_summary_knn_the_most_similar():
    episodes = [Episode(text, "billing", 1, None, None, i) for i, text in
                enumerate(["my card was charged twice", "where is my parcel", "refund my order", "parcel late"])]
    rng = None
    assert make_strategy("summary", 3).select(episodes, rng) == []  # the summary alone by default
    assert make_strategy("summary", 3, summary_episodes=2).select(episodes, rng) == episodes[2:]
    knn = make_strategy("summary_knn", 3, summary_episodes=2)
    import numpy as np
    chosen = knn.select(episodes, np.random.default_rng(0), query="is my parcel late")
    assert chosen == KnnLexical.build_for(2).select(episodes, np.random.default_rng(0), query="is my parcel late")
    assert {e.step for e in chosen} == {1, 3}


def test_each_prompt_holds_the_summary_of_the_steps_before(tmp_path, monkeypatch):
    sent: list = []
    original = FakeBackend.predict

    def predict(self, prompts, labels, temperature, seed, progress=None):
        sent.append(list(prompts))
        return original(self, prompts, labels, temperature, seed, progress)

    monkeypatch.setattr(FakeBackend, "predict", predict)
    assert main([*RUN, "--context_strategy_name", "summary", "--summary_episodes", "1", "--test_every", "100",
                 "--output_dir", str(tmp_path)]) == 0
    train = read_jsonl(next(tmp_path.rglob("train.jsonl")))
    episodes = [Episode(r["prompt"], r["prediction"], r["feedback"], r["answer"], r["accuracy"], r["step"])
                for r in train]
    training_calls = [calls[0] for calls in sent if len(calls) == 1][:len(train)]
    for t, prompt in enumerate(training_calls):
        system = prompt.split("<|user|>")[0]
        assert system.rstrip().endswith(summary_text(episodes[:t], LABELS) + "<|end|>")
        assert train[t]["context"] == ([t - 1] if t else [])


@pytest.mark.parametrize("flags, message", [
    (["--context_p_keep", "0.5"], "--context_p_keep keeps or drops episodes; summary summarises every episode"),
    (["--icrl_omit_feedback"], "--icrl_omit_feedback hides the rewards summary summarises"),
    (["--summary_episodes", "-1"], "--summary_episodes must be a number of episodes >= 0"),
    (["--reflect_every", "3"], "--reflect_every only applies to --context_strategy_name reflection"),
])
def test_episode_only_settings_are_refused_in_one_line(flags, message, tmp_path, capsys):
    assert main([*RUN, "--context_strategy_name", "summary", *flags, "--output_dir", str(tmp_path / "out")]) == 2
    assert message in one_error_line(capsys)
    assert files_under(tmp_path / "out") == []


def test_supervised_icl_is_refused(tmp_path, capsys):
    argv = [w for w in RUN if w != "--icrl"]
    assert main([*argv, "--no-icrl", "--context_strategy_name", "summary_knn", "--output_dir", str(tmp_path)]) == 2
    assert "supervised ICL (--no-icrl) has neither" in one_error_line(capsys)
    assert files_under(tmp_path) == []


@pytest.mark.parametrize("strategy", ["summary", "summary_knn"])
def test_a_resumed_summary_run_equals_an_uninterrupted_one(strategy, tmp_path, monkeypatch):
    whole, cut = run_and_resume(tmp_path, monkeypatch, [*RUN, "--context_strategy_name", strategy,
                                                        "--summary_episodes", "2"], at_call=8)
    assert untimed_records(cut) == untimed_records(whole)
