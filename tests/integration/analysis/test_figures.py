"""run_draw_plots.py and the results loader on real records of tiny SmolLM2 runs."""

from __future__ import annotations

import json
import math
import shutil

import pandas as pd
import pytest

from icrl.cli.figures import main
from icrl.records.schema import TestLine
from icrl.records import find_runs
from icrl.analysis.results import Results
from icrl.analysis.runs import method_of, model_size, parse_filters

MAIN_FIGURES = ["main_results", "regret", "train_accuracy", "ablation_p_keep"]


@pytest.fixture(scope="module")
def drawn(icrl_runs, tmp_path_factory):
    """The tiny runs (with their tokens counted) drawn once with default options."""
    from icrl.cli.tokens import main as count_tokens

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
    # approximate with 2 contexts is not the paper's (8): drawn only when asked for
    assert "skipped main_results" in out and "--other_runs" in out
    code, out, _ = run_plots(icrl_runs, tmp_path, "--filter", "context_p_keep=0.5", "--filter", "icrl=true",
                             "--other_runs", capsys=capsys)
    assert code == 0 and "skipped main_results" not in out
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
    from icrl.analysis.figures_base import Context
    from icrl.analysis.figures_methods import fig_main_results

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


# -- aggregation, comparable panels, reference lines, verdicts (synthetic records) -----
def test_wilson_interval_and_compare():
    from icrl.analysis.verdict import compare, wilson_interval

    lo, hi = wilson_interval(26, 100)  # the demo's zero-shot: 0.26 [0.18, 0.35]
    assert (round(lo, 2), round(hi, 2)) == (0.18, 0.35)
    lo, hi = wilson_interval(0, 10)
    assert lo == 0.0 and hi == pytest.approx(0.2775, abs=1e-4)  # not the empty normal interval
    lo, hi = wilson_interval(84, 159)  # top2 zero-shot 0.528 [0.451, 0.604]
    assert (round(lo, 3), round(hi, 3)) == (0.451, 0.604)
    assert wilson_interval(5, 10)[0] == pytest.approx(1 - wilson_interval(5, 10)[1])
    with pytest.raises(ValueError):
        wilson_interval(3, 0)
    assert compare(0.18, 100, 0.26, 100) == "same"
    assert compare(0.686, 159, 0.528, 159) == "above" and compare(0.2, 500, 0.5, 500) == "below"


def _zero_shot_run(out, task, test_k, seed=100, accuracy_of=lambda i: i % 3 == 0):
    """Records of a finished zero-shot run (no model): prediction i right when accuracy_of(i)."""
    from icrl.records import RunRecords, experiment_dir

    examples = task.test_examples(test_k, seed)
    answers = [task.answer(e) for e in examples]
    args = {"model_name": "smollm2-135m", "task_name": task.name, "context_strategy_name": None,
            "context_p_keep": 1.0, "max_context_examples": 0, "icrl": True, "icrl_omit_feedback": False,
            "icrl_flip_feedback": False, "icrl_flip_feedback_prob": None, "max_contexts": -1,
            "approximate_context_sampling_method": None, "temperature": 1.0, "train_k": 10, "test_every": 10,
            "test_k": test_k, "exemplars_per_label": 0, "seed": seed, "training_seed": seed, "test_seed": seed}
    from icrl.config import RunConfig
    from icrl.records.plan import Plan
    from icrl.records.summary import per_class_accuracy
    from icrl.run.data import RunData
    from icrl.run.resume import config_record

    config = RunConfig.from_values(args)
    records = RunRecords(experiment_dir(out, config.spec.as_record()))
    records.create(config_record(config, Plan("zero_shot", 0, 1, (0,)), RunData(task, [], examples),
                                 {"backend": "fake", "model_name": "smollm2-135m"}))
    predictions = [a if accuracy_of(i) else next(x for x in task.labels if x != a) for i, a in enumerate(answers)]
    correct = [int(p == a) for p, a in zip(predictions, answers)]
    accuracy = sum(correct) / len(answers)
    records.append_test(TestLine(0, accuracy, per_class_accuracy(answers, correct), predictions, 0, []))
    records.refresh_results_from_disk()
    return accuracy


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """Synthetic records: explorative ICRL at 60 steps (seeds 1, 2) and 30 steps (seed 3) on
    trec_coarse with 20 test items, naive ICRL at 60 steps, and a zero-shot run."""
    from runs_fixture import datasets_dir
    from icrl.tasks import load_task
    from icrl.analysis.synthetic import synthesize_run

    if datasets_dir() is None:
        pytest.skip("raw dataset files not found: set ICRL_DATA_DIR to the datasets folder")
    task = load_task("trec_coarse", datasets_dir())
    out = tmp_path_factory.mktemp("study")
    for seed, steps, p in ((1, 60, 0.3), (2, 60, 0.5), (3, 30, 0.9)):  # seeds vary, one test set
        synthesize_run(out, task, steps=steps, seed=seed, max_examples=8, test_every=20, test_k=20, p_correct=p,
                       test_seed=1, max_context_examples=None)  # the automatic size, as the paper's explorative
    synthesize_run(out, task, steps=60, seed=1, strategy="random_biased_end", p_keep=1.0, max_examples=8,
                   test_every=20, test_k=20, p_correct=0.4, training_seed=1, test_seed=1)
    _zero_shot_run(out, task, 20, seed=1)
    return out


