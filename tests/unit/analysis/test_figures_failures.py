"""The failures figure and the failure columns of the summaries (icrl.analysis.figures_failures,
icrl.analysis.results): what each bar stands for, from the records of real fake-backend runs."""

from __future__ import annotations

import pandas as pd
import pytest

from helpers import TOY
from icrl.analysis.failures import run_failures
from icrl.analysis.figures import FigureOptions, draw
from icrl.analysis.figures_base import Context
from icrl.analysis.figures_failures import failure_rows, fig_failures
from icrl.analysis.results import Results
from icrl.cli.run import main
from icrl.records import find_runs, read_json, read_jsonl
from icrl.records.schema import TrainLine


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("failures")
    common = [*TOY, "--icrl", "--max_context_examples", "3", "--train_k", "40", "--test_every", "20", "--test_k", "4",
              "--no-progress", "--output_dir", str(root)]
    for seed in ("1", "2"):
        assert main([*common, "--context_strategy_name", "random_biased_end", "--temperature", "0", "--seed", seed]) == 0
        assert main([*common, "--context_strategy_name", "summary", "--reasoning", "6", "--seed", seed]) == 0
    return root


def test_each_bar_is_the_mean_over_seeds_of_the_run_metrics(data):
    results = Results(data)
    rows = failure_rows(Context(results, 50, 0.1, []))
    assert len(rows) == 2 and set(rows["n"]) == {2}
    for _, row in rows.iterrows():
        runs = [d for d in find_runs(data) if ("/summary/" in d.as_posix()) == row["label"].startswith("summary")]
        per_run = [run_failures([TrainLine.from_json(r) for r in read_jsonl(d / "train.jsonl")],
                                read_json(d / "config.json")["dataset"]["labels"]) for d in runs]
        for metric in ("greediness", "history_frequency_bias", "early_collapse"):
            assert row[metric] == pytest.approx(sum(m[metric] for m in per_run) / 2, nan_ok=True)
        reasoned = row["label"].startswith("summary")
        assert pd.isna(row["knowing_doing_gap"]) != reasoned  # measured only where reasoning is recorded


def test_the_figure_and_the_summaries_carry_the_failure_metrics(data, tmp_path):
    assert fig_failures(Context(Results(data), 50, 0.1, [])) is not None
    assert draw(FigureOptions(data_dir=str(data), out_dir=str(tmp_path), only=("failures",))) == 0
    assert (tmp_path / "failures.png").stat().st_size > 10_000
    summary = pd.read_csv(tmp_path / "summary.csv")
    assert {"greediness", "knowing_doing_gap", "collapse_step", "early_collapse"} <= set(summary.columns)
    by_config = pd.read_csv(tmp_path / "summary_by_config.csv")
    assert {"greediness_mean", "early_collapse_mean", "knowing_doing_gap_mean"} <= set(by_config.columns)
    assert (tmp_path / "diagnostics_runs.csv").exists()


def test_no_icrl_run_is_a_one_line_skip(tmp_path):
    root = tmp_path / "zs"
    assert main([*TOY, "--icrl", "--max_context_examples", "0", "--test_k", "4", "--no-progress",
                 "--output_dir", str(root)]) == 0
    assert fig_failures(Context(Results(root), 50, 0.1, [])) == "no ICRL run of a model"
