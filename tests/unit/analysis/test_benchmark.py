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
    assert score.line().startswith(f"{score.model}: ICRL benchmark score ")
    assert bench_scores(results, tasks=["banking77"]) == []  # no run of the suite's tasks: no score


def test_an_unstable_score_prints_no_interval():
    """A gap whose interval holds 0 makes some replicates' ratios any number (1e16 and the like):
    the line and the report say the interval is unbounded instead of printing them."""
    from icrl.analysis.benchmark import BenchScore

    unstable = BenchScore("m", [], [], 2.5, (-1.0e16, 6.0), -0.125, (-0.2, -0.05), -0.05, (-0.175, 0.075))
    stable = BenchScore("m", [], [], 0.5, (0.25, 0.75), 0.1, (0.05, 0.15), 0.2, (0.1, 0.3))
    assert unstable.interval_text == "[unbounded]" and stable.interval_text == "[0.25, 0.75]"
