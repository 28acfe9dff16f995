"""Paired comparisons of real run records through Results (icrl.analysis.paired)."""

import math

import numpy as np
import pytest

from icrl.analysis import paired
from icrl.analysis.stats import compare_paired
from icrl.errors import UsageError
from icrl.records import read_json, read_jsonl
from icrl.tasks import Example, Task

from icrl.analysis.results import Results
from icrl.analysis.synthetic import synthesize_run

LABELS = ["apple", "banana", "cherry"]


def toy_task():
    train = [Example(i, f"question {i}", i % 3) for i in range(100)]
    test = [Example(i, f"test {i}", (i * 5) % 3) for i in range(60)]
    return Task("toy", LABELS, "Input: {text}", "Label:", train, test)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("paired")
    task = toy_task()
    for seed in (1, 2):
        synthesize_run(root, task, steps=30, strategy="random_biased_end", p_keep=1.0, max_examples=4, test_every=10,
                       test_k=60, p_correct=0.2, seed=seed)
        synthesize_run(root, task, steps=30, strategy="random_unbiased_only_positive", p_keep=0.1, max_examples=4,
                       test_every=10, test_k=60, p_correct=0.8, seed=seed)
    # another test set: nothing to pair with
    synthesize_run(root, task, steps=30, strategy="approximate_only_positive", p_keep=0.5, max_examples=4,
                   test_every=10, test_k=30, p_correct=0.5, seed=1)
    return root


def outcomes(run_dir):
    config = read_json(run_dir / "config.json")
    last = read_jsonl(run_dir / "test.jsonl")[-1]
    return np.array([p == a for p, a in zip(last["predictions"], config["test_set"]["answers"])], dtype=int)


def test_compare_runs_by_id(data):
    res = Results(data)
    runs = res.runs
    naive = runs[(runs["method"] == "naive") & (runs["seed"] == 1)].index[0]
    explorative = runs[(runs["method"] == "explorative") & (runs["seed"] == 1)].index[0]
    result = paired.compare_runs(res, explorative, naive)
    expected = compare_paired(outcomes(data / explorative), outcomes(data / naive))
    assert result == expected and result.n == 60
    assert result.accuracy_a == pytest.approx(runs.loc[explorative, "final_test_accuracy"])
    assert result.outcome == "above" and "McNemar exact" in result.line()
    with pytest.raises(UsageError, match="no run 'nope'"):
        paired.compare_runs(res, "nope", naive)


def test_paired_verdict_pools_seeds_and_falls_back(data):
    runs = Results(data).runs
    naive, explorative = runs[runs["method"] == "naive"], runs[runs["method"] == "explorative"]
    verdict = paired.paired_verdict("m", "toy", "explorative", explorative, naive, "naive run", model_params=1.35e8)
    assert verdict.pairs == 2 and verdict.comparison.n == 120
    a = np.concatenate([outcomes(data / r) for r in explorative.sort_values("seed").index])
    assert verdict.comparison.accuracy_a == pytest.approx(a.mean())
    assert verdict.outcome == "above" and verdict.advice is None
    assert "on the same 120 test items, 2 run pairs pooled" in verdict.line()
    assert "McNemar exact" in paired.paired_panel_note([verdict]) and "beat zero-shot" in verdict.short()
    at_zero = paired.paired_verdict("m", "toy", "explorative", explorative, naive, "naive ICRL at step 0",
                                    reference_step=0)
    first = np.concatenate([np.array([p == a for p, a in zip(read_jsonl(data / r / "test.jsonl")[0]["predictions"],
                                                              read_json(data / r / "config.json")["test_set"]["answers"])])
                            for r in naive.sort_values("seed").index])
    assert at_zero.comparison.accuracy_b == pytest.approx(first.mean())
    assert at_zero.comparison.accuracy_b != pytest.approx(verdict.comparison.accuracy_b)
    approximate = runs[runs["method"] == "approximate"]
    assert paired.paired_verdict("m", "toy", "approximate", approximate, naive) is None
    worse = paired.paired_verdict("m", "toy", "naive", naive, explorative, model_params=1.35e8)
    assert worse.outcome == "below" and "larger model" in worse.advice


def test_seed_columns_and_detectable_difference():
    row = paired.seed_columns("final_test_accuracy", [0.30, 0.35, 0.32, 0.28, 0.40], 100)
    assert row["final_test_accuracy_n"] == 5 and row["final_test_accuracy_mean"] == pytest.approx(0.33)
    assert row["final_test_accuracy_ci_low"] < 0.33 < row["final_test_accuracy_ci_high"]
    near_zero = paired.seed_columns("best_test_accuracy", [0.0, 0.25], 8)  # Student-t: [-1.463, 1.713]
    assert 0 < near_zero["best_test_accuracy_ci_low"] < 0.125 < near_zero["best_test_accuracy_ci_high"] < 1
    regret = paired.seed_columns("regret", [3, 9])  # not a proportion: the Student-t interval
    assert regret["regret_ci_low"] < 0 < 6 < regret["regret_ci_high"]
    assert paired.detectable_difference(0.5, 388) == pytest.approx(0.1, abs=0.001)
    assert math.isnan(paired.detectable_difference(float("nan"), 100))
    assert math.isnan(paired.detectable_difference(0.5, None))
