"""The benchmark score (icrl/analysis/benchmark.py): ICRL's gain over zero-shot divided by the
supervised-ICL gap, with a bootstrap interval over seeds and items."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import TOY
from icrl.analysis.benchmark import bench_scores, bootstrap
from icrl.analysis.results import Results
from icrl.cli.run import main


def outcomes(accuracy: float, runs: int = 3, items: int = 400, seed: int = 0) -> np.ndarray:
    """Runs x items with exactly ``accuracy`` right in each run (in a shuffled order)."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(runs):
        row = np.zeros(items)
        row[: round(accuracy * items)] = 1
        rows.append(rng.permutation(row))
    return np.vstack(rows)


def test_the_score_is_the_share_of_the_supervised_gap_that_rewards_close():
    tasks = [{"zero-shot": outcomes(0.2), "ICL": outcomes(0.6, seed=1), "explorative": outcomes(0.4, seed=2)},
             {"zero-shot": outcomes(0.5), "ICL": outcomes(0.7, seed=1), "explorative": outcomes(0.5, seed=2)}]
    b = bootstrap(tasks, replicates=1000)
    # gain: (0.2 + 0.0) / 2 = 0.1; gap: (0.4 + 0.2) / 2 = 0.3
    assert b["gain"] == pytest.approx(0.1) and b["gap"] == pytest.approx(0.3) and b["score"] == pytest.approx(1 / 3)
    low, high = b["score_ci"]
    assert low < 1 / 3 < high and high - low < 0.5
    assert b["gap_ci"][0] > 0
    assert bootstrap(tasks, replicates=1000) == b  # seeded: the same records give the same interval


def test_a_gap_within_noise_widens_the_score_and_is_flagged(tmp_path):
    tasks = [{"zero-shot": outcomes(0.3, items=40), "ICL": outcomes(0.325, items=40, seed=1),
              "explorative": outcomes(0.35, items=40, seed=2)}]
    b = bootstrap(tasks, replicates=1000)
    assert b["gap_ci"][0] <= 0 < b["gap_ci"][1]


def test_more_items_narrow_the_interval():
    def width(items):
        tasks = [{"zero-shot": outcomes(0.2, items=items), "ICL": outcomes(0.6, items=items, seed=1),
                  "explorative": outcomes(0.4, items=items, seed=2)}]
        low, high = bootstrap(tasks, replicates=1000)["score_ci"]
        return high - low
    assert width(1600) < width(100) / 2


def toy_runs(out, seeds=(1, 2)):
    """Fake-backend zero-shot, supervised ICL and explorative runs on the toy task."""
    common = [*TOY, "--test_k", "12", "--output_dir", str(out)]
    for seed in seeds:
        s = ["--seed", str(seed), "--training_seed", str(seed)]
        assert main([*common, *s, "--max_context_examples", "0", "--icrl"]) == 0
        assert main([*common, *s, "--context_strategy_name", "random_unbiased", "--no-icrl", "--train_k", "6",
                     "--test_every", "3", "--max_context_examples", "4"]) == 0
        assert main([*common, *s, "--context_strategy_name", "random_unbiased_only_positive", "--context_p_keep",
                     "0.1", "--icrl", "--train_k", "6", "--test_every", "3", "--max_context_examples", "4"]) == 0


def test_scores_from_runs_on_shared_items(tmp_path, capsys):
    toy_runs(tmp_path)
    results = Results(tmp_path)
    task = results.runs["task"].iloc[0]
    [score] = bench_scores(results, tasks=[task], replicates=200)
    [part] = score.tasks
    assert part.items == 12 and part.seeds == {"zero-shot": 2, "ICL": 2, "explorative": 2}
    final = results.runs.groupby("method")["final_test_accuracy"].mean()
    assert part.accuracy == pytest.approx({m: final[m] for m in ("zero-shot", "ICL", "explorative")})
    assert score.gain == pytest.approx(final["explorative"] - final["zero-shot"])
    headline = "ICRL benchmark score " if score.stable else "no ICRL benchmark score: "
    assert score.line().startswith(f"{score.model}: {headline}")
    assert bench_scores(results, tasks=["banking77"]) == []  # no run of the suite's tasks: no score


def test_a_gap_within_noise_gives_no_score_and_sorts_last():
    """A gap whose interval holds 0 makes some replicates' ratios any number (1e16 and the like):
    the headline is then no number but why there is none, with the gain and gap it would rest
    on, and such a model sorts after every model with a score, whatever its ratio."""
    from icrl.analysis.benchmark import BenchScore, TaskResult

    part = [TaskResult("t", {"zero-shot": 0.5, "ICL": 0.47, "explorative": 0.48}, {"zero-shot": 2}, 40)]
    unstable = BenchScore("a", part, [], 0.57, (-1.0e16, 6.0), -0.017, (-0.2, 0.05), -0.029, (-0.175, 0.075))
    stable = BenchScore("b", part, [], 0.5, (0.25, 0.75), 0.1, (0.05, 0.15), 0.2, (0.1, 0.3))
    assert stable.score_text == "0.50 [0.25, 0.75]" and stable.no_score == ""
    assert unstable.score_text.startswith("no score: supervised ICL does not beat zero-shot beyond noise")
    line = unstable.line()
    assert line.startswith("a: no ICRL benchmark score: ") and "0.57" not in line and "1e+16" not in line
    assert "ICRL gain over zero-shot -0.017 [-0.200, +0.050]" in line and "supervised-ICL gap -0.029" in line
    assert stable.line().startswith("b: ICRL benchmark score 0.50 [0.25, 0.75] (95% bootstrap")


def test_models_without_a_score_come_after_those_with_one():
    from icrl.analysis.benchmark import BenchScore, ranked

    def score(model, value, gap_low):
        return BenchScore(model, ["t"], [], value, (value - 0.1, value + 0.1), 0.1, (0, 0.2), 0.1, (gap_low, 0.2))

    noisy, low, high = score("a", 0.9, -0.05), score("b", 0.3, 0.02), score("c", 0.6, 0.01)
    assert [s.model for s in ranked([noisy, low, high])] == ["c", "b", "a"]