def test_aggregate_is_mean_std_n_over_seeds_per_configuration(study, tmp_path, capsys):
    res = Results(study)
    table = res.aggregate()
    explorative = table[table["method"] == "explorative"]
    assert sorted(explorative["train_k"]) == [30, 60]  # two configurations: lengths are not mixed
    row = explorative[explorative["train_k"] == 60].iloc[0]
    runs = res.runs[(res.runs["method"] == "explorative") & (res.runs["train_k"] == 60)]
    assert row["n"] == 2 and row["final_test_accuracy_n"] == 2
    assert row["final_test_accuracy_mean"] == pytest.approx(runs["final_test_accuracy"].mean())
    assert row["final_test_accuracy_std"] == pytest.approx(runs["final_test_accuracy"].std(ddof=1))
    assert row["regret_mean"] == pytest.approx(runs["regret"].mean())
    assert math.isnan(explorative[explorative["train_k"] == 30].iloc[0]["final_test_accuracy_std"])  # one run
    code, out, _ = run_plots(study, tmp_path, "--only", "main_results", capsys=capsys)
    assert code == 0 and (tmp_path / "summary_by_config.csv").is_file() and "summary_by_config.csv" in out
    assert len(pd.read_csv(tmp_path / "summary_by_config.csv")) == len(table) == 4


def test_test_frame_has_per_class_accuracy_and_predictions_with_gold(study):
    res = Results(study)
    test = res.test()
    assert {"per_class_accuracy", "predictions"} <= set(test.columns)
    assert all(isinstance(p, list) and len(p) == 20 for p in test["predictions"])
    pred = res.predictions()
    assert len(pred) == 20 * len(test)
    per_step = pred.groupby(["run_id", "step"])["correct"].mean()
    for _, row in test.iterrows():
        assert per_step[(row["run_id"], row["step"])] == pytest.approx(row["accuracy"])
    last = res.predictions(step="last")
    assert set(last.groupby("run_id")["step"].max()) <= {29, 59, 0} and len(last) == 20 * len(res.runs)


def test_panels_never_mix_lengths_and_draw_chance_band_and_verdict(study):
    import matplotlib

    matplotlib.use("Agg")
    from icrl.analysis.figures_base import BAND_NOTE, Context
    from icrl.analysis.figures_methods import fig_main_results, fig_train_accuracy

    results = Results(study)
    ctx = Context(results=results, smooth=10, explorative_p_keep=0.1, notes=[])
    fig = fig_main_results(ctx)
    ax = fig.axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    explorative = lines["explorative"].get_xdata()
    assert max(explorative) == 59  # the 60-step runs (two methods) only, not the 30-step one
    assert any("runs of 60 steps" in n and "left out 1 run" in n for n in ctx.notes), ctx.notes
    assert "60 steps, 20 test items" in ax.get_title()
    assert lines["chance (1 / number of labels)"].get_ydata()[0] == pytest.approx(1 / 6)
    legend = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    assert BAND_NOTE in legend and "min–max over seeds" in BAND_NOTE  # two seeds: a band
    # The caption is wrapped to its panel, so neighbouring panels' captions never run together.
    from icrl.analysis.figures_methods import CAPTION_CHARS

    assert all(len(line) <= CAPTION_CHARS for line in ax.get_xlabel().splitlines())
    verdict = " ".join(ax.get_xlabel().split())
    # The zero-shot run tested the same items: the verdict is paired and names its test.
    assert "vs zero-shot on the same items: McNemar exact test" in verdict and "explorative" in verdict
    assert {v.method for v in ctx.verdicts} == {"explorative", "naive"}
    assert all(v.reference_name == "zero-shot run" for v in ctx.verdicts)
    explorative = next(v for v in ctx.verdicts if v.method == "explorative")
    # one zero-shot run: it is paired with one explorative seed only (no outcome counted twice)
    assert (explorative.pairs, explorative.comparison.n) == (1, 20)

    train_fig = fig_train_accuracy(Context(results=results, smooth=10, explorative_p_keep=0.1, notes=[]))
    labels = {line.get_label() for ax in train_fig.axes for line in ax.get_lines()}
    assert not any("zero-shot" in label or "ICL" in label for label in labels)  # not test-set lines
    curve = next(line for line in train_fig.axes[0].get_lines() if line.get_label() == "explorative")
    assert min(curve.get_xdata()) == 9  # the first full 10-step window, no growing window


