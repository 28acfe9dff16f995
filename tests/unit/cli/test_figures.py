"""run_draw_plots.py's command line (icrl.cli.figures): a refusal is one line and leaves no folder."""

from __future__ import annotations

import pytest

from helpers import BAD_FIELDS, corrupt_field, files_under, one_error_line, refused_field


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
    assert f"{tmp_path / 'data' / 'x' / 'config.json'} has no " in line and "move it out of the folder" in line, line
    assert not (tmp_path / "plots").exists()


@pytest.mark.parametrize("name, line, field, value", BAD_FIELDS)
def test_a_wrong_record_field_is_one_line_and_nothing_is_drawn(finished, tmp_path, capsys, name, line, field, value):
    """Every line is parsed before summary.csv or a figure is written (records.read)."""
    from icrl.cli.figures import main as plots_main

    out, run_dir, _ = finished
    corrupt_field(run_dir, name, line, field, value)
    assert plots_main(["--data_dir", str(out), "--out_dir", str(tmp_path / "plots")]) == 2
    refused_field(capsys, run_dir, name, line, field)
    assert not (tmp_path / "plots").exists()


def test_the_script_refuses_a_wrong_field_in_one_line_without_a_traceback(finished, tmp_path):
    import subprocess
    import sys

    from helpers import REPO, SUBPROCESS_ENV

    out, run_dir, _ = finished
    corrupt_field(run_dir, "train.jsonl", 3, "feedback", "yes")
    done = subprocess.run([sys.executable, str(REPO / "run_draw_plots.py"), "--data_dir", str(out), "--out_dir",
                           str(tmp_path / "plots")], capture_output=True, text=True, env=SUBPROCESS_ENV, timeout=300)
    assert done.returncode == 2 and done.stdout == "", done.stdout
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert f"{run_dir / 'train.jsonl'} line 3: field 'feedback' is 'yes', expected a number or null" in done.stderr
    assert not (tmp_path / "plots").exists()
