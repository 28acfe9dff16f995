"""The study report's data (icrl/report/data.py): what the page shows, from fake-backend runs."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import TOY
from icrl.analysis.results import Results
from icrl.analysis.stats import compare_paired, paired_outcomes
from icrl.cli.run import main as run
from icrl.report.data import report_data

EXPLORATIVE = ["--context_strategy_name", "random_unbiased_only_positive", "--context_p_keep", "0.1", "--icrl",
               "--max_context_examples", "4", "--train_k", "30", "--test_every", "10"]
NAIVE = ["--context_strategy_name", "random_biased_end", "--icrl", "--max_context_examples", "4", "--train_k", "30",
         "--test_every", "10"]


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    out = tmp_path_factory.mktemp("study")
    for seed in (1, 2, 3):
        common = [*TOY[:-6], "--seed", str(seed), "--training_seed", str(seed), "--test_seed", "100", "--test_k", "16",
                  "--output_dir", str(out)]
        assert run([*common, "--max_context_examples", "0", "--icrl"]) == 0
        assert run([*common, *EXPLORATIVE]) == 0
        if seed < 3:
            assert run([*common, *NAIVE]) == 0
    return out


def test_every_configuration_with_its_seeds_and_intervals(study):
    results = Results(study)
    data = report_data(results, {run_id: f"v/{i}.html" for i, run_id in enumerate(results.runs["run_id"])})
    assert data["counts"] == {"runs": 8, "configs": 3, "models": 1, "tasks": 1, "finished": 8}
    by_method = {c["method"]: c for c in data["configs"]}
    explorative = by_method["explorative"]
    assert [r["seed"] for r in explorative["runs"]] == [1, 2, 3] and all(r["viewer"] for r in explorative["runs"])
    finals = results.runs[results.runs["method"] == "explorative"].sort_values("seed")["final_test_accuracy"]
    assert explorative["final"]["mean"] == pytest.approx(finals.mean(), abs=1e-4) and explorative["final"]["n"] == 3
    assert explorative["final"]["low"] < explorative["final"]["mean"] < explorative["final"]["high"] or \
        finals.nunique() == 1
    intervals = [c[k][end] for c in data["configs"] for k in ("final", "best") for end in ("low", "high")]
    assert all(0 <= x <= 1 for x in intervals if x is not None)  # accuracies' intervals stay in [0, 1]
    assert explorative["curve"]["step"] == [0, 9, 19, 29] and len(explorative["diagnostics"]["accuracy"]) == 6
    assert len(explorative["diagnostics"]["history_frequency_bias"]) == 6  # a failure metric's curve too (windows of 5)
    assert all(0 <= x <= 1 for x in explorative["diagnostics"]["history_frequency_bias"] if x is not None)
    assert by_method["zero-shot"]["vs_zero"] is None and by_method["zero-shot"]["diagnostics"] == {}


def test_the_verdicts_pair_the_same_seeds_on_shared_items(study):
    results = Results(study)
    runs = results.runs
    data = report_data(results)
    explorative = next(c for c in data["configs"] if c["method"] == "explorative")
    ex = runs[runs["method"] == "explorative"].sort_values("seed")
    zero = runs[runs["method"] == "zero-shot"].sort_values("seed")
    pairs = [paired_outcomes(a, b) for a, b in zip(ex["run_dir"], zero["run_dir"])]
    expected = compare_paired(np.concatenate([p[0] for p in pairs]), np.concatenate([p[1] for p in pairs]))
    verdict = explorative["vs_zero"]
    assert (verdict["n"], verdict["pairs"]) == (48, 3)
    assert verdict["diff"] == pytest.approx(expected.difference.estimate, abs=1e-4)
    assert (verdict["low"], verdict["high"]) == pytest.approx((expected.difference.low, expected.difference.high), abs=1e-4)
    assert verdict["p"] == pytest.approx(expected.mcnemar.pvalue) and verdict["outcome"] == expected.outcome
    # against the paper's naive ICRL: its two seeds pair with explorative's seeds 1 and 2
    [naive] = explorative["vs_paper"]
    assert naive["method"] == "naive" and (naive["n"], naive["pairs"]) == (32, 2)


def test_the_panel_has_zero_shot_as_its_reference(study):
    results = Results(study)
    data = report_data(results)
    [panel] = data["panels"]
    zero = results.runs[results.runs["method"] == "zero-shot"]["final_test_accuracy"]
    assert panel["zero_shot"] == pytest.approx(zero.mean(), abs=1e-4) and panel["zero_shot_runs"] == 3
    assert panel["chance"] == pytest.approx(1 / 4) and len(panel["configs"]) == 3
    assert data["leaderboard"] == []  # no benchmark suite here


def test_a_model_without_a_score_has_no_rank_and_says_why(study, monkeypatch):
    """The leaderboard ranks only models with a score; one whose supervised-ICL gap is within
    noise comes last with no score and no rank, only why not (its gain and gap stand)."""
    import icrl.report.data as report
    from icrl.analysis.benchmark import BenchScore, TaskResult, ranked

    part = [TaskResult("toy", {"zero-shot": 0.5, "ICL": 0.47, "explorative": 0.48}, {"explorative": 2}, 40)]
    noisy = BenchScore("a", part, [], 0.57, (-1e16, 6.0), -0.017, (-0.2, 0.05), -0.029, (-0.175, 0.075))
    scored = BenchScore("b", part, [], 0.3, (0.1, 0.5), 0.05, (0.01, 0.1), 0.2, (0.1, 0.3))
    monkeypatch.setattr(report, "bench_scores", lambda results: ranked([noisy, scored]))
    board = report_data(Results(study), {})["leaderboard"]
    assert [(r["model"], r["rank"], r["score"]) for r in board] == [("b", 1, 0.3), ("a", None, None)]
    assert board[0]["score_text"] == "0.30 [0.10, 0.50]" and board[0]["no_score"] == ""
    assert board[1]["no_score"].startswith("no score: supervised ICL does not beat zero-shot beyond noise")
    assert board[1]["gain"] == -0.017 and board[1]["gap"] == -0.029
