"""Agents that are not LLMs (icrl.method.agents): LinUCB, epsilon-greedy and the online supervised learner
through the same runner as an LLM run: records, folders, resume, sweeps and figures."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from helpers import TOY_TASK
from icrl.method.agents.learners import EpsilonGreedy, LinUCB, Supervised
from icrl.config import LEARNER_ONLY, LLM_ONLY
from icrl.cli.run import main
from icrl.records import experiment_dir, find_runs

SMALL = ["--task_name", TOY_TASK, "--train_k", "40", "--test_every", "20", "--test_k", "10",
         "--seed", "3", "--training_seed", "3", "--test_seed", "3", "--no-progress"]


def run(tmp: Path, *words: str) -> int:
    return main([*SMALL, "--output_dir", str(tmp), *words])


def records(run_dir: Path) -> dict:
    """train/test lines and results.json less their timings."""
    def strip(record):
        return {k: v for k, v in record.items() if k not in ("time_s", "mean_step_time_s", "total_time_s")}

    lines = {name: [strip(json.loads(line)) for line in (run_dir / name).read_text().splitlines()]
             for name in ("train.jsonl", "test.jsonl")}
    return {**lines, "results.json": strip(json.loads((run_dir / "results.json").read_text()))}


# -- the learners ------------------------------------------------------------------------------------
def _stream(n=400, d=5, k=3, seed=0):
    rng = np.random.default_rng(seed)
    X = np.hstack([rng.normal(size=(n, d)), np.ones((n, 1))])
    W = rng.normal(size=(d + 1, k))
    return X, np.argmax(X @ W, axis=1)


@pytest.mark.parametrize("make", [lambda: LinUCB(3, 6, seed=1, alpha=0.5), lambda: EpsilonGreedy(3, 6, seed=1),
                                  lambda: Supervised(3, 6, seed=1)])
def test_learners_learn_a_linear_problem_from_their_feedback(make):
    X, y = _stream()
    learner = make()
    first = (learner.greedy(X[300:]) == y[300:]).mean()
    for t in range(300):
        arm = learner.act(X[t], t)
        learner.learn(X[t], arm, float(arm == y[t]), int(y[t]))
    assert (learner.greedy(X[300:]) == y[300:]).mean() > max(0.7, first + 0.2)


def test_bandits_learn_only_the_played_arm_and_epsilon_explores():
    X, y = _stream()
    bandit = LinUCB(3, 6, seed=1)
    before = bandit.model.b.copy()
    bandit.learn(X[0], 2, 1.0, gold=0)  # the gold label is ignored: arm 2's reward is learned
    assert np.array_equal(bandit.model.b[:2], before[:2]) and not np.array_equal(bandit.model.b[2], before[2])
    greedy = EpsilonGreedy(3, 6, seed=1, epsilon=0.3)
    explored = [greedy.act(X[t % 400], t) is not None and greedy.last_metrics["explored"] for t in range(1000)]
    assert 0.25 < np.mean(explored) < 0.35


# -- through the runner ------------------------------------------------------------------------------
def test_a_linucb_run_is_a_run(tmp_path, capsys):
    assert run(tmp_path, "--agent", "linucb", "--bandit_alpha", "0.5") == 0
    (run_dir,) = find_runs(tmp_path)
    assert run_dir.relative_to(tmp_path).parts[0] == "agent+linucb+tfidf"
    assert run_dir.name.endswith("_alpha0.5")
    config = json.loads((run_dir / "config.json").read_text())
    assert {k: config["args"][k] for k in ("agent", "features", "bandit_alpha", "bandit_epsilon", "model_name")} == \
        {"agent": "linucb", "features": "tfidf", "bandit_alpha": 0.5, "bandit_epsilon": 0.1, "model_name": None}
    assert config["backend"] == {"name": "none"} and config["resolved"]["mode"] == "icrl"
    got = records(run_dir)
    assert [r["step"] for r in got["test.jsonl"]] == [0, 19, 39]
    train = got["train.jsonl"]
    assert len(train) == 40 and all(r["context"] == [] and r["context_size"] == 0 for r in train)
    assert all(r["accuracy"] == int(r["prediction"] == r["answer"]) == r["feedback"] for r in train)
    assert got["results.json"]["finished"] and got["results.json"]["regret"] == sum(1 - r["accuracy"] for r in train)
    assert "final test accuracy" in capsys.readouterr().out


def test_learner_runs_are_deterministic_and_seeded(tmp_path):
    for out, seed in (("a", "3"), ("b", "3"), ("c", "4")):
        assert run(tmp_path / out, "--agent", "epsilon_greedy", "--bandit_epsilon", "0.3", "--seed", seed) == 0
    a, b, c = (records(find_runs(tmp_path / out)[0]) for out in "abc")
    assert a == b
    assert [r["prediction"] for r in a["train.jsonl"]] != [r["prediction"] for r in c["train.jsonl"]]
    assert any(r["metrics"]["explored"] for r in a["train.jsonl"])


def test_resumed_learner_run_equals_an_uninterrupted_one(tmp_path, capsys):
    """Killed after step 24 (and its test line of step 19 lost): the rerun rebuilds the learner by
    replaying the records, recomputes the lost test step, and ends with the same records."""
    assert run(tmp_path / "whole", "--agent", "linucb") == 0
    assert run(tmp_path / "cut", "--agent", "linucb") == 0
    whole, cut = find_runs(tmp_path / "whole")[0], find_runs(tmp_path / "cut")[0]
    train = (cut / "train.jsonl").read_text().splitlines(keepends=True)
    (cut / "train.jsonl").write_text("".join(train[:25]))
    tests = [line for line in (cut / "test.jsonl").read_text().splitlines(keepends=True)
             if json.loads(line)["step"] == 0]
    (cut / "test.jsonl").write_text("".join(tests))
    (cut / "results.json").unlink()
    capsys.readouterr()
    assert run(tmp_path / "cut", "--agent", "linucb") == 0
    err = capsys.readouterr().err
    assert "resuming" in err and "recomputing test steps [19]" in err
    assert records(cut) == records(whole)


def test_supervised_learner_beats_chance_and_llm_records_have_no_agent(tmp_path):
    assert run(tmp_path, "--agent", "supervised", "--train_k", "200", "--test_every", "200", "--test_k", "50") == 0
    assert run(tmp_path, "--backend", "fake", "--model_name", "fake", "--icrl", "--context_strategy_name",
               "random_biased_end", "--max_context_examples", "4") == 0
    learner, llm = sorted(find_runs(tmp_path), key=lambda p: "agent+" not in str(p))
    assert json.loads((learner / "results.json").read_text())["final_test_accuracy"] > 1 / 6 + 0.2
    args = json.loads((llm / "config.json").read_text())["args"]
    assert not {"agent", "features", "bandit_alpha", "bandit_epsilon"} & set(args)  # as before this feature


def test_learner_folders_are_distinct_from_every_models():
    args = {"model_name": "agent+linucb+tfidf", "task_name": "trec_coarse", "max_context_examples": None,
            "icrl": True, "context_strategy_name": None, "context_p_keep": 1.0, "icrl_omit_feedback": False,
            "icrl_flip_feedback": False, "temperature": 1.0, "training_seed": 3, "seed": 3, "test_seed": 3,
            "test_k": 10, "test_every": 20}
    as_model = experiment_dir("data", args)
    as_learner = experiment_dir("data", {**args, "model_name": None, "agent": "linucb"})
    assert as_model.parts[1] != as_learner.parts[1] == "agent+linucb+tfidf"


@pytest.mark.parametrize("words, message", [
    (["--agent", "linucb", "--context_strategy_name", "random_unbiased"], "--context_strategy_name only applies to an LLM"),
    (["--agent", "linucb", "--model_name", "smollm2-135m-x"], "drop --model_name"),
    (["--agent", "supervised", "--no-icrl"], "drop --no-icrl"),
    (["--agent", "supervised", "--bandit_epsilon", "0.2"], "--bandit_epsilon is epsilon-greedy's"),
    (["--agent", "epsilon_greedy", "--bandit_epsilon", "1.5"], "--bandit_epsilon must be in [0, 1]"),
    (["--icrl", "--context_strategy_name", "random_unbiased", "--bandit_alpha", "2"], "only applies to a learner"),
    (["--agent", "ucb"], "invalid choice"),
    (["--agent", "linucb", "--published_quirks"], "--published_quirks only applies to an LLM"),
    (["--agent", "linucb", "--published_tokenization"], "--published_tokenization only applies to an LLM"),
    (["--agent", "supervised", "--dtype", "float32", "--eot_token", "X"], "--dtype, --eot_token only apply to an LLM"),
])
def test_bad_learner_arguments_are_one_line_errors(words, message, tmp_path, capsys):
    assert run(tmp_path, *words) == 2
    err = capsys.readouterr().err
    assert message in err and not find_runs(tmp_path)


@pytest.mark.parametrize("name", LLM_ONLY)
def test_a_learner_refuses_every_llm_setting(name):
    """Each field with role only="llm" is refused for a learner, with its flag named."""
    import dataclasses

    from icrl.cli import parse_args
    from icrl.config import flag_of
    from icrl.cli.validate import validate
    from icrl.errors import UsageError

    config = parse_args(["--agent", "linucb", *SMALL[:8], "--seed", "1", "--training_seed", "1", "--test_seed", "1"])
    changed = dataclasses.replace(config, spec=dataclasses.replace(config.spec, **{name: "changed"}))
    with pytest.raises(UsageError, match=f"{flag_of(name)} only applies to an LLM"):
        validate(changed)


def test_every_setting_says_which_agents_take_it():
    """A new field must be placed: for every agent, for LLMs alone, or for learners alone."""
    import dataclasses

    from icrl.config import RunSpec

    for_all = {f.name for f in dataclasses.fields(RunSpec) if not f.metadata["only"]}
    assert for_all == {"model_name", "task_name", "icrl", "train_k", "test_every", "test_k", "seed",
                       "training_seed", "test_seed", "reward", "agent", "judge_model"}
    assert LEARNER_ONLY == ("features", "bandit_alpha", "bandit_epsilon")


# -- sweeps and figures ------------------------------------------------------------------------------
def test_a_sweep_runs_learners(tmp_path, capsys):
    from icrl.sweep.runner import main as sweep

    code = sweep(["--name", "bandits", "--grid", "agent=linucb,supervised", "--grid", "seed=1,2",
                  *SMALL[:8], "--training_seed", "3", "--test_seed", "3", "--no-progress", "--output_dir", str(tmp_path)])
    assert code == 0
    runs = find_runs(tmp_path)
    assert sorted(p.relative_to(tmp_path).parts[0] for p in runs) == ["agent+linucb+tfidf"] * 2 + \
        ["agent+supervised+tfidf"] * 2
    assert all(json.loads((p / "results.json").read_text())["finished"] for p in runs)
    assert "agent linucb seed 1" in capsys.readouterr().out


def test_learner_drawn_beside_llm_runs_with_its_label(tmp_path, capsys):
    import matplotlib

    matplotlib.use("Agg")
    from icrl.analysis.figures_base import Context
    from icrl.cli.figures import main as draw
    from icrl.analysis.figures_methods import fig_main_results
    from icrl.analysis.results import Results

    data = tmp_path / "data"
    assert run(data, "--backend", "fake", "--model_name", "fake", "--icrl", "--context_strategy_name",
               "random_biased_end", "--max_context_examples", "4") == 0
    assert run(data, "--agent", "linucb") == 0
    learner = next(p for p in find_runs(data) if "agent+" in str(p))
    accuracy = [r["accuracy"] for r in records(learner)["test.jsonl"]]

    results = Results(data)
    hidden = Context(results=results, smooth=10, explorative_p_keep=0.1, notes=[])
    labels = {line.get_label() for ax in fig_main_results(hidden).axes for line in ax.get_lines()}
    assert "naive" in labels and "LinUCB (tfidf)" not in labels
    assert any("LinUCB (tfidf)" in note and "--other_runs" in note for note in hidden.notes)

    shown = Context(results=results, smooth=10, explorative_p_keep=0.1, notes=[], other_runs=True)
    fig = fig_main_results(shown)
    lines = {line.get_label(): line for line in fig.axes[0].get_lines()}
    assert {"naive", "LinUCB (tfidf)"} <= set(lines)
    assert list(lines["LinUCB (tfidf)"].get_xdata()) == [0, 19, 39]
    assert list(lines["LinUCB (tfidf)"].get_ydata()) == pytest.approx(accuracy)
    assert lines["LinUCB (tfidf)"].get_linestyle() == "--"

    capsys.readouterr()
    assert draw(["--data_dir", str(data), "--out_dir", str(tmp_path / "plots"), "--other_runs"]) == 0
    summary = (tmp_path / "plots" / "summary.csv").read_text()
    assert "LinUCB (tfidf)" in summary and (tmp_path / "plots" / "main_results.png").is_file()


def test_minilm_features_come_from_the_embedder(tmp_path, monkeypatch):
    """--features minilm embeds the stream's and the test items' inputs with icrl.method.embeddings
    (a stand-in Embedder here: the real model is slow on a CPU) and records the choice."""
    import icrl.method.embeddings

    seen = []

    class Stub:
        def embed(self, texts):
            seen.extend(texts)
            return np.array([[len(t), t.count(" "), 1.0] for t in texts], dtype=np.float32)

    monkeypatch.setattr(icrl.method.embeddings, "Embedder", Stub)
    assert run(tmp_path, "--agent", "supervised", "--features", "minilm") == 0
    (run_dir,) = find_runs(tmp_path)
    assert run_dir.relative_to(tmp_path).parts[0] == "agent+supervised+minilm"
    train = records(run_dir)["train.jsonl"]
    config = json.loads((run_dir / "config.json").read_text())
    assert seen == [r["prompt"] for r in train] + config["test_set"]["prompts"]


def test_a_longer_train_k_extends_a_learners_run(tmp_path):
    """The features depend on the task alone, so an extended run's training records are those of a
    run started with the larger --train_k."""
    assert run(tmp_path / "grown", "--agent", "linucb", "--train_k", "25") == 0
    assert run(tmp_path / "grown", "--agent", "linucb") == 0
    assert run(tmp_path / "direct", "--agent", "linucb") == 0
    grown, direct = (records(find_runs(tmp_path / name)[0]) for name in ("grown", "direct"))
    assert len(grown["train.jsonl"]) == 40 and grown["train.jsonl"] == direct["train.jsonl"]


def test_token_counts_leave_learners_out(tmp_path, capsys):
    from icrl.cli.tokens import main as count_tokens

    assert run(tmp_path, "--agent", "supervised") == 0
    capsys.readouterr()
    assert count_tokens(["--data_dir", str(tmp_path)]) == 2  # nothing left to count, and not a crash
    out = capsys.readouterr()
    assert "1 run(s) of learners that are not LLMs have no tokens to count" in out.out
    assert "no finished run" in out.err and "unknown model" not in out.err


def test_figures_of_folders_with_several_learners_or_only_learners(tmp_path, capsys):
    """Two learners beside an LLM run were taken for a model-scale ablation pair, and a folder of
    learners alone had no model to group diagnostics by: both ended in a traceback."""
    from icrl.cli.figures import main as draw

    mixed, alone = tmp_path / "mixed", tmp_path / "alone"
    for data in (mixed, alone):
        assert run(data, "--agent", "linucb") == 0
        assert run(data, "--agent", "supervised") == 0
    assert run(mixed, "--backend", "fake", "--model_name", "fake", "--icrl", "--context_strategy_name",
               "random_biased_end", "--max_context_examples", "4") == 0
    for data in (mixed, alone):
        plots = tmp_path / f"plots-{data.name}"
        capsys.readouterr()
        assert draw(["--data_dir", str(data), "--out_dir", str(plots), "--other_runs"]) == 0
        assert "Traceback" not in capsys.readouterr().err
        diagnostics = (plots / "diagnostics.csv").read_text()
        assert "LinUCB (tfidf)" in diagnostics and "online supervised (tfidf)" in diagnostics


# -- pinned seeded results: a change of features, arms or tie-breaking shows here first ---------------
# Each training prediction's first letter (billing, refund, delivery, account) on the toy stream of
# SMALL, and the test accuracy at steps 0, 19 and 39.
PINNED_TOY = {
    "linucb": ("aaaaaaaaaaarbbbabbabbaaaaaadddrbrraarabb", [0.3, 0.3, 0.5]),
    "supervised": ("aaaaaaaaaaadbaaaaaaaddaaaardbrrbraaadaad", [0.3, 0.7, 0.9]),
    "epsilon_greedy": ("bddrdbbbbbbbbbbbbbbbbbbbbbbbabbbbbbbbbbb", [0.3, 0.3, 0.3]),
}


@pytest.mark.parametrize("agent", sorted(PINNED_TOY))
def test_a_seeded_learner_on_a_small_stream_is_pinned(agent, tmp_path):
    assert run(tmp_path, "--agent", agent) == 0
    got = records(find_runs(tmp_path)[0])
    assert "".join(r["prediction"][0] for r in got["train.jsonl"]) == PINNED_TOY[agent][0]
    assert [r["accuracy"] for r in got["test.jsonl"]] == PINNED_TOY[agent][1]


# docs/evidence.md, "Bandit learners on trec_coarse": seed 100 of its command, the SHA-256 (first 16
# hex digits) of the 300 training predictions joined by newlines, and the test accuracy at 0, 99, 199, 299.
PINNED_TREC = {
    "linucb": ("fc4967bcee2520f2", [0.05, 0.38, 0.55, 0.58]),
    "supervised": ("679d9f5f3de4cf9e", [0.05, 0.62, 0.61, 0.64]),
}


@pytest.mark.parametrize("agent", sorted(PINNED_TREC))
def test_the_documented_bandit_command_gives_the_documented_numbers(agent, data_dir, tmp_path):
    import hashlib

    assert main(["--agent", agent, "--task_name", "trec_coarse", "--train_k", "300", "--test_every", "100",
                 "--test_k", "100", "--seed", "100", "--training_seed", "100", "--test_seed", "100", "--no-progress",
                 "--output_dir", str(tmp_path)]) == 0
    got = records(find_runs(tmp_path)[0])
    digest = hashlib.sha256("\n".join(r["prediction"] for r in got["train.jsonl"]).encode()).hexdigest()[:16]
    assert (digest, [r["accuracy"] for r in got["test.jsonl"]]) == PINNED_TREC[agent]
