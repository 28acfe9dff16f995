"""What the study report's page (icrl/report/report.js) draws, rendered under node with
tests/dom.js: the legend's colours are those of the lines, the training charts carry no
zero-shot test accuracy, their windows are of at least a few steps or the title says why not,
and a model without a benchmark score has none in the leaderboard, only why."""

from __future__ import annotations

import pytest

from helpers import TOY, elements, render_page_script
from icrl.analysis.results import Results
from icrl.cli.run import main as run
from icrl.report.data import report_data

EXPLORATIVE = ["--context_strategy_name", "random_unbiased_only_positive", "--context_p_keep", "0.1", "--icrl",
               "--max_context_examples", "4", "--test_every", "10"]


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    out = tmp_path_factory.mktemp("study")
    common = [*TOY, "--test_k", "12", "--output_dir", str(out)]
    assert run([*common, "--max_context_examples", "0", "--icrl"]) == 0
    assert run([*common, *EXPLORATIVE, "--train_k", "30"]) == 0
    return out


def page(data, tmp_path) -> dict:
    return render_page_script("report", "report-data", data, tmp_path)


def charts(tree) -> dict:
    """Title -> chart element of every chart in the panels."""
    return {c["children"][0]["text"]: c for c in elements(tree, lambda e: e["class"] == "chart")}


def test_the_zero_shot_legend_has_the_colour_of_its_line(study, tmp_path):
    tree = page(report_data(Results(study), {}), tmp_path)
    [panel] = elements(tree, lambda e: e["class"] == "panel")
    [zero_line] = elements(panel, lambda e: e["tag"] == "line" and e["class"] == "ref zero")
    legend = {li["text"].split(":")[0]: li for li in elements(panel, lambda e: e["tag"] == "li")}
    [swatch] = elements(legend["zero-shot"], lambda e: "swatch" in e["class"])
    assert swatch["attrs"]["style"] == f"background:{zero_line['attrs']['stroke']}"
    curve_colours = {e["attrs"]["stroke"] for e in elements(panel, lambda e: e["class"] == "series")}
    [explorative] = [li for name, li in legend.items() if name != "zero-shot"]
    [swatch] = elements(explorative, lambda e: "swatch" in e["class"])
    assert swatch["attrs"]["style"].removeprefix("background:") in curve_colours


def test_only_the_test_chart_has_the_zero_shot_line_and_windows_are_of_several_steps(study, tmp_path):
    shown = charts(page(report_data(Results(study), {}), tmp_path))
    test = shown["test accuracy (mean over seeds, band: min-max)"]
    assert elements(test, lambda e: e["class"] == "ref zero")
    # 30 training steps: windows of 5 (MIN_WINDOW), not 30 windows of 1 step
    training = shown["training accuracy (windows of 5 steps)"]
    assert not elements(training, lambda e: e["class"] == "ref zero" or e["class"] == "ref-label zero")
    assert len(elements(training, lambda e: e["tag"] == "circle")) == 6


def test_a_run_too_short_for_windows_says_so(tmp_path):
    out = tmp_path / "short"
    assert run([*TOY, "--test_k", "12", "--output_dir", str(out), *EXPLORATIVE, "--train_k", "3"]) == 0
    titles = list(charts(page(report_data(Results(out), {}), tmp_path)))
    assert "training accuracy (one window a run: runs of under 5 steps are too short for windows of 5)" in titles


def test_a_model_without_a_benchmark_score_has_no_rank_and_says_why(study, tmp_path, monkeypatch):
    import icrl.report.data as report
    from icrl.analysis.benchmark import BenchScore, TaskResult, ranked

    part = [TaskResult("toy", {"zero-shot": 0.5, "ICL": 0.47, "explorative": 0.48}, {"explorative": 2}, 40)]
    noisy = BenchScore("a", part, [], 0.57, (-1e16, 6.0), -0.017, (-0.2, 0.05), -0.029, (-0.175, 0.075))
    scored = BenchScore("b", part, [], 0.3, (0.1, 0.5), 0.05, (0.01, 0.1), 0.2, (0.1, 0.3))
    monkeypatch.setattr(report, "bench_scores", lambda results: ranked([noisy, scored]))
    tree = page(report_data(Results(study), {}), tmp_path)
    [table] = elements(tree, lambda e: e["attrs"].get("id") == "leaderboard-table")
    [body] = [part for part in table["children"] if part["tag"] == "tbody"]
    rows = [[td["text"] for td in row["children"]] for row in body["children"]]
    assert [r[:3] for r in rows] == [["1", "b", "0.30 [0.10, 0.50]"], [noisy.no_score, "a", "none"]]