# -- the published figures' selection of methods ---------------------------------------------------
@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """One data folder with the paper's runs and the same methods at other settings: naive at
    temperature 1.0 and 2.0, naive+ at 2.0 and 1.0, explorative with the automatic size and with a
    given size, approximate with 8 and with 4 uniform contexts, and an ICL run."""
    from runs_fixture import datasets_dir
    from icrl.tasks import load_task
    from icrl.analysis.synthetic import synthesize_run

    if datasets_dir() is None:
        pytest.skip("raw dataset files not found: set ICRL_DATA_DIR to the datasets folder")
    task = load_task("trec_coarse", datasets_dir())
    out = tmp_path_factory.mktemp("mixed")
    runs = {  # name: (p_correct, settings)
        "naive": (0.2, dict(strategy="random_biased_end", p_keep=1.0, temperature=1.0)),
        "naive T2": (0.25, dict(strategy="random_biased_end", p_keep=1.0, temperature=2.0)),
        "naive+": (0.3, dict(strategy="random_biased_end_only_positive", p_keep=1.0, temperature=2.0)),
        "naive+ T1": (0.35, dict(strategy="random_biased_end_only_positive", p_keep=1.0, temperature=1.0)),
        "explorative": (0.5, dict(strategy="random_unbiased_only_positive", p_keep=0.1, max_context_examples=None)),
        "explorative m8": (0.55, dict(strategy="random_unbiased_only_positive", p_keep=0.1)),
        "approximate": (0.6, dict(strategy="approximate_only_positive", p_keep=0.1, max_contexts=8)),
        "approximate K4": (0.65, dict(strategy="approximate_only_positive", p_keep=0.1, max_contexts=4)),
        "ICL": (0.7, dict(strategy="random_unbiased", p_keep=1.0, icrl=False)),
    }
    dirs = {name: synthesize_run(out, task, steps=40, seed=1, max_examples=8, test_every=10, test_k=20, p_correct=p,
                                 **kw) for name, (p, kw) in runs.items()}
    return out, dirs


def _curve(run_dir):
    return [r["accuracy"] for r in map(json.loads, (run_dir / "test.jsonl").read_text().splitlines())]


def test_method_figures_select_runs_as_the_published_figures(mixed, tmp_path, capsys):
    import matplotlib

    matplotlib.use("Agg")
    from icrl.analysis.figures_base import Context
    from icrl.analysis.figures_methods import fig_main_results

    out, dirs = mixed
    runs = Results(out).runs.set_index("run_dir")
    paper = {name: runs.loc[str(d), "paper_method"] for name, d in dirs.items()}
    assert paper == {"naive": "naive", "naive T2": "", "naive+": "naive+", "naive+ T1": "", "explorative": "explorative",
                     "explorative m8": "", "approximate": "approximate", "approximate K4": "", "ICL": "ICL"}
    assert runs.loc[str(dirs["naive T2"]), "method"] == "naive"  # still the method; not the paper's setting

    # By default: one line per method, each the paper's run (its test accuracies), nothing else.
    ctx = Context(results=Results(out), smooth=10, explorative_p_keep=0.1, notes=[])
    ax = fig_main_results(ctx).axes[0]
    lines = {line.get_label(): line for line in ax.get_lines() if not line.get_label().startswith("_")}
    methods = {"naive", "naive+", "explorative", "approximate"}
    assert methods <= set(lines) and "ICL (supervised)" in lines
    assert not [label for label in lines if "T=" in label or "K=" in label or "m=" in label]
    for method in methods:
        assert list(lines[method].get_ydata()) == pytest.approx(_curve(dirs[method])), method
    note = next(n for n in ctx.notes if "other settings not drawn" in n)
    assert "4 run(s)" in note and "--other_runs" in note and "naive+ (m=8, T=1)" in note

    # --other_runs: the others too, dashed and labelled with what they are; the paper's lines unchanged.
    ctx = Context(results=Results(out), smooth=10, explorative_p_keep=0.1, notes=[], other_runs=True)
    ax = fig_main_results(ctx).axes[0]
    lines = {line.get_label(): line for line in ax.get_lines() if not line.get_label().startswith("_")}
    others = {"naive (m=8, T=2)": "naive T2", "naive+ (m=8, T=1)": "naive+ T1",
              "explorative (p=0.1, m=8, T=1)": "explorative m8",
              "approximate (p=0.1, K=4 uniform, m=8, T=1)": "approximate K4"}
    assert set(others) <= set(lines), sorted(lines)
    for label, name in others.items():
        assert lines[label].get_linestyle() == "--"
        assert list(lines[label].get_ydata()) == pytest.approx(_curve(dirs[name])), label
    for method in methods:
        assert lines[method].get_linestyle() == "-"
        assert list(lines[method].get_ydata()) == pytest.approx(_curve(dirs[method])), method

    # the command line: the flag, and the verdicts name what was drawn
    code, text, _ = run_plots(out, tmp_path / "paper", "--only", "main_results", capsys=capsys)
    assert code == 0 and "--other_runs draws them" in text and "verdict:" in text
    assert not [line for line in text.splitlines() if line.startswith("verdict:") and "T=" in line]
    code, text, _ = run_plots(out, tmp_path / "all", "--only", "main_results", "--other_runs", capsys=capsys)
    assert code == 0 and any(line.startswith("verdict:") and "naive+ (m=8, T=1)" in line for line in text.splitlines())
