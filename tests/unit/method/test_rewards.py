"""Rewards (icrl.method.rewards): exact match (the paper's, the default) and coarse_credit (ours:
partial credit for a wrong label of the right parent class), on the fake backend and the toy
task (whose [hierarchy] groups its four intents in two); trec_fine's coarse classes with the data."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from helpers import TOY_TASK, untimed_records
from icrl.backends.fake import INTERRUPT_ENV
from icrl.cli import parse_args
from icrl.method.episode import Episode
from icrl.run.experiment import Experiment
from icrl.cli.run import main
from icrl.method.prompts import build_messages, feedback_message
from icrl.method.rewards import CoarseCredit, make_reward
from icrl.tasks import load_task

BASE = ["--backend", "fake", "--model_name", "fake", "--train_k", "30", "--test_every", "10", "--test_k", "20",
        "--seed", "3", "--training_seed", "3", "--test_seed", "3", "--no-progress", "--icrl",
        "--max_context_examples", "4", "--context_strategy_name", "random_biased_end"]
FINE = ["--task_name", TOY_TASK]  # a task with a hierarchy


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def argv(root: Path, *words) -> list:
    return [*BASE, "--output_dir", str(root), *words]


def run(root: Path, *words) -> Experiment:
    experiment = Experiment(parse_args(argv(root, *words)))
    experiment.run()
    return experiment


records = untimed_records


@pytest.fixture
def fine(data_dir):
    return load_task("trec_fine", data_dir)


def test_coarse_credit_scores(fine):
    reward = make_reward("coarse_credit").bind(fine)
    assert reward.score("location city", "location city") == 1
    assert reward.score("location country", "location city") == 0.5  # right coarse class
    assert reward.score("numeric date", "location city") == 0
    # every fine label's coarse class is the word before its space, as the task file maps them
    assert all(fine.hierarchy[label] == label.split()[0] for label in fine.labels)


def test_coarse_credit_needs_a_hierarchy(tmp_path, capsys):
    flat = tmp_path / "flat"
    shutil.copytree(Path(TOY_TASK).parent, flat)
    toml = flat / "toy.toml"
    toml.write_text(toml.read_text().split("[hierarchy]")[0].replace('name = "toy"', 'name = "flat"'))
    assert main(argv(tmp_path / "out", "--task_name", str(toml), "--reward", "coarse_credit")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "coarse_credit" in err and "flat" in err
    assert not any(tmp_path.rglob("config.json"))


def test_partial_feedback_text():
    text = feedback_message("location country", 0.5)
    assert text == ("The answer 'location country' is partly right: the right kind, but not the exact answer. "
                    "You can do better!")
    task = type("T", (), {"prediction_prefix": "Type:", "description": ""})()
    context = [Episode("Question: a?", "location country", 0.5, "location city", 0)]
    messages, _ = build_messages(task, context, "Question: b?", "icrl")
    assert messages[-1]["content"].startswith(text)
    messages, _ = build_messages(task, context, "Question: b?", "icrl", omit_feedback=True)
    assert not any("partly right" in m["content"] for m in messages)  # --icrl_omit_feedback shows none


def test_run_records_reward_apart_from_exact_accuracy(tmp_path):
    experiment = run(tmp_path, *FINE, "--reward", "coarse_credit")
    assert experiment.out_dir.name.endswith("_rewardcoarse-credit")
    got = records(experiment.out_dir)
    parent = experiment.loop.task.hierarchy
    for r in got["train"]:
        exact = int(r["prediction"] == r["answer"])
        assert r["accuracy"] == exact
        want = 1 if exact else 0.5 if parent[r["prediction"]] == parent[r["answer"]] else 0
        assert r["reward"] == want and r["feedback"] == want
    assert any(r["reward"] == 0.5 for r in got["train"])
    answers = [experiment.loop.task.answer(e) for e in experiment.loop.data.test]
    for r in got["test"]:  # test accuracy stays the fraction of exact matches; reward: the mean reward
        assert r["accuracy"] == sum(p == a for p, a in zip(r["predictions"], answers)) / len(answers)
        scores = [1 if p == a else 0.5 if parent[p] == parent[a] else 0 for p, a in zip(r["predictions"], answers)]
        assert r["reward"] == pytest.approx(sum(scores) / len(scores))
    results = json.loads((experiment.out_dir / "results.json").read_text())
    assert results["regret"] == sum(1 - r["accuracy"] for r in got["train"])  # regret: exact match


def test_exact_match_is_the_default_and_adds_nothing(tmp_path):
    plain = run(tmp_path / "a", *FINE)
    explicit = run(tmp_path / "b", *FINE, "--reward", "exact_match")
    assert plain.out_dir.relative_to(tmp_path / "a") == explicit.out_dir.relative_to(tmp_path / "b")
    got = records(plain.out_dir)
    assert got == records(explicit.out_dir)
    assert not any("reward" in r for r in got["train"] + got["test"])
    assert "reward" not in json.loads((plain.out_dir / "config.json").read_text())["args"]


def test_graded_reward_changes_the_run(tmp_path):
    """The 0.5 feedback is shown in later prompts, so the model's samples differ."""
    plain = records(run(tmp_path / "a", *FINE).out_dir)["train"]
    graded = records(run(tmp_path / "b", *FINE, "--reward", "coarse_credit").out_dir)["train"]
    assert [r["prediction"] for r in plain] != [r["prediction"] for r in graded]


