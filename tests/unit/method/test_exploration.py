"""Exploration (icrl.method.exploration): --p_exploration, --prob_reset and --ucb_alpha, our
definitions (docs/method.md, "Beyond the paper: exploration and rewards"), on the fake backend
and the toy task; each test fails where a flag is accepted and ignored."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import pytest

from icrl.backends.fake import INTERRUPT_ENV
from icrl.cli import parse_args
from icrl.run.experiment import Experiment
from icrl.cli.run import main
from icrl.method.exploration import EXPLORE_STREAM, step_rng
from helpers import TOY_TASK, untimed_records

BASE = ["--backend", "fake", "--model_name", "fake", "--task_name", TOY_TASK, "--train_k", "24",
        "--test_every", "8", "--test_k", "6", "--training_seed", "3", "--test_seed", "3", "--no-progress",
        "--icrl", "--max_context_examples", "4"]
NAIVE = ["--context_strategy_name", "random_biased_end"]
APPROX = ["--context_strategy_name", "approximate", "--max_contexts", "3",
          "--approximate_context_sampling_method", "uniform"]


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def argv(root: Path, *words, seed: int = 3) -> list:
    return [*BASE, "--seed", str(seed), "--output_dir", str(root), *words]


def run(root: Path, *words, seed: int = 3) -> Experiment:
    experiment = Experiment(parse_args(argv(root, *words, seed=seed)))
    experiment.run()
    return experiment


def records(run_dir: Path) -> dict:
    """train and test records less their timings, and the config's args."""
    return untimed_records(run_dir, args=True)


def train(experiment) -> list:
    return records(experiment.out_dir)["train"]


# -- epsilon-greedy ---------------------------------------------------------------------------
def test_exploration_replaces_predictions_without_model_calls(tmp_path):
    experiment = run(tmp_path, *NAIVE, "--p_exploration", "0.5")
    steps = train(experiment)
    explored = [r["step"] for r in steps if r["explored"]]
    assert all(isinstance(r["explored"], bool) for r in steps)
    assert 4 <= len(explored) <= 20  # about half of 24
    test_steps = len(records(experiment.out_dir)["test"])
    assert experiment.backend.calls == len(steps) - len(explored) + test_steps  # no call for an explored step
    labels = experiment.loop.task.labels
    for t in explored:  # the documented stream: random() < p, then integers(len(labels))
        rng = step_rng(3, t, EXPLORE_STREAM)
        assert rng.random() < 0.5
        assert steps[t]["prediction"] == labels[int(rng.integers(len(labels)))]
        assert steps[t]["accuracy"] == int(steps[t]["prediction"] == steps[t]["answer"])
    t = explored[0]
    assert steps[t + 1]["context"][-1] == t  # an explored episode enters the history


def test_exploration_one_never_calls_the_model_for_training(tmp_path):
    experiment = run(tmp_path, *NAIVE, "--p_exploration", "1")
    assert all(r["explored"] for r in train(experiment))
    assert experiment.backend.calls == len(records(experiment.out_dir)["test"])  # test steps use the model


def test_exploration_zero_keeps_every_stream(tmp_path):
    """Its draws come from a generator of their own: p = 0 computes exactly the run without the flag."""
    plain = records(run(tmp_path / "a", *APPROX).out_dir)
    zero = records(run(tmp_path / "b", *APPROX, "--p_exploration", "0").out_dir)
    assert not any(r.pop("explored") for r in zero["train"])
    assert zero["train"] == plain["train"] and zero["test"] == plain["test"]


# -- resets -----------------------------------------------------------------------------------
@pytest.mark.parametrize("strategy", [NAIVE, APPROX], ids=["naive", "approximate"])
def test_reset_forgets_the_history(tmp_path, strategy):
    steps = train(run(tmp_path, *strategy, "--prob_reset", "0.25"))
    resets = [r["step"] for r in steps if r["reset"]]
    assert [r for r in resets if r > 0], "no reset drawn: pick another probability"
    start = 0
    for r in steps:
        if r["reset"]:
            start = r["step"]
            assert r["context"] == []  # nothing is left to show at the reset step
            if "context_lengths" in r["metrics"]:
                assert r["metrics"]["context_lengths"] == [0, 0, 0]  # the approximate contexts restart empty
        assert all(start <= i < r["step"] for i in r["context"])
    first = next(t for t in resets if t > 0)
    assert any(r["context"] for r in steps[first + 1:])  # the history grows again after a reset


