"""find_max_examples_given_max_window.py's command line (icrl.cli.window) and the token counter's:
refusals are one line and leave nothing behind."""

from __future__ import annotations

from helpers import files_under, one_error_line


def test_token_counter_and_window_search_refusals_leave_nothing(in_tmp_path, tmp_path, capsys):
    from icrl.cli.tokens import main as count_main
    from icrl.cli.window import main as maxlen_main

    assert count_main(["--data_dir", "nothing_here", "--csv", "out/tokens.csv"]) == 2
    one_error_line(capsys)
    assert maxlen_main(["--model_name", "./no_model", "--task_name", "trec_coarse", "--max_window_tokens", "4096"]) == 2
    one_error_line(capsys)
    assert maxlen_main(["--model_name", "smollm2-135m", "--task_name", "no_such_task"]) == 2
    one_error_line(capsys)
    assert files_under(tmp_path) == []



def test_the_gemini_api_counts_the_window_search(monkeypatch, capsys):
    """--backend gemini: the window is the model's input token limit and the tokens are the API's
    countTokens (the stand-in counts words), the same search as with a local tokenizer."""
    import pytest

    pytest.importorskip("google.genai")
    from icrl.standin.gemini_server import KEY, MODEL, GeminiServer
    from helpers import TOY_TASK

    from icrl.backends import load_backend
    from icrl.cli.window import main as maxlen_main
    from icrl.run.window import search_max_examples
    from icrl.tasks import load_task

    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    with GeminiServer(window=600) as server:
        assert maxlen_main(["--backend", "gemini", "--base_url", server.base_url, "--model_name", MODEL,
                            "--task_name", TOY_TASK, "--largest_fitting"]) == 0
        printed = int(capsys.readouterr().out.strip())
        backend = load_backend(MODEL, "gemini", base_url=server.base_url)
        try:
            expected = search_max_examples(backend, load_task(TOY_TASK), None)
        finally:
            backend.close()
        assert server.counted  # countTokens was asked
    assert printed == expected.max_examples and expected.window == 600 and 0 < printed < 115
    assert expected.tokens <= 0.95 * 600 < expected.tokens_next


def test_base_url_without_the_gemini_backend_is_refused(capsys):
    from icrl.cli.window import main as maxlen_main

    assert maxlen_main(["--base_url", "http://127.0.0.1:1", "--model_name", "smollm2-135m", "--task_name", "x"]) == 2
    assert "--base_url is for --backend gemini or anthropic" in one_error_line(capsys)