def test_flip_leaves_partial_credit_and_accuracy(tmp_path):
    got = records(run(tmp_path, *FINE, "--reward", "coarse_credit", "--icrl_flip_feedback",
                      "--icrl_flip_feedback_prob", "1").out_dir)["train"]
    for r in got:
        assert r["feedback"] == (0.5 if r["reward"] == 0.5 else 1 - r["reward"])
        assert r["accuracy"] == int(r["prediction"] == r["answer"])


def test_omit_feedback_runs(tmp_path):
    got = records(run(tmp_path, *FINE, "--reward", "coarse_credit", "--icrl_omit_feedback").out_dir)["train"]
    assert any(r["reward"] == 0.5 for r in got)


def test_only_positive_keeps_full_credit_only(tmp_path):
    words = [w if w != "random_biased_end" else "random_biased_end_only_positive" for w in BASE]
    experiment = Experiment(parse_args([*words, "--output_dir", str(tmp_path), *FINE, "--reward", "coarse_credit"]))
    experiment.run()
    got = records(experiment.out_dir)["train"]
    for r in got:
        assert all(got[i]["feedback"] == 1 for i in r["context"])


def test_resume_equals_an_uninterrupted_run(tmp_path, monkeypatch):
    words = [*FINE, "--reward", "coarse_credit"]
    whole = records(run(tmp_path / "whole", *words).out_dir)
    monkeypatch.setenv(INTERRUPT_ENV, "7")
    assert main(argv(tmp_path / "cut", *words)) == 130
    monkeypatch.delenv(INTERRUPT_ENV)
    assert main(argv(tmp_path / "cut", *words)) == 0
    (cut,) = [p.parent for p in (tmp_path / "cut").rglob("config.json")]
    assert records(cut) == whole


