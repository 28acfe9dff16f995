"""run_draw_plots.py and the results loader on real records of tiny SmolLM2 runs."""

from __future__ import annotations

import json
import math
import shutil

import pandas as pd
import pytest

from icrl.plots import main
from icrl.records import find_runs
from icrl.results import Results, method_of, model_size, parse_filters

MAIN_FIGURES = ["main_results", "regret", "train_accuracy", "ablation_p_keep"]


@pytest.fixture(scope="module")
def drawn(icrl_runs, tmp_path_factory):
    """The tiny runs (with their tokens counted) drawn once with default options."""
    from icrl.token_count import main as count_tokens

    assert count_tokens(["--data_dir", str(icrl_runs)]) == 0
    out = tmp_path_factory.mktemp("plots")
    return out


def run_plots(data_dir, out_dir, *extra, capsys):
    code = main(["--data_dir", str(data_dir), "--out_dir", str(out_dir), *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_figures_and_summary_numbers(icrl_runs, drawn, capsys):
    code, out, _ = run_plots(icrl_runs, drawn, "--smooth", "3", capsys=capsys)
    assert code == 0, out
    for name in MAIN_FIGURES:
        for ext in ("png", "pdf"):
            path = drawn / f"{name}.{ext}"
            assert path.is_file() and path.stat().st_size > 5000, path
        assert (drawn / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (drawn / f"{name}.pdf").read_bytes()[:5] == b"%PDF-"
        assert f"wrote {drawn / name}.png (+ .pdf)" in out

    summary = pd.read_csv(drawn / "summary.csv")
    runs = find_runs(icrl_runs)
    assert len(summary) == len(runs) == 6
    assert sorted(summary["method"].fillna("")) == sorted(["zero-shot", "ICL", "naive", "explorative", "", "approximate"])
    for run_dir in runs:
        results = json.loads((run_dir / "results.json").read_text())
        tokens = json.loads((run_dir / "token_counts.json").read_text())["summary"]
        row = summary[summary["run_id"] == run_dir.relative_to(icrl_runs).as_posix()].iloc[0]
        assert row["final_test_accuracy"] == pytest.approx(results["final_test_accuracy"])
        assert row["best_test_accuracy"] == pytest.approx(results["best_test_accuracy"])
        assert row["best_test_step"] == results["best_test_step"]
        assert row["steps"] == results["steps_completed"] and row["total_steps"] == results["total_steps"]
        if results["regret"] is None:
            assert math.isnan(row["regret"])
        else:
            assert row["regret"] == results["regret"]
        assert row["prompt_tokens"] == tokens["prompt_tokens"] and row["uncached_tokens"] == tokens["uncached_tokens"]
        assert bool(row["finished"]) is True


def test_missing_runs_are_skipped_with_one_line_notes(icrl_runs, drawn, capsys):
    code, out, _ = run_plots(icrl_runs, drawn, capsys=capsys)
    assert code == 0
    skipped = [line for line in out.splitlines() if line.startswith("skipped ")]
    names = {line.split(":")[0].split()[1] for line in skipped}
    assert {"ablation_omit_feedback", "ablation_flip_feedback", "ablation_temperature", "ablation_model_scale",
            "ablation_beam_size", "ablation_semantic_labels"} <= names
    assert not names & set(MAIN_FIGURES)
    assert all(len(line) < 160 for line in skipped)
    assert not (drawn / "ablation_omit_feedback.png").exists()


def test_filter_restricts_runs(icrl_runs, tmp_path, capsys):
    code, out, _ = run_plots(icrl_runs, tmp_path, "--filter", "context_p_keep=0.5", "--filter", "icrl=true",
                             capsys=capsys)
    assert code == 0
    summary = pd.read_csv(tmp_path / "summary.csv")
    assert sorted(summary["strategy"]) == ["approximate_only_positive", "random_unbiased_only_positive"]
    assert "skipped main_results" not in out  # approximate is a main method
    assert "skipped ablation_p_keep" in out  # only one p_keep left

    code, out, _ = run_plots(icrl_runs, tmp_path / "zs", "--filter", "method=zero-shot", capsys=capsys)
    assert code == 0
    assert len(pd.read_csv(tmp_path / "zs" / "summary.csv")) == 1
    assert "skipped main_results: no naive, naive+, explorative" in out
    assert not (tmp_path / "zs" / "main_results.png").exists()

    # a repeated key matches either value; the demo's p_keep names the explorative run
    code, _, _ = run_plots(icrl_runs, tmp_path / "two", "--filter", "method=naive", "--filter", "method=ICL",
                           "--only", "main_results", capsys=capsys)
    assert code == 0 and len(pd.read_csv(tmp_path / "two" / "summary.csv")) == 2
    code, out, _ = run_plots(icrl_runs, tmp_path / "p05", "--explorative_p_keep", "0.5", "--filter",
                             "method=explorative", capsys=capsys)
    summary = pd.read_csv(tmp_path / "p05" / "summary.csv")
    assert code == 0 and list(summary["p_keep"]) == [0.5]


@pytest.mark.parametrize("argv, message", [
    (["--smooth", "0"], "--smooth must be"),
    (["--filter", "no_such_key=1"], "unknown --filter key 'no_such_key'"),
    (["--filter", "task"], "use key=value"),
    (["--filter", "task=banking77"], "no run under"),
    (["--only", "nope"], "unknown --only"),
    (["--explorative_p_keep", "0"], "--explorative_p_keep must be"),
    (["--frobnicate"], "unrecognized arguments"),
])
def test_bad_arguments_exit_2_with_one_line(argv, message, icrl_runs, tmp_path, capsys):
    code, _, err = run_plots(icrl_runs, tmp_path, *argv, capsys=capsys)
    assert code == 2
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_missing_or_empty_data_dir(tmp_path, capsys):
    code, _, err = run_plots(tmp_path / "nope", tmp_path / "out", capsys=capsys)
    assert code == 2 and "is not a directory" in err
    (tmp_path / "empty").mkdir()
    code, _, err = run_plots(tmp_path / "empty", tmp_path / "out", capsys=capsys)
    assert code == 2 and "no runs under" in err


def test_results_loader_frames(icrl_runs, tmp_path):
    res = Results(icrl_runs)
    assert len(res) == 6 and not res.notes
    train, test = res.train(), res.test()
    for run_id, run in res.runs.iterrows():
        steps = test[test["run_id"] == run_id]["step"].tolist()
        assert steps == ([0] if run["mode"] == "zero_shot" else [0, 2, 5])
        rows = train[train["run_id"] == run_id]
        if run["mode"] == "icrl":
            assert len(rows) == 6 and (1 - rows["accuracy"]).sum() == run["regret"]
    # an unfinished copy (its last step not on disk, results.json gone) still loads, as unfinished;
    # "finished" comes from the records, not from results.json
    copy = tmp_path / "runs"
    shutil.copytree(icrl_runs, copy)
    victim = next(r for r in find_runs(copy) if "random_biased_end" in str(r))
    (victim / "results.json").unlink()
    lines = (victim / "train.jsonl").read_text().splitlines(keepends=True)
    (victim / "train.jsonl").write_text("".join(lines[:-1]))
    res = Results(copy)
    row = res.runs[res.runs["run_dir"] == str(victim)].iloc[0]
    assert not row["finished"] and row["method"] == "naive" and row["steps"] == 5 and not res.notes


def test_method_names_and_helpers():
    assert method_of("icrl", "random_biased_end", 1.0) == "naive"
    assert method_of("icrl", "random_biased_end_only_positive", 1.0) == "naive+"
    assert method_of("icrl", "random_unbiased_only_positive", 0.1) == "explorative"
    assert method_of("icrl", "random_unbiased_only_positive", 0.5) == ""
    assert method_of("icrl", "random_unbiased_only_positive", 0.5, explorative_p_keep=0.5) == "explorative"
    assert method_of("icrl", "approximate_only_positive", 0.5) == "approximate"
    assert method_of("icl", "random_unbiased", 1.0) == "ICL"
    assert method_of("zero_shot", "random_unbiased", 1.0) == "zero-shot"
    assert model_size("smollm2-135m") < model_size("meta-llama/Meta-Llama-3.1-8B-Instruct") < model_size("Qwen2.5-72B")
    assert parse_filters(["model_name=a", "model=b", "task=x"]) == {"model": ["a", "b"], "task": ["x"]}


def test_zero_shot_line_is_the_naive_runs_step_zero(icrl_runs):
    """As in the paper: the zero-shot line is the naive ICRL run's step-0 test (ICRL prompt, empty
    context); the separate zero-shot run is a line of its own, labelled as such."""
    import matplotlib

    matplotlib.use("Agg")
    from icrl.plots import Context, fig_main_results

    results = Results(icrl_runs)
    runs = results.runs
    test = results.test()
    naive_id = runs[runs["method"] == "naive"]["run_id"].iloc[0]
    zero_id = runs[runs["method"] == "zero-shot"]["run_id"].iloc[0]
    step0 = test[(test["run_id"] == naive_id) & (test["step"] == 0)]["accuracy"].iloc[0]
    separate = test[test["run_id"] == zero_id]["accuracy"].iloc[0]
    fig = fig_main_results(Context(results=results, smooth=1, explorative_p_keep=0.1, notes=[]))
    lines = {line.get_label(): line for ax in fig.axes for line in ax.get_lines()}
    assert list(lines["zero-shot (naive ICRL, step 0)"].get_ydata()) == pytest.approx([step0, step0])
    assert list(lines["zero-shot (separate run)"].get_ydata()) == pytest.approx([separate, separate])
    assert "zero-shot" not in lines
