"""A finished run is trusted only when its records check out (icrl.records.log.read_log, then the
records check of icrl.run.rebuild): damage is repaired to exactly the records an uninterrupted run
writes, or refused in one line; every tool reads the same verdict."""

from __future__ import annotations

import json

import pytest

from helpers import lines_of, tiny_argv, train_test
from icrl.cli.run import main
from icrl.records import DamagedRecords, read_log


@pytest.mark.parametrize("damage", ["delete_test", "cut_test", "garbage_mid_test", "cut_train"])
def test_damaged_finished_run_is_repaired_to_the_same_records(finished, capsys, damage):
    out, run_dir, before = finished
    test_file, train_file = run_dir / "test.jsonl", run_dir / "train.jsonl"
    if damage == "delete_test":
        test_file.unlink()
    elif damage == "cut_test":
        lines = lines_of(test_file)
        test_file.write_text("".join(lines[:-1]) + lines[-1][:20])
    elif damage == "garbage_mid_test":
        lines = lines_of(test_file)
        test_file.write_text(lines[0] + "garbage\n" + "".join(lines[2:]))  # step 2 gone, step 5 after it
    else:
        lines = lines_of(train_file)
        train_file.write_text("".join(lines[:-1]) + lines[-1][:30])
    state = read_log(run_dir)
    assert not state.finished and state.problems
    from icrl.analysis.results import Results

    results = Results(out)
    assert not results.runs["finished"].any() and any("damaged run" in n for n in results.notes)
    capsys.readouterr()
    assert main(tiny_argv(out)) == 0
    captured = capsys.readouterr()
    assert "already finished" not in captured.out and "resuming" in captured.err
    assert train_test(run_dir) == before
    assert read_log(run_dir).finished
    summary = json.loads((run_dir / "results.json").read_text())
    assert summary["finished"] and summary["test_accuracy"].keys() == {"0", "2", "5"}


def test_garbage_appended_to_train_of_a_finished_run_is_not_finished_and_is_one_line(finished, capsys):
    out, run_dir, _ = finished
    with open(run_dir / "train.jsonl", "a") as f:
        f.write('{"step": 0, "example_id": 1}\n')  # a duplicated / renumbered line
    assert main(tiny_argv(out)) == 2
    err = capsys.readouterr().err.strip()
    assert "train.jsonl line 7" in err and "\n" not in err
    from icrl.analysis.results import Results

    with pytest.raises(DamagedRecords, match=r"train.jsonl line 7 repeats step 0 \(line 1\) with other content; "):
        Results(out)  # the readers refuse the run where a resume refuses it


def test_token_counter_skips_a_damaged_run_with_a_note(finished, capsys):
    from icrl.cli.tokens import main as count_main

    out, run_dir, _ = finished
    (run_dir / "test.jsonl").unlink()
    assert count_main(["--data_dir", str(out), "--tokenizer", "smollm2-135m"]) == 2
    captured = capsys.readouterr()
    assert "damaged run" in captured.out and "no finished run" in captured.err


def test_bad_records_and_outputs_are_one_line_errors(finished, tmp_path, capsys, monkeypatch):
    out, run_dir, _ = finished
    config = (run_dir / "config.json").read_text()
    for bad in ("", "{not json"):
        (run_dir / "config.json").write_text(bad)
        assert main(tiny_argv(out)) == 2
        err = capsys.readouterr().err.strip()
        assert "config.json" in err and "--overwrite" in err and "\n" not in err
    (run_dir / "config.json").write_text(config)
    # results.json is a function of the records: rewritten, never a traceback
    (run_dir / "results.json").write_text("")
    assert main(tiny_argv(out)) == 0
    assert "already finished" in capsys.readouterr().out
    assert json.loads((run_dir / "results.json").read_text())["finished"]
    # junk in the middle of train.jsonl
    lines = lines_of(run_dir / "train.jsonl")
    (run_dir / "train.jsonl").write_text(lines[0] + "junk\n" + "".join(lines[1:]))
    assert main(tiny_argv(out)) == 2
    err = capsys.readouterr().err.strip()
    assert "train.jsonl line 2 is not JSON" in err and "\n" not in err
    # an --output_dir that is a file: refused before any model load
    import icrl.backends

    monkeypatch.setattr(icrl.backends, "load_backend", lambda *a, **k: pytest.fail("loaded a model"))
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    assert main(tiny_argv(a_file)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: cannot write the run directory") and "\n" not in err


def test_finished_run_is_reported_before_the_data_load(finished, tmp_path, monkeypatch, capsys):
    out, run_dir, _ = finished
    monkeypatch.setenv("ICRL_DATA_DIR", str(tmp_path / "no_data_here"))
    assert main(tiny_argv(out)) == 0
    assert "already finished" in capsys.readouterr().out


def test_a_finished_run_with_damaged_records_is_not_reported_without_its_data(finished, monkeypatch, capsys):
    """Without the data the records cannot be rebuilt: a run whose records config.json alone
    shows damaged (an accuracy its prediction contradicts) is not reported as finished; the
    data's error is said."""
    out, run_dir, _ = finished
    lines = lines_of(run_dir / "train.jsonl")
    record = json.loads(lines[1])
    record["accuracy"] = 1 - record["accuracy"]
    (run_dir / "train.jsonl").write_text(lines[0] + json.dumps(record) + "\n" + "".join(lines[2:]))
    import icrl.run.experiment
    from icrl.errors import UsageError

    def no_data(*args, **kwargs):
        raise UsageError("the task's data file is gone")

    monkeypatch.setattr(icrl.run.experiment, "load_data", no_data)
    assert main(tiny_argv(out)) == 2
    captured = capsys.readouterr()
    assert "already finished" not in captured.out and "the task's data file is gone" in captured.err
    (run_dir / "train.jsonl").write_text("".join(lines))  # the same run, sound: reported from its records
    assert main(tiny_argv(out)) == 0
    assert "already finished" in capsys.readouterr().out


def test_what_config_json_alone_shows_wrong_is_named_and_a_sound_run_has_nothing(finished):
    """record_problems (a finished run whose data cannot be loaded): an accuracy that its
    prediction and answer contradict, a test accuracy its predictions contradict, a prediction
    that is no label; nothing for the records as written."""
    import dataclasses

    from icrl.records.log import record_problems

    out, run_dir, _ = finished
    log = read_log(run_dir)
    train, test, found = log.typed()
    assert found == [] and record_problems(log.config, train, test) == []
    edited_train = list(train)
    edited_train[1] = dataclasses.replace(train[1], accuracy=1 - train[1].accuracy)
    edited_train[2] = dataclasses.replace(train[2], prediction="no such label")
    edited_test = list(test)
    edited_test[0] = dataclasses.replace(test[0], accuracy=0.123)
    edited_test[1] = dataclasses.replace(test[1], predictions=["no such label"] * len(test[1].predictions))
    found = record_problems(log.config, edited_train, edited_test)
    assert [f.split("'s")[0] for f in found] == ["training step 1", "training step 2", "test step 0", "test step 2"]
    assert "is not a label" in found[1] and "are not one label per test example" in found[3]