def test_reset_zero_keeps_every_stream(tmp_path):
    plain = records(run(tmp_path / "a", *APPROX).out_dir)
    zero = records(run(tmp_path / "b", *APPROX, "--prob_reset", "0").out_dir)
    assert not any(r.pop("reset") for r in zero["train"])
    assert zero["train"] == plain["train"] and zero["test"] == plain["test"]


# -- UCB over the approximate contexts -------------------------------------------------------
def test_ucb_chooses_by_the_documented_rule(tmp_path):
    alpha = 0.7
    steps = train(run(tmp_path, *APPROX, "--ucb_alpha", str(alpha), "--p_exploration", "0.2"))
    counts, sums = [0, 0, 0], [0.0, 0.0, 0.0]
    for r in steps:
        ucb = r["metrics"]["ucb"]
        assert ucb["counts"] == counts  # the statistics the choice saw
        total = sum(counts)
        scores = [math.inf if n == 0 else s / n + alpha * math.sqrt(math.log(total) / n) for s, n in zip(sums, counts)]
        best = max(range(3), key=lambda k: (scores[k], -k))  # untried first, ties to the lowest index
        assert r["metrics"]["context_index"] == best
        assert ucb["score"] == (None if scores[best] == math.inf else pytest.approx(scores[best]))
        if not r["explored"]:  # an explored step did not show its context: nothing observed
            counts[best] += 1
            sums[best] += r["accuracy"]
    assert [r["metrics"]["context_index"] for r in steps[:3]] == [0, 1, 2] or steps[0]["explored"]
    assert sum(counts) == sum(not r["explored"] for r in steps)


