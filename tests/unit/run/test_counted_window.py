"""A context the window an API reports cannot hold is refused before the run (--backend gemini and
anthropic, whose tokens the API counts), as the local backends refuse one their window cannot
hold: one line, exit 2, nothing written."""

from __future__ import annotations

import re

import pytest

from helpers import TOY_TASK

from icrl.standin import STANDINS, anthropic_server, gemini_server, start_standin

pytest.importorskip("anthropic")
pytest.importorskip("google.genai")
MODELS = {"anthropic": anthropic_server.MODEL, "gemini": gemini_server.MODEL}


def run(tmp_path, api, server, size: str, *extra):
    from icrl.cli.run import main

    return main(["--backend", api, "--model_name", MODELS[api], "--base_url", server.base_url, "--api_key",
                 STANDINS[api].key, "--task_name", TOY_TASK, "--context_strategy_name", "random_unbiased", "--icrl",
                 "--max_context_examples", size, "--train_k", "4", "--test_k", "2", "--test_every", "2", "--seed",
                 "1", "--training_seed", "1", "--test_seed", "1", "--output_dir", str(tmp_path / "out"),
                 "--no-progress", *extra])


@pytest.mark.parametrize("api", ["gemini", "anthropic"])
@pytest.mark.parametrize("window, size, said", [
    (40, "4", r"the longest input with no context episode already takes \d+ tokens, more than the window of 40 tokens "
              r"the API reports for {model}; use a model with a larger window$"),
    (5, "0", r"the longest input with no context episode already takes \d+ tokens, more than the window of 5 tokens"),
    (60, "4", r"--max_context_examples 4: a context of 4 episodes of the task's shortest inputs already takes \d+ "
              r"tokens, more than the window of 60 tokens the API reports for {model}; lower --max_context_examples"),
])
@pytest.mark.waits
def test_a_context_the_apis_window_cannot_hold_is_one_line_before_the_run(api, window, size, said, tmp_path, capsys):
    with start_standin(api, [MODELS[api]], window=window) as server:
        code = run(tmp_path, api, server, size)
        asked = len(server.messages if api == "anthropic" else server.requests)
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert code == 2 and len(err) == 1 and re.search(said.format(model=MODELS[api]), err[0]), err
    assert asked == 0  # no completion was asked
    assert not list((tmp_path / "out").rglob("*.jsonl")) and not list((tmp_path / "out").rglob("config.json"))


def test_a_window_given_as_max_model_len_is_named(tmp_path, capsys):
    with start_standin("gemini", [MODELS["gemini"]]) as server:
        assert run(tmp_path, "gemini", server, "4", "--max_model_len", "60") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "more than the window of 60 tokens of --max_model_len; lower --max_context_examples" in err[-1], err


def test_a_context_that_fits_runs(tmp_path, capsys):
    with start_standin("gemini", [MODELS["gemini"]], window=400) as server:
        assert run(tmp_path, "gemini", server, "4") == 0
    assert len(list((tmp_path / "out").rglob("results.json"))) == 1
