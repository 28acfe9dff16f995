"""The loop of a run (icrl.run.loop) on the fake backend and the toy task: query-aware
strategies, reward objects, observers, the published re-offer."""

from __future__ import annotations

import json

import pytest

from helpers import TOY_TASK, MeteredFake, register_metered_fake, typed_run
from icrl.backends.fake import INTERRUPT_ENV
from icrl.cli import parse_args
from icrl.cli.run import main
from icrl.errors import UsageError
from icrl.method.agents import Decision, Policy
from icrl.method.rewards import REWARDS, ExactMatch, Reward, make_reward, register_reward
from icrl.method.strategies import PUBLISHED, register_strategy
from icrl.method.strategies import base as context
from icrl.method.strategies.base import unregister_strategy
from icrl.records import read_jsonl
from icrl.records.summary import summarize
from icrl.run.experiment import Experiment
from icrl.run.loop import Loop
from icrl.run.observers import Observer

BASE = ["--backend", "fake", "--model_name", "fake", "--task_name", TOY_TASK, "--train_k", "6",
        "--test_every", "3", "--test_k", "5", "--seed", "100", "--training_seed", "100", "--test_seed", "100",
        "--max_context_examples", "3", "--icrl", "--no-progress"]


@pytest.fixture(autouse=True)
def no_interrupt(monkeypatch):
    monkeypatch.delenv(INTERRUPT_ENV, raising=False)


# -- a toy query-aware strategy -------------------------------------------------------------------
class SameFirstWord(context.Strategy):
    """Query-aware toy: the newest episodes whose question starts with the query's question word."""

    name = "toy_same_first_word"
    family = "toy"
    filters = ("",)
    query_aware = True
    made: list = []  # every instance built for a run

    def __init__(self, max_examples, p_keep, accept=context._any):
        super().__init__(max_examples, p_keep, accept)
        self.queries: list = []
        self.made.append(self)

    def select(self, history, rng, query=None):
        self.queries.append(query)
        word = query.split()[1]
        same = [e for e in history if e.prompt.split()[1] == word]
        return same[max(len(same) - self.max_examples, 0):]


@pytest.fixture
def same_first_word():
    register_strategy(SameFirstWord)
    SameFirstWord.made.clear()
    yield SameFirstWord.made
    unregister_strategy(SameFirstWord)


def test_a_query_aware_strategy_gets_one_context_per_test_input(tmp_path, same_first_word):
    made = same_first_word
    assert main([*BASE, "--context_strategy_name", "toy_same_first_word", "--output_dir", str(tmp_path),
                 "--train_k", "20", "--test_every", "10", "--test_k", "8"]) == 0
    run_dir = next(tmp_path.rglob("config.json")).parent
    train, test = read_jsonl(run_dir / "train.jsonl"), read_jsonl(run_dir / "test.jsonl")
    test_prompts = json.loads((run_dir / "config.json").read_text())["test_set"]["prompts"]
    strategy = made[0]
    # one select per step for its training input, and one per test input at each test step
    assert len(strategy.queries) == len(train) + len(test) * len(test_prompts)
    assert [r["step"] for r in test] == [0, 9, 19]
    for record in test:
        assert "context" not in record and len(record["contexts"]) == len(test_prompts)
        assert record["context_size"] == [len(c) for c in record["contexts"]]
        for prompt, ids in zip(test_prompts, record["contexts"]):
            assert all(i < record["step"] for i in ids)  # only episodes before this step
            assert all(train[i]["prompt"].split()[1] == prompt.split()[1] for i in ids)
    assert any(len({tuple(c) for c in record["contexts"]}) > 1 for record in test)  # not one shared context
    for record in train:  # the training context is chosen for the training input
        assert all(train[i]["prompt"].split()[1] == record["prompt"].split()[1] for i in record["context"])


def test_a_query_aware_strategy_must_be_stateless():
    class Stateful(SameFirstWord):
        name = "toy_stateful"
        stateful = True

    with pytest.raises(ValueError, match="stateless"):
        register_strategy(Stateful)
    assert "toy_stateful" not in context.STRATEGIES


def test_published_strategies_are_not_query_aware():
    for name in PUBLISHED:
        assert context.make_strategy(name, 3, 0.5, 2, "uniform").query_aware is False