def test_ucb_needs_an_approximate_strategy(tmp_path, capsys):
    assert main(argv(tmp_path, *NAIVE, "--ucb_alpha", "1")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--ucb_alpha" in err and "approximate" in err
    assert not any(tmp_path.rglob("config.json"))


@pytest.mark.parametrize("words, what", [
    (["--p_exploration", "1.5"], "--p_exploration must be a probability"),
    (["--prob_reset", "-0.1"], "--prob_reset must be a probability"),
    (["--ucb_alpha", "-1"], "--ucb_alpha must be a finite number"),
])
def test_bad_values_are_one_line(tmp_path, capsys, words, what):
    assert main(argv(tmp_path, *APPROX, *words)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and what in err


# -- streams, resume, folders ---------------------------------------------------------------
ALL = [*APPROX, "--p_exploration", "0.3", "--prob_reset", "0.15", "--ucb_alpha", "1.0"]


def test_same_seed_same_records_other_seed_other(tmp_path):
    a = records(run(tmp_path / "a", *ALL).out_dir)
    b = records(run(tmp_path / "b", *ALL).out_dir)
    c = records(run(tmp_path / "c", *ALL, seed=4).out_dir)
    assert a == b
    flags = lambda rs: [(r["explored"], r["reset"]) for r in rs["train"]]  # noqa: E731
    assert flags(a) != flags(c)


@pytest.mark.parametrize("words", [[*NAIVE, "--p_exploration", "0.4"], [*NAIVE, "--prob_reset", "0.2"], ALL],
                         ids=["explore", "reset", "all"])
@pytest.mark.parametrize("call", [5, 9])
def test_resume_equals_an_uninterrupted_run(tmp_path, monkeypatch, words, call):
    whole = records(run(tmp_path / "whole", *words).out_dir)
    monkeypatch.setenv(INTERRUPT_ENV, str(call))
    assert main(argv(tmp_path / "cut", *words)) == 130
    monkeypatch.delenv(INTERRUPT_ENV)
    assert main(argv(tmp_path / "cut", *words)) == 0
    (cut,) = [p.parent for p in (tmp_path / "cut").rglob("config.json")]
    assert records(cut) == whole


PUBLISHED = [re.compile(r"_reset\d"), re.compile(r"_explor\d"), re.compile(r"^ucb")]  # lil-lab/icrl get_experiment_dir


def test_folder_names_are_ours_and_distinct(tmp_path):
    folders = {}
    for name, words in {"plain": APPROX, "explore": [*APPROX, "--p_exploration", "0.1"],
                        "reset": [*APPROX, "--prob_reset", "0.1"], "ucb": [*APPROX, "--ucb_alpha", "1.0"]}.items():
        folders[name] = Experiment(parse_args(argv(tmp_path, *words))).out_dir
    assert len(set(folders.values())) == 4
    assert folders["explore"].name.endswith("_epsgreedy0.1")
    assert folders["reset"].name.endswith("_forget0.1")
    assert folders["ucb"].name.endswith("_ctxucb1.0")
    for path in folders.values():
        for part in path.relative_to(tmp_path).parts:
            assert not any(p.search(part) for p in PUBLISHED), part


def test_unset_flags_are_not_written(tmp_path):
    """config.json "args" gains a field only when it is set; runtime_args keeps the three names."""
    config = json.loads((run(tmp_path, *NAIVE).out_dir / "config.json").read_text())
    assert not {"p_exploration", "prob_reset", "ucb_alpha", "reward"} & set(config["args"])
    assert {config["runtime_args"][k] for k in ("p_exploration", "prob_reset", "ucb_alpha")} == {None}
    config = json.loads((run(tmp_path, *NAIVE, "--prob_reset", "0.1").out_dir / "config.json").read_text())
    assert config["args"]["prob_reset"] == 0.1 and config["runtime_args"]["prob_reset"] == 0.1


def test_another_value_is_another_run(tmp_path, capsys):
    """A resumed run compares the flags like any argument (here: the same folder, another value)."""
    first = run(tmp_path, *NAIVE, "--p_exploration", "0.1", "--train_k", "8")
    config = json.loads((first.out_dir / "config.json").read_text())
    config["args"]["p_exploration"] = 0.2
    (first.out_dir / "config.json").write_text(json.dumps(config))
    assert main(argv(tmp_path, *NAIVE, "--p_exploration", "0.1", "--train_k", "8")) == 2
    assert "--p_exploration: 0.2 there, 0.1 now" in capsys.readouterr().err


def test_schema_and_results_table_name_the_new_fields(tmp_path):
    """Every flag at once (and the graded reward): records.schema names each field written, and
    the results table shows the flags as columns and labels, filed under none of the paper's methods."""
    from icrl.analysis.results import Results
    from icrl.config import RunSpec
    from icrl.records import schema

    words = argv(tmp_path, *ALL, "--reward", "coarse_credit")  # the toy task has a hierarchy
    experiment = Experiment(parse_args(words))
    experiment.run()
    config = json.loads((experiment.out_dir / "config.json").read_text())
    got = records(experiment.out_dir)
    assert set(config["args"]) <= {f.name for f in dataclasses.fields(RunSpec)}
    from icrl.records.configfile import runtime_types

    assert set(config["runtime_args"]) <= set(runtime_types())  # an added option only when set
    for record, typed in [*[(r, schema.TrainLine) for r in got["train"]], *[(r, schema.TestLine) for r in got["test"]]]:
        assert typed.from_json({**record, "time_s": 0.0}).as_json() == {**record, "time_s": 0.0}
    assert {"explored", "reset", "reward"} <= set(got["train"][0]) and "reward" in got["test"][0]
    row = Results(tmp_path).runs.iloc[0]
    flags = (row["p_exploration"], row["prob_reset"], row["ucb_alpha"], row["reward"])
    assert flags == (0.3, 0.15, 1.0, "coarse_credit")
    assert row["method"] == "" and "epsilon 0.3" in row["label"] and "UCB 1" in row["label"]


def test_token_counts_leave_out_explored_steps(tmp_path):
    """run_count_tokens.py replays a run's model calls: an explored step made none."""
    from icrl.analysis.counting import iter_calls

    from helpers import typed_run

    experiment = run(tmp_path, *NAIVE, "--p_exploration", "0.5")
    config, train, test = typed_run(experiment.out_dir)
    calls = list(iter_calls(config, train, test))
    assert [c.step for c in calls if c.kind == "train"] == [r.step for r in train if not r.explored]
    assert experiment.backend.calls == len({(c.step, c.kind) for c in calls})


def test_extension_continues_the_same_streams(tmp_path):
    """A finished run extended to more steps (--train_k) trains as a run started that long."""
    whole = records(run(tmp_path / "whole", *ALL).out_dir)["train"]
    run(tmp_path / "grown", *ALL, "--train_k", "12")
    grown = records(run(tmp_path / "grown", *ALL).out_dir)["train"]
    assert grown == whole


def test_ucb_keeps_the_published_re_offer(tmp_path):
    """--ucb_alpha with --published_quirks: the UCB context choice and the published re-offer of the
    last positive episode, both (the strategy is not rebuilt without the quirk)."""
    from icrl.method.exploration import strategy_of_run

    config = parse_args(argv(tmp_path, "--icrl", "--context_strategy_name", "approximate_only_positive",
                             "--max_contexts", "3", "--approximate_context_sampling_method", "uniform",
                             "--ucb_alpha", "1.0", "--published_quirks"))
    strategy = strategy_of_run(config.strategy_choice, 4, config.exploration)
    assert strategy.reoffer and strategy.chooser is not None and strategy.chooser.alpha == 1.0
