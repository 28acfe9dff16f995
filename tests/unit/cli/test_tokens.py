"""run_count_tokens.py's command line (icrl.cli.tokens): bad flags are one line, exit 2."""

from __future__ import annotations

import pytest

from helpers import one_error_line


def test_token_counter_csv_that_is_a_folder_says_so(tmp_path, capsys):
    from icrl.cli.tokens import main as count_main

    (tmp_path / "tables").mkdir()
    assert count_main(["--data_dir", str(tmp_path), "--csv", str(tmp_path / "tables")]) == 2
    assert "is a folder" in one_error_line(capsys)


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_token_counter_refuses_a_fraction_that_is_not_one(value, tmp_path, capsys):
    from icrl.cli.tokens import main as count_main

    assert count_main(["--data_dir", str(tmp_path), "--explorative_p_keep", value]) == 2
    assert "--explorative_p_keep" in one_error_line(capsys)