# -- a toy reward ------------------------------------------------------------------------------
class LetterOverlap(Reward):
    """Toy graded reward: the share of the gold label's letters that the prediction has."""

    name = "letter_overlap"

    def score(self, prediction, answer):
        return len(set(prediction) & set(answer)) / len(set(answer))

    def shown(self, reward):
        return int(reward >= 0.5)


def test_a_reward_object_scores_training_and_test_steps(tmp_path):
    config = parse_args([*BASE, "--context_strategy_name", "random_unbiased", "--output_dir", str(tmp_path)])
    summary = Experiment(config, reward=LetterOverlap()).run()
    run_dir = next(tmp_path.rglob("config.json")).parent
    train, test = read_jsonl(run_dir / "train.jsonl"), read_jsonl(run_dir / "test.jsonl")
    answers = json.loads((run_dir / "config.json").read_text())["test_set"]["answers"]
    reward = LetterOverlap()
    # the reward is recorded apart ("reward"); "accuracy" stays exact match
    assert [r["reward"] for r in train] == [reward.score(r["prediction"], r["answer"]) for r in train]
    assert [r["accuracy"] for r in train] == [int(r["prediction"] == r["answer"]) for r in train]
    assert [r["feedback"] for r in train] == [int(r["reward"] >= 0.5) for r in train]  # no flipping asked
    for record in test:
        scores = [reward.score(p, a) for p, a in zip(record["predictions"], answers)]
        assert record["reward"] == sum(scores) / len(scores)
        assert record["accuracy"] == sum(p == a for p, a in zip(record["predictions"], answers)) / len(answers)
    assert summary == summarize(*typed_run(run_dir)[1:], 6, "icrl")
    assert any(0 < r["reward"] < 1 for r in train)  # graded: not exact match


def test_exact_match_is_the_default_reward_and_flips_as_published():
    from icrl.method.feedback import shown_feedback

    reward = make_reward(flip=True, flip_prob=0.5)
    assert isinstance(reward, ExactMatch)
    for step in range(20):
        assert reward("A", "A", seed=7, step=step) == (1, shown_feedback(1, 7, step, True, 0.5))
        assert reward("A", "B", seed=7, step=step) == (0, shown_feedback(0, 7, step, True, 0.5))
    register_reward(LetterOverlap)
    try:
        assert make_reward("letter_overlap").score("abc", "abcd") == 0.75
    finally:
        REWARDS.unregister("letter_overlap")
    with pytest.raises(UsageError, match="unknown --reward 'nope'"):
        make_reward("nope")


# -- observers -------------------------------------------------------------------------------------
class Events(Observer):
    def __init__(self):
        self.events = []

    def on_start(self, loop, start):
        self.events.append(("start", start))

    def on_test(self, t, record):
        self.events.append(("test", t))

    def on_train(self, t, record):
        self.events.append(("train", t))

    def on_step(self, t, loop):
        self.events.append(("step", t))

    def on_loop_end(self, loop):
        self.events.append(("end",))

    def on_finish(self, summary):
        self.events.append(("finish", summary["finished"]))


def test_observers_hear_the_loop_in_order(tmp_path):
    config = parse_args([*BASE, "--context_strategy_name", "random_unbiased", "--output_dir", str(tmp_path),
                         "--train_k", "3", "--test_every", "2"])
    events = Events()
    Experiment(config, observers=[events]).run()
    assert events.events == [("start", 0), ("test", 0), ("train", 0), ("step", 0), ("test", 1), ("train", 1),
                             ("step", 1), ("test", 2), ("train", 2), ("step", 2), ("end",), ("finish", True)]


def test_wandb_observer_logs_what_the_loop_did(tmp_path, monkeypatch):
    """--wandb: the run's identity as config, test and train accuracy per step, the summary."""
    import sys
    import types

    calls = []

    class Run:
        summary: dict = {}

        def log(self, values, step):
            calls.append(("log", step, values))

        def finish(self):
            calls.append(("finish",))

    def init(**kwargs):
        calls.append(("init", kwargs))
        return Run()

    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=init))
    monkeypatch.setenv("WANDB_MODE", "offline")
    config = parse_args([*BASE, "--context_strategy_name", "random_unbiased", "--output_dir", str(tmp_path),
                         "--train_k", "2", "--test_every", "5", "--wandb"])
    summary = Experiment(config).run()
    init_call = calls[0]
    assert init_call[0] == "init" and init_call[1]["config"] == config.spec.as_record()
    assert init_call[1]["project"] == "icrl" and init_call[1]["name"].startswith("fake/toy-")
    logged = [(c[1], sorted(c[2])) for c in calls if c[0] == "log"]
    assert logged == [(0, ["test/accuracy"]), (0, ["train/accuracy", "train/context_size"]),
                      (1, ["test/accuracy"]), (1, ["train/accuracy", "train/context_size"])]
    assert calls[-1] == ("finish",) and Run.summary["final_test_accuracy"] == summary["final_test_accuracy"]


