"""run_draw_plots.py on runs beyond the paper (icrl.analysis.figures_beyond): knn runs beside a
zero-shot run and a learner are drawn in beyond_paper, each with a paired verdict against the
zero-shot run on the same test items, printed and under the panel; compare_runs compares a run's
step with the zero-shot run's only test step."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import TOY
from icrl.analysis.paired import compare_runs
from icrl.analysis.results import Results
from icrl.cli.figures import main as draw
from icrl.cli.run import main

SIZES = ["--train_k", "20", "--test_every", "10", "--test_k", "24", "--icrl"]


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    data = tmp_path_factory.mktemp("beyond") / "data"
    for strategy in ("knn_lexical_only_positive", "knn_lexical"):
        for seed in ("100", "101"):
            assert main([*TOY, *SIZES, "--context_strategy_name", strategy, "--max_context_examples", "4",
                         "--seed", seed, "--training_seed", seed, "--output_dir", str(data)]) == 0
    assert main([*TOY, *SIZES, "--max_context_examples", "0", "--output_dir", str(data)]) == 0
    learner = [w for w in TOY if w not in ("--backend", "fake", "--model_name")]
    assert main([*learner, *SIZES, "--agent", "linucb", "--output_dir", str(data)]) == 0
    return data


def test_runs_beyond_the_paper_are_drawn_with_a_paired_verdict_each(study, tmp_path, capsys):
    assert draw(["--data_dir", str(study), "--out_dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "beyond_paper.png").stat().st_size > 10_000 and (tmp_path / "beyond_paper.pdf").is_file()
    assert "skipped main_results" in out  # no run of the paper's methods at the published settings
    verdicts = [line for line in out.splitlines() if line.startswith("verdict: ")]
    assert len(verdicts) == 3, out  # two knn configurations (seeds pooled) and the learner
    for name in ("knn_lexical_only_positive (p=1, m=4)", "knn_lexical (p=1, m=4)"):
        line = next(v for v in verdicts if f": {name} " in v)
        assert "vs zero-shot run" in line and "on the same 24 test items" in line
        assert "McNemar" in line and "ICRL" not in line.split(":")[2]  # not one of the paper's methods
    learner = next(v for v in verdicts if "LinUCB (tfidf)" in v)
    assert learner.startswith("verdict: learner / ") and "larger model" not in learner


def test_a_run_is_compared_with_a_zero_shot_runs_only_test_step(study):
    results = Results(study)
    runs = results.runs
    zero = runs[runs["mode"] == "zero_shot"].index[0]
    knn = runs[(runs["strategy"] == "knn_lexical") & (runs["seed"] == 100)].index[0]
    at_step_9 = compare_runs(results, knn, zero, step=9)
    assert at_step_9.n == 24 and at_step_9.accuracy_b == runs.loc[zero, "final_test_accuracy"]
    test = results.test()
    assert at_step_9.accuracy_a == pytest.approx(
        test[(test["run_id"] == knn) & (test["step"] == 9)]["accuracy"].iloc[0])
    assert compare_runs(results, zero, knn, step=19).accuracy_a == at_step_9.accuracy_b


def test_many_configurations_keep_the_legend_and_verdicts_clear_of_the_panels(tmp_path):
    """Seven configurations on two tasks: seven verdicts under each panel and a legend of long
    names in one column below the panels; the figure grows for both, so neither covers a panel
    nor the other."""
    import shutil

    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from icrl.analysis.figures_base import Context
    from icrl.analysis.figures_beyond import fig_beyond_paper

    toy = Path(TOY[TOY.index("--task_name") + 1])
    second = tmp_path / "toy2"
    shutil.copytree(toy.parent, second)
    (second / "toy2.toml").write_text((toy).read_text().replace('name = "toy"', 'name = "toy2"'))
    data = tmp_path / "data"
    for task in (str(toy), str(second / "toy2.toml")):
        words = [task if w == str(toy) else w for w in TOY]
        for strategy in ("knn_lexical_only_positive", "knn_lexical", "knn_lexical_curated_only_positive", "summary",
                         "reflection", "knn_lexical_only_negative", "random_unbiased"):
            assert main([*words, *SIZES, "--context_strategy_name", strategy, "--max_context_examples", "4",
                         "--output_dir", str(data)]) == 0
        assert main([*words, *SIZES, "--max_context_examples", "0", "--output_dir", str(data)]) == 0
    fig = fig_beyond_paper(Context(results=Results(data), smooth=10, explorative_p_keep=0.1, notes=[]))
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    (legend,) = fig.legends
    box = legend.get_window_extent(renderer)
    assert len(fig.axes) == 2 and len(legend.get_texts()) >= 8
    for ax in fig.axes:
        assert len(ax.get_xlabel().splitlines()) > 14  # the verdicts
        assert box.y1 <= ax.xaxis.label.get_window_extent(renderer).y0 + 1  # below the verdicts
        assert box.y1 <= ax.get_window_extent(renderer).y0
    assert box.y0 >= 0  # inside the figure
