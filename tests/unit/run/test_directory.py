"""The run directory (icrl.run.directory): a run that fails before its first step leaves no
records and no lock behind."""

from __future__ import annotations

import json

from helpers import tiny_argv, tiny_run_dir
from icrl.cli.run import main
from icrl.records import find_runs, inspect_run


def test_run_failing_before_its_first_step_does_not_block_the_corrected_command(tmp_path, capsys):
    assert main(tiny_argv(tmp_path, "--max_model_len", "60")) == 2  # the prompts do not fit
    assert "tokens" in capsys.readouterr().err
    assert find_runs(tmp_path) == [] and not any(tmp_path.iterdir())
    run_dir = tiny_run_dir(tmp_path)
    run_dir.mkdir(parents=True)  # what an older version left: a config of other arguments, no step
    (run_dir / "config.json").write_text(json.dumps({"args": {"test_k": 99}}))
    (run_dir / "log.txt").write_text("failed\n")
    assert main(tiny_argv(tmp_path)) == 0
    assert inspect_run(run_dir).finished