def test_published_quirks_make_approximate_only_positive_re_offer_as_published(tmp_path, monkeypatch):
    """By default a wrong newest episode changes no approximate_only_positive context; with
    --published_quirks the last right one is offered again, as the published code does, so the
    run shows the contexts the published run_count_tokens.py rebuilds from its records (and
    they differ from the default run's)."""
    from icrl.analysis.counting import Replay

    argv = [*BASE, "--context_strategy_name", "approximate_only_positive", "--context_p_keep", "0.5",
            "--max_contexts", "2", "--approximate_context_sampling_method", "uniform", "--train_k", "30",
            "--test_every", "10", "--max_context_examples", "20"]
    contexts = {}
    for name, extra in (("ours", []), ("published", ["--published_quirks"])):
        assert main([*argv, *extra, "--output_dir", str(tmp_path / name)]) == 0
        run_dir = next((tmp_path / name).rglob("config.json")).parent
        config, train, _ = typed_run(run_dir)
        assert sum(r.feedback == 0 for r in train) >= 5  # wrong answers: the case that differs
        rebuilt = Replay(config, train, [], chat=None).published
        contexts[name] = [r.context for r in train]
        assert (contexts[name] == rebuilt) == (name == "published"), name
    assert any(len(set(c)) < len(c) for c in contexts["published"])  # an episode offered twice
    assert all(len(set(c)) == len(c) for c in contexts["ours"])
    # killed mid-run, it resumes to the same contexts (the re-offering state is replayed)
    resumed = [*argv, "--published_quirks", "--output_dir", str(tmp_path / "resumed")]
    monkeypatch.setenv(INTERRUPT_ENV, "17")
    assert main(resumed) != 0
    run_dir = next((tmp_path / "resumed").rglob("config.json")).parent
    assert 0 < len(read_jsonl(run_dir / "train.jsonl")) < 30
    monkeypatch.delenv(INTERRUPT_ENV)
    assert main(resumed) == 0
    assert [r["context"] for r in read_jsonl(run_dir / "train.jsonl")] == contexts["published"]


# -- the loop calls the policy and the reward, in the published order -------------------------------
class Scripted(Policy):
    """A policy that plays the gold label at even steps and another label at odd steps, and logs
    what the loop asks of it."""

    def __init__(self, labels, answers):
        self.labels, self.answers, self.calls = labels, answers, []

    def act(self, step, prompt, history):
        self.calls.append(("act", step, len(history)))
        answer = self.answers[step]
        played = answer if step % 2 == 0 else next(label for label in self.labels if label != answer)
        return Decision(prediction=played, metrics={"n": step})

    def test(self, step, decision, prompts, progress=None):
        self.calls.append(("test", step))
        return [self.labels[0]] * len(prompts), {"context_size": 0, "context": []}

    def learn(self, step, decision, reward, answer):
        self.calls.append(("learn", step, reward))


def test_the_loop_asks_the_policy_then_the_reward_then_tests_then_learns(tmp_path):
    config = parse_args([*BASE, "--context_strategy_name", "random_unbiased", "--output_dir", str(tmp_path)])
    experiment = Experiment(config)
    experiment.run()  # a real run: its data, plan and config.json
    data, plan, records = experiment.loop.data, experiment.plan, experiment.records
    policy = Scripted(data.task.labels, [data.task.answer(e) for e in data.train])
    records.create(json.loads((experiment.out_dir / "config.json").read_text()))
    Loop(config.spec.seed, data, plan, policy, experiment.reward, records).run(0)
    assert policy.calls == [("act", 0, 0), ("test", 0), ("learn", 0, 1), ("act", 1, 1), ("learn", 1, 0),
                            ("act", 2, 2), ("test", 2), ("learn", 2, 1), ("act", 3, 3), ("learn", 3, 0),
                            ("act", 4, 4), ("learn", 4, 1), ("act", 5, 5), ("test", 5), ("learn", 5, 0)]
    train = read_jsonl(experiment.out_dir / "train.jsonl")
    assert [r["accuracy"] for r in train] == [1, 0, 1, 0, 1, 0]
    assert [r["metrics"] for r in train] == [{"n": t} for t in range(6)]
    results = json.loads((experiment.out_dir / "results.json").read_text())
    assert results["regret"] == 3 and results["finished"] and results["steps_completed"] == 6


