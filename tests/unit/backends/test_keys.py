"""The key of each hosted backend: --api_key, else the provider's environment variables; a run with
none, or with one the API refuses, is one line that names where the key goes (and where the refused
one came from), exit 2, the key never shown; and every script that talks to an API takes --api_key."""

from __future__ import annotations

import pytest

from helpers import TOY_TASK

from icrl.backends.keys import find_key
from icrl.standin import STANDINS, start_standin
from icrl.standin import anthropic_server, gemini_server

pytest.importorskip("anthropic")
pytest.importorskip("google.genai")
VARIABLES = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "GEMINI_API_KEY",
             "GOOGLE_API_KEY", "API_KEY", "GOOGLE_GEMINI_BASE_URL")
MODELS = {"openai": "gpt-4o-mini", "anthropic": anthropic_server.MODEL, "gemini": gemini_server.MODEL}
WRONG = "sk-WRONG-KEY-123"


@pytest.fixture(autouse=True)
def _no_key_in_the_environment(monkeypatch):
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)


def run(tmp_path, api, *extra):
    from icrl.cli.run import main

    return main(["--backend", api, "--model_name", MODELS[api], "--task_name", TOY_TASK, "--context_strategy_name",
                 "random_unbiased", "--icrl", "--max_context_examples", "2", "--train_k", "2", "--test_k", "2",
                 "--test_every", "2", "--seed", "1", "--training_seed", "1", "--test_seed", "1", "--output_dir",
                 str(tmp_path / "out"), "--no-progress", "--max_retries", "0", *extra])


def one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    assert WRONG not in err[0]
    return err[0]


@pytest.mark.parametrize("api, line", [
    ("openai", "error: no OpenAI API key: set OPENAI_API_KEY or pass --api_key"),
    ("anthropic", "error: no Anthropic API key: set ANTHROPIC_API_KEY or pass --api_key"),
    ("gemini", "error: no Gemini API key: set GEMINI_API_KEY, GOOGLE_API_KEY or API_KEY, or pass --api_key"),
])
def test_no_key_is_one_line_naming_the_variable(api, line, tmp_path, capsys):
    """--backend openai with no key and OpenAI's own URL: the variable, not 'no server answers ... vllm serve'."""
    assert run(tmp_path, api) == 2
    assert one_line(capsys) == line
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").rglob("*.jsonl"))


@pytest.mark.parametrize("api, variable, status, provider", [
    ("openai", "OPENAI_API_KEY", 401, "OpenAI-compatible"),
    ("anthropic", "ANTHROPIC_API_KEY", 401, "Anthropic"),
    ("gemini", "GOOGLE_API_KEY", 400, "Gemini"),
])
def test_a_refused_key_is_one_line_naming_where_it_came_from(api, variable, status, provider, tmp_path, capsys,
                                                            monkeypatch):
    monkeypatch.setenv(variable, WRONG)
    with start_standin(api, [MODELS[api]]) as server:
        assert run(tmp_path, api, "--base_url", server.base_url) == 2
        line = one_line(capsys)
        assert line.startswith(f"error: the {provider} API at {server.base_url}") and \
            f"refused the API key from {variable} (HTTP {status})" in line, line
        assert run(tmp_path, api, "--base_url", server.base_url, "--api_key", WRONG) == 2
        assert "refused the API key from --api_key" in one_line(capsys)
        assert run(tmp_path, api, "--base_url", server.base_url, "--api_key", STANDINS[api].key) == 0  # --api_key wins
    capsys.readouterr()


def test_the_key_is_the_first_set_of_the_variables_and_is_masked(monkeypatch):
    from icrl.infra.masking import scrub

    monkeypatch.setenv("API_KEY", "key-from-api-key")
    monkeypatch.setenv("GOOGLE_API_KEY", "key-from-google")
    key = find_key(None, ("GEMINI_API_KEY", "GOOGLE_API_KEY", "API_KEY"))
    assert (key.value, key.source) == ("key-from-google", "GOOGLE_API_KEY") and "key-from" not in repr(key)
    assert find_key("given-key", ("GEMINI_API_KEY",)).source == "--api_key"
    assert scrub("key-from-google key-from-api-key") == "*** ***"


@pytest.mark.parametrize("api", ["gemini", "anthropic"])
def test_the_window_search_takes_api_key_as_run_experiment_does(api, capsys):
    from icrl.cli.window import main

    words = ["--backend", api, "--model_name", MODELS[api], "--task_name", TOY_TASK, "--max_window_tokens", "400"]
    with start_standin(api, [MODELS[api]]) as server:
        assert main([*words, "--base_url", server.base_url]) == 2
        assert one_line(capsys).startswith(f"error: no {api.capitalize()} API key: set ")
        assert main([*words, "--base_url", server.base_url, "--api_key", STANDINS[api].key]) == 0
    assert int(capsys.readouterr().out) > 0


def test_a_sweep_takes_api_key_for_its_runs(tmp_path, capsys):
    from icrl.sweep.runner import main

    with start_standin("anthropic", [MODELS["anthropic"]]) as server:
        code = main(["--backend", "anthropic", "--model_name", MODELS["anthropic"], "--base_url", server.base_url,
                     "--api_key", STANDINS["anthropic"].key, "--task_name", TOY_TASK, "--grid",
                     "context_strategy_name=random_unbiased", "--icrl", "--max_context_examples", "2", "--train_k",
                     "2", "--test_k", "2", "--test_every", "2", "--seed", "1", "--training_seed", "1", "--test_seed",
                     "1", "--output_dir", str(tmp_path / "out"), "--no-progress"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert len(list((tmp_path / "out").rglob("results.json"))) == 1
    assert STANDINS["anthropic"].key not in out.out + out.err
