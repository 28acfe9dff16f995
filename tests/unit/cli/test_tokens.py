"""run_count_tokens.py's command line (icrl.cli.tokens): bad flags are one line, exit 2."""

from __future__ import annotations

import pytest

from helpers import BAD_FIELDS, corrupt_field, files_under, one_error_line, resume_verdict


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
def test_a_wrong_record_field_gets_the_resumes_verdict(finished, tmp_path, capsys, name, line, field, value):
    """A run a resume refuses is refused in the same line before any run is counted; one it
    repairs is no finished run: left out of the counts with a note. No token_counts file either way."""
    from icrl.cli.tokens import main as count_main

    out, run_dir, _ = finished
    corrupt_field(run_dir, name, line, field, value)
    before = files_under(out)
    expected = resume_verdict(out, capsys)
    code = count_main(["--data_dir", str(out), "--tokenizer", "smollm2-135m", "--csv", str(tmp_path / "t.csv")])
    captured = capsys.readouterr()
    if expected is not None:
        assert code == 2 and captured.err.strip() == expected
    else:
        assert code == 2 and f"damaged run {run_dir}" in captured.out
        assert captured.err.strip().endswith("matches the filters (1 damaged: run_experiment.py with the run's flags "
                                             "repairs it)"), captured.err
    assert files_under(out) == before and not (tmp_path / "t.csv").exists()
