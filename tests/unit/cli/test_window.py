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