def test_written_lines_keep_the_field_order_of_every_earlier_record(tmp_path):
    """Train and test lines list their fields in one order (the optional ones before time_s, only
    when set): the order records have always had."""
    main([*BASE, "--context_strategy_name", "knn_lexical", "--p_exploration", "0.5", "--prob_reset", "0.2",
          "--output_dir", str(tmp_path), "--train_k", "6", "--test_every", "3"])
    main([*BASE, "--context_strategy_name", "random_unbiased", "--reward", "coarse_credit",
          "--output_dir", str(tmp_path)])
    runs = [p.parent for p in tmp_path.rglob("config.json")]
    knn = next(r for r in runs if "knn_lexical" in str(r))
    graded = next(r for r in runs if "knn_lexical" not in str(r))
    head = ["step", "example_id", "prompt", "prediction", "feedback", "answer", "accuracy", "context_size",
            "context", "metrics"]
    assert list(read_jsonl(knn / "train.jsonl")[0]) == head + ["reset", "explored", "time_s"]
    assert list(read_jsonl(graded / "train.jsonl")[0]) == head + ["reward", "time_s"]
    assert list(read_jsonl(knn / "test.jsonl")[0]) == ["step", "accuracy", "per_class_accuracy", "predictions",
                                                       "context_size", "contexts", "metrics", "time_s"]
    assert list(read_jsonl(graded / "test.jsonl")[0]) == ["step", "accuracy", "per_class_accuracy", "predictions",
                                                          "context_size", "context", "metrics", "reward", "time_s"]


METERED = [*BASE, "--backend", "metered_fake", "--model_name", "smollm2-135m", "--context_strategy_name",
           "random_unbiased"]


@pytest.fixture
def metered_fake():
    undo = register_metered_fake()
    yield MeteredFake
    undo()


def test_an_api_backends_usage_is_recorded_per_step_and_summed_in_the_results(tmp_path, metered_fake):
    argv = [*METERED, "--output_dir", str(tmp_path)]
    assert main(argv) == 0
    run = next(p.parent for p in tmp_path.rglob("config.json"))
    train, test = read_jsonl(run / "train.jsonl"), read_jsonl(run / "test.jsonl")
    one = {"prompt_tokens": 10, "cached_prompt_tokens": 6, "output_tokens": 1, "requests": 1}
    assert [r["usage"] for r in train] == [one] * 6 and list(train[0])[-2:] == ["time_s", "usage"]
    assert [r["usage"] for r in test] == [{k: 5 * v for k, v in one.items()}] * len(test)  # 5 test inputs
    results = json.loads((run / "results.json").read_text())
    requests = 6 + 5 * len(test)
    assert results["usage"] == {"prompt_tokens": 10 * requests, "cached_prompt_tokens": 6 * requests,
                                "output_tokens": requests, "requests": requests}


def test_a_resumed_run_keeps_the_usage_it_recorded(tmp_path, metered_fake, monkeypatch):
    argv = [*METERED, "--output_dir", str(tmp_path)]
    assert main(argv) == 0
    run = next(p.parent for p in tmp_path.rglob("config.json"))
    whole = read_jsonl(run / "train.jsonl")
    (run / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in whole[:2]))
    monkeypatch.setattr(metered_fake, "prompt", 20)  # the API now bills otherwise: the steps kept keep their bill
    assert main(argv) == 0
    resumed = read_jsonl(run / "train.jsonl")
    assert resumed[:2] == whole[:2]
    assert [r["usage"]["prompt_tokens"] for r in resumed] == [10, 10, 20, 20, 20, 20]
