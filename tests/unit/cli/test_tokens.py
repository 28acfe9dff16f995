"""run_count_tokens.py's command line (icrl.cli.tokens): bad flags are one line, exit 2."""

from __future__ import annotations

import pytest

from helpers import BAD_FIELDS, corrupt_field, files_under, one_error_line, refused_field


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



@pytest.mark.parametrize("name, line, field, value", BAD_FIELDS)
def test_a_wrong_record_field_is_one_line_and_nothing_is_counted(finished, tmp_path, capsys, name, line, field, value):
    """Every line is parsed before a run is counted: no token_counts file, no --csv table."""
    from icrl.cli.tokens import main as count_main

    out, run_dir, _ = finished
    corrupt_field(run_dir, name, line, field, value)
    before = files_under(out)
    assert count_main(["--data_dir", str(out), "--tokenizer", "smollm2-135m", "--csv", str(tmp_path / "t.csv")]) == 2
    refused_field(capsys, run_dir, name, line, field)
    assert files_under(out) == before and not (tmp_path / "t.csv").exists()
