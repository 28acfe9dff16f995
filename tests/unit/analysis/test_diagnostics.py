"""Degeneration diagnostics from hand-written records with known values (icrl.analysis.diagnostics)."""

import json
import math

import pandas as pd
import pytest

from icrl.analysis import diagnostics as dg
from icrl.errors import UsageError
from icrl.run.readback import read_run
from icrl.records.schema import TestLine, TrainLine
from helpers import run_config

LABELS = ["a", "b", "c", "d"]


def write_run(path, steps, mode="icrl", strategy="random_biased_end", p_keep=1.0, tests=None, test_answers=None):
    """steps: (prediction, answer, context ids) per training step; feedback = accuracy."""
    path.mkdir(parents=True)
    tests = tests or {}
    every = len(steps) if not tests or max(tests) == len(steps) - 1 else max(tests) + 1
    config = run_config(len(steps), mode=mode, labels=LABELS, test_answers=test_answers or ["a"], test_every=every,
                        args={"context_strategy_name": strategy, "context_p_keep": p_keep})
    (path / "config.json").write_text(json.dumps(config))
    with open(path / "train.jsonl", "w") as f:
        for t, (prediction, answer, context) in enumerate(steps):
            correct = None if mode == "icl" else int(prediction == answer)
            line = TrainLine(t, t, f"question {t}", prediction, correct, answer, correct, len(context), context, {})
            f.write(json.dumps(line.as_json()) + "\n")
    with open(path / "test.jsonl", "w") as f:
        for t, predictions in sorted(tests.items()):
            f.write(json.dumps(TestLine(t, 0.0, {}, predictions, 0).as_json()) + "\n")
    return path


# a naive run that collapses onto "a": predictions a b a a a a, answers a b c d c b
COLLAPSE = [("a", "a", []), ("b", "b", [0]), ("a", "c", [0, 1]), ("a", "d", [0, 1, 2]), ("a", "c", [1, 2, 3]),
            ("a", "b", [2, 3, 4])]


def test_step_table_frequency_bias_and_positives(tmp_path):
    state = read_run(write_run(tmp_path / "run", COLLAPSE))
    steps = dg.step_table(state)
    assert steps["correct"].tolist() == [1, 1, 0, 0, 0, 0]
    # step 0 has no context; step 1: context [a] -> b is not a; step 2: [a, b] tie -> a counts;
    # step 3: [a, b, a] -> a; steps 4, 5: contexts all a -> a
    assert math.isnan(steps["frequency_match"][0])
    assert steps["frequency_match"].tolist()[1:] == [0, 1, 1, 1, 1]
    assert steps["positives_available"].tolist() == [0, 1, 2, 2, 2, 2]
    assert steps["context_positive_share"].tolist()[1:] == [1, 1, pytest.approx(2 / 3), pytest.approx(1 / 3), 0]


def test_window_table_entropy_coverage_regret(tmp_path):
    state = read_run(write_run(tmp_path / "run", COLLAPSE))
    windows = dg.window_table(state, window=3)
    assert windows["window_start"].tolist() == [0, 3] and windows["window_end"].tolist() == [2, 5]
    first, second = windows.iloc[0], windows.iloc[1]
    # predictions a b a: entropy of (2/3, 1/3) in bits, 2 of 4 labels
    h = -(2 / 3) * math.log2(2 / 3) - (1 / 3) * math.log2(1 / 3)
    assert first["entropy_bits"] == pytest.approx(h) and first["entropy_norm"] == pytest.approx(h / 2)
    assert first["coverage"] == 0.5 and second["coverage"] == 0.25 and second["entropy_bits"] == 0
    assert first["reward_rate"] == pytest.approx(2 / 3) and second["reward_rate"] == 0
    assert second["frequency_bias"] == 1 and first["frequency_bias"] == 0.5
    assert windows["cumulative_regret"].tolist() == [1, 4]


def test_icl_context_shows_gold_answers(tmp_path):
    steps = [(None, "b", []), (None, "b", [0]), (None, "c", [0, 1])]
    state = read_run(write_run(tmp_path / "icl", steps, mode="icl", strategy="random_unbiased"))
    table = dg.step_table(state)
    assert table["frequency_match"].isna().all() and table["reward"].isna().all()


def test_per_class_accuracy(tmp_path):
    state = read_run(write_run(tmp_path / "run", COLLAPSE, tests={5: ["a", "a", "b", "c"]},
                                  test_answers=["a", "b", "b", "d"]))
    table = dg.per_class_table(state)
    assert table.set_index("gold_label")["accuracy"].to_dict() == {"a": 1.0, "b": 0.5, "d": 0.0}
    assert table.set_index("gold_label")["n"].to_dict() == {"a": 1, "b": 2, "d": 1}


def test_write_diagnostics_files(tmp_path):
    data = tmp_path / "data"
    write_run(data / "naive", COLLAPSE)
    write_run(data / "explorative", [(a, a, []) for a in "abcdab"], strategy="random_unbiased_only_positive",
              p_keep=0.1)
    paths = dg.write_diagnostics(data, tmp_path / "out", window=3)
    assert [p.name for p in paths] == ["diagnostics.csv", "diagnostics_per_class.csv", "diagnostics_runs.csv",
                                       "diagnostics.png"]
    table = pd.read_csv(paths[0])
    assert set(table["method"]) == {"naive", "explorative"}
    assert table.groupby("method")["cumulative_regret"].max().to_dict() == {"explorative": 0, "naive": 4}
    assert {"history_frequency_bias", "knowing_doing_gap"} <= set(table.columns)
    runs = pd.read_csv(paths[2]).set_index("method")
    assert runs.loc["explorative", "greediness"] == 0.0 and runs.loc["explorative", "steps"] == 6
    assert runs.loc["naive", "greediness"] > 0
    assert paths[3].stat().st_size > 10_000
    only = dg.write_diagnostics(data, tmp_path / "only", window=3, run_dirs=[data / "naive"])
    assert set(pd.read_csv(only[0])["method"]) == {"naive"}


def test_not_a_folder(tmp_path):
    with pytest.raises(UsageError, match="not a directory"):
        dg.write_diagnostics(tmp_path / "missing", tmp_path / "out")


def test_the_figure_of_short_runs_has_whole_steps_and_says_its_windows(tmp_path, monkeypatch):
    """Runs of 3 and 4 steps: each is one window (too few steps for windows of MIN_WINDOW), the
    title says so, and the step axes read whole steps."""
    import matplotlib.pyplot as plt

    data = tmp_path / "data"
    write_run(data / "naive", COLLAPSE[:4])
    write_run(data / "explorative", [(a, a, []) for a in "abc"], strategy="random_unbiased_only_positive",
              p_keep=0.1)
    drawn = []
    monkeypatch.setattr(plt, "close", drawn.append)
    dg.write_diagnostics(data, tmp_path / "out")
    [fig] = drawn
    assert fig._suptitle.get_text().startswith(
        "Degeneration diagnostics (one window a run: runs of under 5 steps are too short for windows of 5)")
    for ax in fig.axes:
        low, high = ax.get_xlim()
        ticks = [t for t in ax.get_xticks() if low <= t <= high]
        assert ticks and all(float(t).is_integer() for t in ticks), ticks
    assert dg.window_note(3, 6) == "windows of 3 steps" and dg.window_note(5, 30) == "windows of 5 steps"
