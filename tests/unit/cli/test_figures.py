"""run_draw_plots.py's command line (icrl.cli.figures): a refusal is one line and leaves no folder."""

from __future__ import annotations

from helpers import files_under, one_error_line


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

