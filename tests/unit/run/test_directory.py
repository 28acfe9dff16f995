"""The run directory (icrl.run.directory): a run that fails before its first step leaves no
records and no lock behind."""

from __future__ import annotations

import json
import os

import pytest

from helpers import tiny_argv, tiny_run_dir
from icrl.cli.run import main
from icrl.records import find_runs, read_log


def test_run_failing_before_its_first_step_does_not_block_the_corrected_command(tmp_path, capsys):
    assert main(tiny_argv(tmp_path, "--max_model_len", "60")) == 2  # the prompts do not fit
    assert "tokens" in capsys.readouterr().err
    assert find_runs(tmp_path) == [] and not any(tmp_path.iterdir())
    run_dir = tiny_run_dir(tmp_path)
    run_dir.mkdir(parents=True)  # what an older version left: a config of other arguments, no step
    (run_dir / "config.json").write_text(json.dumps({"args": {"test_k": 99}}))
    (run_dir / "log.txt").write_text("failed\n")
    assert main(tiny_argv(tmp_path)) == 0
    assert read_log(run_dir).finished



def test_a_claimed_directory_is_locked_and_one_that_gets_no_step_is_removed_again(tmp_path):
    from icrl.errors import UsageError
    from icrl.records import RunRecords
    from icrl.infra.lock import Locked
    from icrl.run.directory import RunDirectory

    run = tmp_path / "out" / "model" / "task" / "run"
    first = RunDirectory(RunRecords(run), str(tmp_path / "out"))
    first.claim()
    assert run.is_dir() and first.lock.held
    second = RunDirectory(RunRecords(run), str(tmp_path / "out"))
    with pytest.raises(Locked) as refused:  # a UsageError naming the holder
        second.claim()
    assert isinstance(refused.value, UsageError) and str(os.getpid()) in str(refused.value)
    first.release()
    assert not (tmp_path / "out").exists()  # created by this claim and no step written: gone again


def test_a_run_folder_that_cannot_be_made_leaves_no_empty_folder_above_it(tmp_path, capsys):
    """A folder name longer than the file system takes (a long --model_name): one line, and the
    folders made on the way down are removed again."""
    argv = tiny_argv(tmp_path / "out", "--model_name", "m" * 300)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: cannot write the run directory") and "\n" not in err, err
    assert list(tmp_path.iterdir()) == []


def test_a_directory_with_a_step_is_kept(tmp_path):
    from icrl.records import RunRecords
    from icrl.records.schema import TrainLine
    from icrl.run.directory import RunDirectory

    run = tmp_path / "out" / "run"
    directory = RunDirectory(RunRecords(run), str(tmp_path / "out"))
    directory.claim()
    directory.records.create({"args": {}})
    directory.records.append_train(TrainLine(0, 1, "Q", "a", 1, "a", 1, 0, [], {}))
    directory.release()
    assert (run / "train.jsonl").is_file() and (run / "config.json").is_file()
    assert not directory.lock.held
