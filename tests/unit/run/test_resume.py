"""Resuming a run (icrl.run.resume, from its records alone): the test set and the arguments are
checked, a lost config.json is refused, --overwrite resumes the run it started."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from helpers import TOY_TASK, lines_of, tiny_argv, tiny_run_dir, train_test
from icrl.cli.run import main
from icrl.records import find_runs, read_jsonl


def test_resume_refuses_a_changed_test_set(tmp_path, capsys):
    task = tmp_path / "task"
    shutil.copytree(Path(TOY_TASK).parent, task)
    words = [str(task / "toy.toml") if w == TOY_TASK else w for w in tiny_argv(tmp_path / "out")]
    assert main(words) == 0
    run_dir = find_runs(tmp_path / "out")[0]
    lines = lines_of(run_dir / "train.jsonl")
    (run_dir / "train.jsonl").write_text("".join(lines[:3]))  # an unfinished run
    test_file = task / "test.csv"
    test_file.write_text(test_file.read_text().replace("Where", "Which"))
    assert main(words) == 2
    err = capsys.readouterr().err
    assert "dataset changed" in err and "--overwrite" in err
    assert len(read_jsonl(run_dir / "train.jsonl")) == 3


def test_deleted_config_is_refused_and_overwrite_resumes_its_own_run(finished, capsys):
    out, run_dir, _ = finished
    assert (run_dir / "config.json").stat().st_mode & 0o044  # readable by colleagues
    config = (run_dir / "config.json").read_text()
    (run_dir / "config.json").unlink()
    assert main(tiny_argv(out)) == 2
    assert "no config.json" in capsys.readouterr().err
    (run_dir / "config.json").write_text(config)
    other = tiny_argv(out, "--overwrite")
    assert main(other) == 0  # starts the run again
    assert json.loads((run_dir / "config.json").read_text())["runtime_args"]["overwrite"]
    replaced = train_test(run_dir)
    lines = lines_of(run_dir / "train.jsonl")
    (run_dir / "train.jsonl").write_text("".join(lines[:4]))  # as if killed after step 3
    capsys.readouterr()
    assert main(other) == 0
    assert "resuming" in capsys.readouterr().err
    assert train_test(run_dir) == replaced



def decision(out, *extra):
    """What the run under ``out`` is for these flags (icrl.run.resume.decide)."""
    from icrl.cli import parse_args
    from icrl.records import RunRecords
    from icrl.run.resume import decide

    config = parse_args(tiny_argv(out, *extra))
    return decide(config, tiny_run_dir(out, *extra), RunRecords(tiny_run_dir(out, *extra)))


def test_what_a_run_is_is_decided_from_its_records_alone(finished):
    """new (no step on disk), resume (steps missing), extend (a larger --train_k), finished."""
    out, run_dir, _ = finished
    assert decision(out).kind == "finished" and decision(out).steps_done == 6
    assert decision(out, "--train_k", "9").kind == "extend" and decision(out, "--train_k", "9").steps == 9
    lines = lines_of(run_dir / "train.jsonl")
    (run_dir / "train.jsonl").write_text("".join(lines[:4]))
    resumed = decision(out)
    assert resumed.kind == "resume" and resumed.resuming and resumed.steps_done == 4
    (run_dir / "train.jsonl").write_text("")
    (run_dir / "test.jsonl").write_text("")
    assert decision(out).kind == "new"


def test_a_resumed_run_equals_an_uninterrupted_one_from_any_step(finished, tmp_path):
    out, run_dir, whole = finished
    for keep in range(6):
        lines = lines_of(run_dir / "train.jsonl")
        (run_dir / "train.jsonl").write_text("".join(lines[:keep]))
        assert main(tiny_argv(out)) == 0
        assert train_test(run_dir) == whole, keep


def test_a_shorter_train_k_is_refused_in_one_line(finished, capsys):
    out, run_dir, whole = finished
    assert main(tiny_argv(out, "--train_k", "4")) == 2
    err = capsys.readouterr().err.strip()
    assert "holds a run of 6 steps" in err and "--train_k 4" in err and "\n" not in err
    assert train_test(run_dir) == whole


@pytest.mark.parametrize("field, value, said", [
    ("args", "x", "config.json: field 'args' is 'x', expected an object"),
    ("dataset", None, "config.json: field 'dataset' is null, expected an object"),
    ("test_set", "x", "config.json: field 'test_set' is 'x', expected an object"),
    ("resolved", [1], "config.json: field 'resolved' is [1], expected an object"),
    ("backend", {"model_name": 5}, "config.json: field 'backend.model_name' is 5, expected text"),
    ("exemplars", 3, "config.json: field 'exemplars' is 3, expected a list"),
])
def test_a_config_json_field_of_the_wrong_type_is_one_line_and_overwrite_replaces_the_run(finished, capsys, field,
                                                                                            value, said):
    """config.json is checked as the readers check it, before anything else reads it."""
    from helpers import files_under, one_error_line

    out, run_dir, (train, test) = finished
    config = json.loads((run_dir / "config.json").read_text())
    config[field] = value
    (run_dir / "config.json").write_text(json.dumps(config))
    before = files_under(out)
    assert main(tiny_argv(out)) == 2
    err = one_error_line(capsys)
    assert said in err and "restore config.json as the run wrote it, or pass --overwrite" in err, err
    assert files_under(out) == before
    assert main(tiny_argv(out, "--overwrite")) == 0
    assert train_test(run_dir) == (train, test)
