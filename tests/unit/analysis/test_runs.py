"""The runs table (icrl/analysis/runs.py): a run of a backend that is not the model is named
with that backend wherever its model is (tables, verdicts, figures, report), and gets no
advice about the model's size."""

from __future__ import annotations

import math

from helpers import TOY
from icrl.analysis.runs import model_label, model_params, model_size
from icrl.cli.run import main as run


def test_a_fake_backend_is_named_and_has_no_size():
    assert model_label("smollm2-135m", "fake") == "smollm2-135m (fake)"
    assert model_label("smollm2-135m", "hf") == "smollm2-135m" and model_label("fake", "fake") == "fake"
    assert math.isnan(model_params("smollm2-135m (fake)")) and model_params("smollm2-135m") == 1.35e8
    assert model_size("smollm2-135m (fake)") == 1.35e8  # sorted among the models by the name's size


def test_every_reader_names_the_fake_backend_and_gives_no_size_advice(tmp_path, capsys):
    from icrl.analysis.results import Results
    from icrl.cli.figures import main as plots
    from icrl.report.data import report_data

    data = tmp_path / "data"
    common = [*TOY, "--model_name", "smollm2-135m", "--test_k", "8", "--output_dir", str(data)]
    assert run([*common, "--max_context_examples", "0", "--icrl"]) == 0
    assert run([*common, "--context_strategy_name", "random_biased_end", "--icrl", "--train_k", "6",
                "--test_every", "3", "--max_context_examples", "2"]) == 0
    results = Results(data)
    assert set(results.runs["model"]) == {"smollm2-135m (fake)"}
    assert set(results.runs["model_id"]) == {"smollm2-135m"}  # the name as given: its tokenizer counts tokens
    report = report_data(results, {})
    assert {c["model"] for c in report["configs"]} == {"smollm2-135m (fake)"}
    assert not any(c["small_model"] for c in report["configs"])
    capsys.readouterr()
    assert plots(["--data_dir", str(data), "--out_dir", str(tmp_path / "plots")]) == 0
    verdicts = [line for line in capsys.readouterr().out.splitlines() if line.startswith("verdict: ")]
    assert verdicts and all(line.startswith("verdict: smollm2-135m (fake) ") for line in verdicts), verdicts
    assert not any("larger model" in line for line in verdicts), verdicts


def test_a_label_shows_only_the_settings_that_act_on_its_strategy(tmp_path):
    """A summary's context is its summary and --summary_episodes (no p_keep, no window of
    episodes); a reflection run keeps every episode (no p_keep) in a window (m)."""
    from icrl.analysis.results import Results

    data = tmp_path / "data"
    common = [*TOY, "--icrl", "--train_k", "4", "--test_every", "2", "--test_k", "4", "--output_dir", str(data)]
    assert run([*common, "--context_strategy_name", "summary", "--max_context_examples", "4"]) == 0
    assert run([*common, "--context_strategy_name", "summary", "--summary_episodes", "2",
                "--max_context_examples", "4"]) == 0
    assert run([*common, "--context_strategy_name", "reflection", "--max_context_examples", "3"]) == 0
    assert run([*common, "--context_strategy_name", "random_unbiased", "--max_context_examples", "3"]) == 0
    labels = set(Results(data).runs["label"])
    assert labels == {"summary", "summary (2 episodes)", "reflection (m=3)", "random_unbiased (p=1, m=3)"}, labels
