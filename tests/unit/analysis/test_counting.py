"""Replaying a run's calls from its records (icrl.analysis.counting): the prompts rebuilt are the
prompts the run sent, with the text a strategy puts before the episodes and the reasoning
before each answer; reasoning tokens and the calls beside the classifier's are reported apart."""

from __future__ import annotations

import json

import pytest

from helpers import TOY, typed_run
from icrl.analysis.counting import Replay, _count
from icrl.backends.fake import FakeBackend, FakeChat
from icrl.cli.run import main
from icrl.records import read_jsonl
from icrl.analysis.prefixes import FakeEncoder

RUN = [*TOY, "--icrl", "--max_context_examples", "3", "--train_k", "14", "--test_every", "5", "--test_k", "4"]
CASES = {
    "summary": ["--context_strategy_name", "summary", "--summary_episodes", "2"],
    "summary_knn": ["--context_strategy_name", "summary_knn", "--summary_episodes", "2"],
    "summary_resets": ["--context_strategy_name", "summary", "--prob_reset", "0.2"],
    "reflection": ["--context_strategy_name", "reflection", "--reflect_every", "4"],
    "reasoning": ["--context_strategy_name", "random_unbiased", "--reasoning", "12"],
    "curated_judged": ["--context_strategy_name", "knn_lexical_curated", "--curate_min_uses", "1",
                       "--reward", "judge"],
}


def sent_prompts(monkeypatch, labels) -> list:
    """The classifier's prompts the fake backend is sent (not a judge's: its labels are yes/no)."""
    sent: list = []
    original = FakeBackend.predict

    def predict(self, prompts, labels_, temperature, seed, progress=None):
        if list(labels_) == labels:
            sent.extend(prompts)
        return original(self, prompts, labels_, temperature, seed, progress)

    monkeypatch.setattr(FakeBackend, "predict", predict)
    return sent


def counted(run_dir) -> dict:
    """The token count's summary of a run (the fake chat's tokens)."""
    replay = Replay(*typed_run(run_dir), FakeChat())
    return _count(replay, FakeEncoder(FakeChat()), 0, 256, 0.0)[0]


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_replayed_prompts_are_the_prompts_the_run_sent(case, tmp_path, monkeypatch):
    sent = sent_prompts(monkeypatch, ["billing", "refund", "delivery", "account"])
    assert main([*RUN, *CASES[case], "--output_dir", str(tmp_path)]) == 0
    run_dir = next(tmp_path.rglob("config.json")).parent
    replay = Replay(*typed_run(run_dir), FakeChat())
    rebuilt = [replay.render_call(call) for call in replay.calls()]
    assert rebuilt == sent
    if case.startswith("summary") or case == "reflection":
        assert any("Your answers so far" in p or "A guide you wrote" in p for p in rebuilt)


def test_reasoning_tokens_and_the_other_calls_are_reported_apart(tmp_path):
    assert main([*RUN, *CASES["reasoning"], "--output_dir", str(tmp_path / "r")]) == 0
    assert main([*RUN, *CASES["reflection"], "--reward", "judge", "--output_dir", str(tmp_path / "j")]) == 0
    reasoned = next((tmp_path / "r").rglob("config.json")).parent
    summary = counted(reasoned)
    train = read_jsonl(reasoned / "train.jsonl")
    test = read_jsonl(reasoned / "test.jsonl")
    assert summary["train_reasoning_tokens"] == sum(r["reasoning_tokens"] for r in train) > 0
    assert summary["test_reasoning_tokens"] == sum(sum(r["reasoning_tokens"]) for r in test) > 0
    judged = next((tmp_path / "j").rglob("config.json")).parent
    summary = counted(judged)
    assert summary["judge_calls"] == 14 and summary["reflection_calls"] == 3  # guides at steps 4, 8, 12
    assert summary["train_reasoning_tokens"] == summary["test_reasoning_tokens"] == 0
