"""A run's records read back typed (icrl.records.read): the lines of a finished fake-backend run
as their types, and every wrong field of train.jsonl, test.jsonl or config.json refused in one
line naming the file, the line and the field."""

from __future__ import annotations

import json

import pytest

from helpers import BAD_FIELDS, corrupt_field
from icrl.records import DamagedRecords
from icrl.records.read import read_run
from icrl.records.schema import TestLine, TrainLine


def test_a_finished_run_reads_back_as_its_types(finished):
    _, run_dir, (train, test) = finished
    run = read_run(run_dir)
    assert run.finished and run.damage == "" and run.steps_done == 6 and run.directory == run_dir
    assert all(isinstance(r, TrainLine) for r in run.train) and all(isinstance(r, TestLine) for r in run.test)
    assert [{k: v for k, v in r.as_json().items() if k != "time_s"} for r in run.train] == train
    assert [{k: v for k, v in r.as_json().items() if k != "time_s"} for r in run.test] == test


@pytest.mark.parametrize("name, line, field, value", BAD_FIELDS)
def test_a_wrong_field_is_refused_naming_file_line_and_field(finished, name, line, field, value):
    _, run_dir, _ = finished
    corrupt_field(run_dir, name, line, field, value)
    with pytest.raises(DamagedRecords) as caught:
        read_run(run_dir)
    said = str(caught.value)
    assert said.startswith(f"{run_dir / name} line {line}: field {field!r} is ") and "expected" in said
    assert said.endswith("restore it as the run wrote it, or run the run again (--overwrite)") and "\n" not in said


def test_a_damaged_line_that_parses_is_damage_not_a_refusal(finished):
    """A line that is not JSON (a write cut short, garbage) stays what the records check makes of it."""
    _, run_dir, _ = finished
    with open(run_dir / "test.jsonl", "a") as f:
        f.write("not json\n")
    run = read_run(run_dir)
    assert not run.finished and "test.jsonl line 4 is not JSON" in run.damage and len(run.test) == 3


@pytest.mark.parametrize("section, key, value, said", [
    ("resolved", "steps", "6", "config.json resolved: field 'steps' is '6', expected an integer"),
    ("resolved", "test_steps", [0, "5"], "config.json resolved: field 'test_steps' is [0, '5'], expected a list"),
    ("args", "context_p_keep", "half", "config.json args: field 'context_p_keep' is 'half', expected a number"),
    ("dataset", "labels", "a b", "config.json dataset: field 'labels' is 'a b', expected a list of texts"),
    ("test_set", "answers", [1, 2], "config.json test_set: field 'answers' is [1, 2], expected a list of texts"),
    ("backend", "model_name", 5, "config.json backend: field 'model_name' is 5, expected text"),
    ("environment", "packages", "x", "config.json environment: field 'packages' is 'x', expected an object"),
    ("runtime_args", "timeout", "x", "config.json runtime_args: field 'timeout' is 'x', expected a number"),
    (None, "exemplars", 3, "config.json: field 'exemplars' is 3, expected a list of objects of exactly id"),
    (None, "train_example_ids", ["x"], "config.json: field 'train_example_ids' is ['x'], expected a list of"),
    (None, "format_version", "1", "config.json: field 'format_version' is '1', expected an integer"),
    (None, "extended", "x", "config.json: field 'extended' is 'x', expected a list"),
])
def test_a_wrong_section_of_config_json_is_refused(finished, section, key, value, said):
    """Every field config.json's schema names, whether a reader reads it or not."""
    _, run_dir, _ = finished
    config = json.loads((run_dir / "config.json").read_text())
    (config[section] if section else config)[key] = value
    (run_dir / "config.json").write_text(json.dumps(config))
    with pytest.raises(DamagedRecords) as caught:
        read_run(run_dir)
    assert said in str(caught.value) and "\n" not in str(caught.value)


def test_a_run_without_config_has_no_lines(tmp_path):
    (tmp_path / "train.jsonl").write_text('{"step": "x"}\n')
    run = read_run(tmp_path)
    assert run.config is None and run.train == [] and "no config.json" in run.damage


@pytest.mark.parametrize("key, value, said", [
    ("final_test_accuracy", "high", "field 'final_test_accuracy' is 'high', expected a number or null"),
    ("test_accuracy", {"0": "x"}, "field 'test_accuracy' is {'0': 'x'}, expected"),
])
def test_a_wrong_field_of_results_json_is_refused(finished, key, value, said):
    _, run_dir, _ = finished
    results = json.loads((run_dir / "results.json").read_text())
    assert read_run(run_dir).results == results
    (run_dir / "results.json").write_text(json.dumps({**results, key: value}))
    with pytest.raises(DamagedRecords) as caught:
        read_run(run_dir)
    assert f"{run_dir / 'results.json'}: {said}" in str(caught.value) and "\n" not in str(caught.value)


def test_a_results_json_that_is_not_json_is_none(finished):
    """results.json only sums up the records (a resumed run rewrites it): unreadable, it is left out."""
    _, run_dir, _ = finished
    (run_dir / "results.json").write_text("{cut short")
    run = read_run(run_dir)
    assert run.results == {} and run.finished
