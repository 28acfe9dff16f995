"""run_experiment.py's command line (icrl.cli.run): spellings that mean the same computation name
one run (one folder, one config.json "args"); spellings that do not, keep theirs."""

from __future__ import annotations

import pytest

from helpers import TOY_TASK

from icrl.cli.run import parse_args
from icrl.records import experiment_dir

RUN = ["--task_name", TOY_TASK, "--context_strategy_name", "random_unbiased", "--icrl", "--max_context_examples", "2",
       "--seed", "1", "--training_seed", "1", "--test_seed", "1"]


def folder(*words) -> str:
    return str(experiment_dir("data", parse_args([*RUN, *words]).spec.as_record()))


@pytest.mark.parametrize("backend, model, same, other", [
    ("anthropic", "claude-haiku-4-5", ["--api_mode", "chat"], ["--api_mode", "completions"]),  # auto is chat there
    ("openai", "gpt-4o-mini", ["--api_mode", "chat"], ["--api_mode", "completions"]),  # no tokenizer here: chat
    ("gemini", "gemini-2.5-flash", ["--api_model", "gemini-2.5-flash"], ["--api_model", "gemini-2.0-flash"]),
])
def test_spellings_of_one_computation_share_one_run(backend, model, same, other, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    plain = folder("--backend", backend, "--model_name", model)
    assert folder("--backend", backend, "--model_name", model, *same) == plain
    assert folder("--backend", backend, "--model_name", model, *other) != plain


def test_an_api_mode_the_server_decides_keeps_its_own_run(monkeypatch):
    """--backend openai with a model whose tokenizer is here: auto asks the server (completions or
    chat), so an explicit mode is a run of its own."""
    plain = folder("--backend", "openai", "--model_name", "smollm2-135m")
    assert folder("--backend", "openai", "--model_name", "smollm2-135m", "--api_mode", "chat") != plain
    assert parse_args([*RUN, "--backend", "anthropic", "--api_mode", "chat"]).spec.api_mode == "auto"