def test_reward_names_are_checked(tmp_path, capsys):
    from icrl.cli import build_parser

    assert "coarse_credit" in build_parser().format_help()
    assert isinstance(make_reward("coarse_credit"), CoarseCredit)
    assert main(argv(tmp_path, *FINE, "--reward", "nope")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown --reward 'nope'" in err and "coarse_credit" in err
    assert main(argv(tmp_path, *FINE, "--reward", "coarse_credit", "--no-icrl")) == 2
    assert "only applies to ICRL" in capsys.readouterr().err


# -- a judge (--reward judge): the acting model or another judges, never told the gold label ----------
def test_the_judge_is_asked_with_this_text_and_never_the_gold_label():
    from icrl.method.rewards import judge_messages

    toy = load_task(TOY_TASK)
    system, user = judge_messages(toy, "Q: where is my parcel?", "delivery")
    assert system == {"role": "system", "content": "You check the answers of a classifier. Reply yes or no."}
    assert user["content"] == (f"{toy.description}\nLabels: billing, refund, delivery, account.\n\n"
                               "Q: where is my parcel?\nProposed answer: delivery\nIs the proposed answer right?")


def test_a_judged_run_records_the_verdict_beside_the_gold_reward(tmp_path, monkeypatch):
    from icrl.backends.fake import FakeBackend

    asked: list = []
    original = FakeBackend.predict

    def predict(self, prompts, labels, temperature, seed, progress=None):
        if list(labels) == ["yes", "no"]:
            asked.append((self.model_name, prompts[0], temperature))
        return original(self, prompts, labels, temperature, seed, progress)

    monkeypatch.setattr(FakeBackend, "predict", predict)
    experiment = run(tmp_path, *FINE, "--reward", "judge")
    train, test = (untimed_records(experiment.out_dir)[k] for k in ("train", "test"))
    assert len(asked) == 30 and {name for name, _, _ in asked} == {"fake"}  # the acting model judges itself
    assert all(t == 0.0 for _, _, t in asked)  # greedy
    assert not experiment.others  # no other model loaded
    for r, (_, prompt, _) in zip(train, asked):
        assert r["judge"] in ("yes", "no") and r["reward"] == int(r["judge"] == "yes") == r["feedback"]
        assert r["accuracy"] == int(r["prediction"] == r["answer"])  # the gold reward, side by side
        assert f"Proposed answer: {r['prediction']}\n" in prompt
    assert any(r["reward"] != r["accuracy"] for r in train)  # the judge's noise is there to measure
    assert all("reward" not in r for r in test)  # test steps are not judged


def test_another_judge_model_is_loaded_once_and_named_in_the_folder(tmp_path):
    experiment = run(tmp_path, *FINE, "--reward", "judge", "--judge_model", "fake-judge")
    assert "_rewardjudge_judgefake-judge" in experiment.out_dir.name
    assert json.loads((experiment.out_dir / "config.json").read_text())["args"]["judge_model"] == "fake-judge"


def test_a_learner_needs_a_judge_model(tmp_path, capsys):
    plain = ["--train_k", "30", "--test_every", "10", "--test_k", "20", "--seed", "3", "--training_seed", "3",
             "--test_seed", "3", "--no-progress", "--icrl", *FINE, "--agent", "epsilon_greedy", "--reward", "judge"]
    assert main([*plain, "--output_dir", str(tmp_path / "a")]) == 2
    assert "--reward judge needs a model to judge; --agent epsilon_greedy has none: give --judge_model" in \
        capsys.readouterr().err
    assert main([*plain, "--backend", "fake", "--output_dir", str(tmp_path / "a")]) == 2  # no judge: no backend
    assert "--backend only applies to an LLM" in capsys.readouterr().err
    assert main([*plain, "--backend", "fake", "--judge_model", "fake", "--output_dir", str(tmp_path / "b")]) == 0
    train = untimed_records(next((tmp_path / "b").rglob("config.json")).parent)["train"]
    assert {r["judge"] for r in train} <= {"yes", "no"} and all(r["reward"] == (r["judge"] == "yes") for r in train)


def test_a_resumed_judged_run_equals_an_uninterrupted_one(tmp_path, monkeypatch):
    from helpers import run_and_resume

    whole, cut = run_and_resume(tmp_path, monkeypatch, [*BASE, *FINE, "--reward", "judge"], at_call=23)
    assert untimed_records(cut) == untimed_records(whole)
