"""Every token budget checked against its model's window before any model loads (icrl.run.budgets),
as a user meets it: a budget the window cannot hold is one line naming the flag to lower and by
how much, exit 2, no model loaded, nothing written."""

from __future__ import annotations

import re

import pytest

from helpers import TOY_TASK
from icrl.cli.run import main

RUN = ["--task_name", TOY_TASK, "--train_k", "6", "--test_k", "3", "--seed", "1", "--training_seed", "1",
       "--test_seed", "1", "--icrl", "--max_context_examples", "2", "--no-progress"]
FAKE = ["--backend", "fake", "--model_name", "fake"]
RANDOM = ["--context_strategy_name", "random_unbiased"]
REFLECTION = ["--context_strategy_name", "reflection", "--reflect_every", "2"]


def refused(tmp_path, capsys, monkeypatch, argv) -> str:
    """The one line a refused run says, having loaded no model and written nothing."""
    import icrl.run.experiment

    monkeypatch.setattr(icrl.run.experiment, "load_backend_of", lambda config: pytest.fail("loaded the model"))
    capsys.readouterr()
    assert main(RUN + argv + ["--output_dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()
    return err


def lowered_by(err: str, flag: str) -> int:
    match = re.search(rf"lower {flag} by at least (\d+) \(to (\d+) or less\)", err)
    assert match, err
    return int(match.group(2))


@pytest.mark.parametrize("flag, strategy", [("--reasoning", RANDOM), ("--reflection_tokens", REFLECTION)])
def test_a_budget_larger_than_the_window_is_refused_naming_the_flag_and_by_how_much(tmp_path, capsys, monkeypatch,
                                                                                    flag, strategy):
    err = refused(tmp_path, capsys, monkeypatch, FAKE + strategy + [flag, "100000"])
    assert err.startswith(f"error: {flag} 100000: ") and "4096" in err, err
    assert "--max_context_examples" not in err
    most = lowered_by(err, flag)
    # the advice, followed: the largest budget it allows runs, one more is refused
    monkeypatch.undo()
    assert main(RUN + FAKE + strategy + [flag, str(most), "--output_dir", str(tmp_path / "ok")]) == 0
    err = refused(tmp_path, capsys, monkeypatch, FAKE + strategy + [flag, str(most + 1)])
    assert lowered_by(err, flag) == most


def test_two_budgets_that_only_fit_together_name_the_larger(tmp_path, capsys, monkeypatch):
    err = refused(tmp_path, capsys, monkeypatch, FAKE + REFLECTION + ["--reasoning", "3000",
                                                                      "--reflection_tokens", "2500"])
    assert "--reasoning 3000, --reflection_tokens 2500" in err
    assert lowered_by(err, "--reasoning") < 3000


def test_a_judge_whose_prompt_outgrows_the_window_is_said_before_the_model_loads(tmp_path, capsys, monkeypatch):
    """--max_model_len that holds the answer's prompt but not the judge's: the verdict call named."""
    err = refused(tmp_path, capsys, monkeypatch, FAKE + RANDOM + ["--reward", "judge", "--max_model_len", "80"])
    assert "verdict call" in err and "raise --max_model_len by at least" in err and "--judge_model" in err, err


def test_a_budget_the_embedded_model_cannot_hold_is_refused_from_its_tokenizer(tmp_path, capsys, monkeypatch):
    from icrl.backends import embedded

    if not (embedded.cache_root() / "models" / "smollm2-135m" / "tokenizer.json").is_file():
        pytest.skip("the embedded model's tokenizer is not converted here")
    argv = ["--backend", "transformers", "--model_name", "smollm2-135m"] + RANDOM + ["--reasoning", "100000"]
    err = refused(tmp_path, capsys, monkeypatch, argv)
    assert err.startswith("error: --reasoning 100000: ") and "8192" in err, err
    assert lowered_by(err, "--reasoning") < 8192
