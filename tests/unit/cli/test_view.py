"""run_view.py's command line: its size line reads as a person would write it, and its refusals
start with "error:" like every other script's (one line, exit 2)."""

from __future__ import annotations

import re

import pytest

from helpers import BAD_FIELDS, corrupt_field, files_under, one_error_line, reader_verdict, resume_verdict
from icrl.cli.view import file_size, main


@pytest.mark.parametrize("size, text", [(0, "0 bytes"), (999, "999 bytes"), (35_400, "35 KB"),
                                        (999_499, "999 KB"), (2_345_678, "2.3 MB")])
def test_a_size_is_written_in_its_unit(size, text):
    assert file_size(size) == text


def test_a_small_viewer_says_its_size_in_kb(finished, tmp_path, capsys):
    out_dir, _, _ = finished
    assert main([str(out_dir), "--out", str(tmp_path / "v.html")]) == 0
    line = capsys.readouterr().out
    size = (tmp_path / "v.html").stat().st_size
    assert size < 1_000_000 and f"{size / 1000:.0f} KB" in line and "0.0 MB" not in line, line


@pytest.mark.parametrize("argv", [["/no/such/folder"], ["--bogus", "."], []])
def test_a_refusal_is_one_error_line(argv, tmp_path, capsys):
    assert main(argv) == 2
    assert not re.match(r"^run_view\.py: ", one_error_line(capsys))


def test_a_folder_without_runs_is_refused(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    assert "no runs under" in one_error_line(capsys)


@pytest.mark.parametrize("name, line, field, value", BAD_FIELDS)
def test_a_wrong_record_field_gets_the_resumes_verdict(finished, tmp_path, capsys, name, line, field, value):
    """Refused in the resume's line with no page written, or shown repaired and damaged."""
    out, run_dir, _ = finished
    corrupt_field(run_dir, name, line, field, value)
    before = files_under(out)
    expected = resume_verdict(out, capsys)
    reader_verdict(capsys, main([str(out), "--out", str(tmp_path / "v.html")]), expected)
    assert (tmp_path / "v.html").exists() == (expected is None) and files_under(out) == before
    if expected is not None:
        assert main([str(out)]) == 2  # the default page, in the data folder: not written either
        assert files_under(out) == before
