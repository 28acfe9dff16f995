"""run_draw_plots.py's command line (icrl.cli.figures): a refusal is one line and leaves no folder."""

from __future__ import annotations

import pytest

from helpers import BAD_FIELDS, corrupt_field, files_under, one_error_line, reader_verdict, resume_verdict


def test_a_plots_refusal_leaves_no_empty_folder(in_tmp_path, tmp_path, capsys):
    from icrl.cli.figures import main as plots_main

    (tmp_path / "empty").mkdir()
    assert plots_main(["--data_dir", "empty"]) == 2  # default --out_dir plots
    assert "no runs" in one_error_line(capsys)
    assert plots_main(["--data_dir", "empty", "--out_dir", "a/b/figures"]) == 2
    one_error_line(capsys)
    assert files_under(tmp_path) == ["empty"]
    (tmp_path / "a").write_text("x")
    assert plots_main(["--data_dir", "empty", "--out_dir", "a/b/figures"]) == 2
    assert "--out_dir" in one_error_line(capsys)  # checked before any run is read



@pytest.mark.parametrize("config", ['{"format_version": 1}', '{"format_version": 1, "args": {}}'])
def test_a_folder_whose_only_config_json_is_not_a_runs_is_one_line_and_nothing_is_written(tmp_path, capsys, config):
    """A config.json that says it is a run's but holds none of its settings: no summary row of
    invented values."""
    from icrl.cli.figures import main as plots_main

    (tmp_path / "data" / "x").mkdir(parents=True)
    (tmp_path / "data" / "x" / "config.json").write_text(config)
    assert plots_main(["--data_dir", str(tmp_path / "data"), "--out_dir", str(tmp_path / "plots")]) == 2
    line = one_error_line(capsys)
    assert f"{tmp_path / 'data' / 'x' / 'config.json'}: field " in line and "is missing" in line, line
    assert not (tmp_path / "plots").exists()


@pytest.mark.parametrize("name, line, field, value", BAD_FIELDS)
def test_a_wrong_record_field_gets_the_resumes_verdict(finished, tmp_path, capsys, name, line, field, value):
    """A run a resume refuses is refused in the same line before summary.csv or a figure is
    written; one it repairs is drawn repaired and said to be damaged (icrl.run.readback)."""
    from icrl.cli.figures import main as plots_main

    out, run_dir, _ = finished
    corrupt_field(run_dir, name, line, field, value)
    expected = resume_verdict(out, capsys)
    said = reader_verdict(capsys, plots_main(["--data_dir", str(out), "--out_dir", str(tmp_path / "plots"),
                                              "--only", "beyond_paper", "--other_runs"]), expected)
    assert (tmp_path / "plots").exists() == (expected is None)
    assert expected is not None or f"damaged run {run_dir} (not counted as finished)" in said


def test_the_script_refuses_a_wrong_field_in_one_line_without_a_traceback(finished, tmp_path):
    import subprocess
    import sys

    from helpers import REPO, SUBPROCESS_ENV

    out, run_dir, _ = finished
    corrupt_field(run_dir, "train.jsonl", 3, "context", "0 1")
    done = subprocess.run([sys.executable, str(REPO / "run_draw_plots.py"), "--data_dir", str(out), "--out_dir",
                           str(tmp_path / "plots")], capture_output=True, text=True, env=SUBPROCESS_ENV, timeout=300)
    assert done.returncode == 2 and done.stdout == "", done.stdout
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert f"{run_dir / 'train.jsonl'} line 3 (step 2) has the context '0 1'" in done.stderr
    assert not (tmp_path / "plots").exists()
