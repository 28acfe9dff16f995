"""run_report.py's command line: one self-contained page, each run's viewer beside it, and
refusals in one line (exit 2, nothing written)."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import BAD_FIELDS, TOY, corrupt_field, files_under, one_error_line, reader_verdict, resume_verdict
from icrl.cli.report import main
from icrl.cli.run import main as run


@pytest.fixture
def runs(tmp_path):
    out = tmp_path / "data"
    assert run([*TOY, "--test_k", "8", "--max_context_examples", "0", "--icrl", "--output_dir", str(out)]) == 0
    assert run([*TOY, "--test_k", "8", "--context_strategy_name", "random_biased_end", "--icrl", "--train_k", "6",
                "--test_every", "3", "--max_context_examples", "2", "--output_dir", str(out)]) == 0
    return out


def test_the_report_and_its_viewer_pages(runs, capsys):
    assert main([str(runs)]) == 0
    out = capsys.readouterr().out
    assert "2 runs in 2 configurations" in out and "KB" in out
    assert (runs / "report.html").is_file()
    assert len(list((runs / "viewers").rglob("viewer.html"))) == 2


def test_without_viewer_pages(runs, tmp_path, capsys):
    assert main([str(runs), "--out", str(tmp_path / "r.html"), "--no-viewers"]) == 0
    assert (tmp_path / "r.html").is_file() and not (tmp_path / "viewers").exists()


@pytest.mark.parametrize("argv, needle", [(["/no/such/folder"], "is not a readable folder"),
                                          (["{empty}"], "no runs under"),
                                          (["{runs}", "--filter", "task=none_such"], "matches --filter"),
                                          (["{runs}", "--bogus"], "unrecognized arguments")])
def test_a_refusal_is_one_line_and_writes_nothing(argv, needle, runs, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    argv = [a.format(empty=tmp_path / "empty", runs=runs) for a in argv]
    assert main([*argv, "--out", str(tmp_path / "r.html")]) == 2
    assert needle in one_error_line(capsys)
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize("script", ["run_report.py", "run_draw_plots.py"])
def test_a_folder_that_cannot_be_read_is_said_so_not_no_runs(runs, script):
    """A data folder whose entries cannot be listed (mode 0): 'cannot read', not 'no runs'."""
    import os
    import shutil
    import subprocess
    import sys
    import tempfile

    from helpers import REPO, SUBPROCESS_ENV

    prefix = []
    if os.geteuid() == 0:  # root reads any folder: run as nobody
        if not shutil.which("setpriv"):
            pytest.skip("as root every folder is readable, and setpriv (to drop to nobody) is missing")
        prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    home = Path(tempfile.mkdtemp(prefix="icrl-unreadable-"))  # pytest's own tmp is closed to other users
    try:
        home.chmod(0o777)
        shutil.copytree(runs, home / "data")
        (home / "data").chmod(0)
        where = ["--data_dir", "data", "--out_dir", "plots"] if script == "run_draw_plots.py" else ["data", "--out",
                                                                                                  "r.html"]
        done = subprocess.run([*prefix, sys.executable, str(REPO / script), *where], cwd=home, capture_output=True,
                              text=True, timeout=300, env=SUBPROCESS_ENV)
        (home / "data").chmod(0o755)
        left = sorted(p.name for p in home.iterdir())
    finally:
        shutil.rmtree(home, ignore_errors=True)
    if prefix and "Permission denied" in done.stderr and "Traceback" in done.stderr:
        pytest.skip(f"user nobody cannot run the package from this checkout: {done.stderr.splitlines()[-1]}")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("error: cannot read the folder 'data' (Permission denied)"), done.stderr
    assert left == ["data"]


@pytest.mark.parametrize("name, line, field, value", BAD_FIELDS)
def test_a_wrong_record_field_gets_the_resumes_verdict(finished, capsys, name, line, field, value):
    """Refused in the resume's line with no report written, or reported repaired and damaged."""
    out, run_dir, _ = finished
    corrupt_field(run_dir, name, line, field, value)
    before = files_under(out)
    expected = resume_verdict(out, capsys)
    reader_verdict(capsys, main([str(out)]), expected)  # the report and its viewer pages go into the data folder
    assert (files_under(out) == before) == (expected is not None)
    if expected is None:
        assert f"damaged run {run_dir}" in (out / "report.html").read_text()


def test_assets_beside_the_runs_are_no_run_and_no_row(runs, capsys):
    """``make gpu-assets`` puts a model's config.json under data/: no warning, no row for it."""
    import json

    from helpers import gpu_assets

    gpu_assets(runs)
    assert main([str(runs), "--no-viewers"]) == 0
    out = capsys.readouterr().out
    assert "damaged" not in out and "gpu-assets" not in out and "2 runs in 2 configurations" in out
    page = (runs / "report.html").read_text()
    assert "gpu-assets" not in page and json.dumps("nan") not in page


def test_a_wrong_results_json_is_not_what_the_report_shows(finished, capsys):
    """results.json sums up the records (a resume rewrites it): the report shows what the records
    say, whatever results.json holds."""
    import json

    out, run_dir, _ = finished
    results = json.loads((run_dir / "results.json").read_text())
    (run_dir / "results.json").write_text(json.dumps({**results, "final_test_accuracy": "high"}))
    from icrl.analysis.results import Results

    assert main([str(out)]) == 0
    assert Results(out).runs.iloc[0]["final_test_accuracy"] == results["final_test_accuracy"]
