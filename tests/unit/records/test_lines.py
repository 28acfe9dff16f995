"""The record files sorted out against a plan (icrl.records.lines): the pass of the one reader
(records.log.read_log) that the readers and a resume share, so what a figure reads and what a
resume continues from are the same steps."""

from __future__ import annotations

import json

import pytest

from helpers import run_config
from icrl.records import read_log
from icrl.records.lines import sort_out

STEPS, TEST_STEPS, IDS = 4, [0, 3], [11, 12, 13, 14]


def train_row(step: int, **extra) -> dict:
    return {"step": step, "example_id": IDS[step], "prediction": "a", **extra}


def eval_row(step: int, **extra) -> dict:
    return {"step": step, "accuracy": 0.5, "predictions": ["a", "b"], **extra}


def write(directory, train: list, test: list) -> None:
    for name, rows in (("train.jsonl", train), ("test.jsonl", test)):
        (directory / name).write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n"
                                              for row in rows))


def sorted_out(directory, mode="icrl"):
    return sort_out(directory, STEPS, TEST_STEPS, mode, IDS, 2)


def test_sound_files_are_kept_as_they_are(tmp_path):
    write(tmp_path, [train_row(s) for s in range(4)], [eval_row(0), eval_row(3)])
    lines = sorted_out(tmp_path)
    assert [k.number for k in lines.train] == [1, 2, 3, 4] and sorted(lines.test) == [0, 3]
    assert lines.refusal is None and lines.notes == [] and not lines.rewrite_train and not lines.rewrite_test


def test_a_line_cut_short_by_a_kill_is_dropped_without_a_note(tmp_path):
    write(tmp_path, [train_row(s) for s in range(3)], [eval_row(0)])
    with open(tmp_path / "train.jsonl", "a") as f:
        f.write('{"step": 3, "exa')
    lines = sorted_out(tmp_path)
    assert len(lines.train) == 3 and lines.notes == [] and lines.cut_train and lines.rewrite_train


@pytest.mark.parametrize("last", ["junk", '{"step": 3', {"step": "three"}, train_row(3, example_id=99)])
def test_a_bad_last_training_line_is_dropped_and_its_step_recomputed(tmp_path, last):
    write(tmp_path, [train_row(s) for s in range(3)] + [last], [eval_row(0)])
    lines = sorted_out(tmp_path)
    assert len(lines.train) == 3 and lines.refusal is None and lines.rewrite_train
    assert lines.notes[0].startswith("train.jsonl line 4 ") and lines.notes[0].endswith("its step is recomputed")


@pytest.mark.parametrize("rows, line, said", [
    ([train_row(0), '"junk"', train_row(1)], 2, "is not a training step"),
    ([train_row(0), '{"step":', train_row(1)], 2, "is not JSON"),
    ([train_row(0), train_row(1, example_id=99), train_row(2)], 2, "is example 99, and step 1 of this run is "
                                                                      "example 12"),
    ([train_row(0), train_row(1), train_row(1, prediction="b"), train_row(2)], 3,
     "repeats step 1 (line 2) with other content"),
    ([train_row(0), train_row(2), train_row(3)], 2, "is step 2, and no line is step 1"),
])
def test_a_training_line_later_steps_depend_on_is_refused_at_that_line(tmp_path, rows, line, said):
    write(tmp_path, rows, [eval_row(0)])
    lines = sorted_out(tmp_path)
    assert lines.refusal is not None and lines.refusal.number == line and lines.refusal.kind == "line"
    assert said in str(lines.refusal) and str(lines.refusal).startswith(f"train.jsonl line {line} ")
    assert [k.line.step for k in lines.train] == list(range(line - 1))


def test_a_step_beyond_the_plan_and_a_zero_shot_training_line_are_refusals_of_their_own(tmp_path):
    write(tmp_path, [train_row(s) for s in range(4)] + [{"step": 4, "example_id": 15}], [])
    assert sorted_out(tmp_path).refusal.kind == "beyond_plan"
    write(tmp_path, [{"step": 0}], [eval_row(0)])
    lines = sorted_out(tmp_path, mode="zero_shot")
    assert lines.refusal.kind == "zero_shot" and sorted(lines.test) == [0]


def test_repeated_and_swapped_training_lines_are_dropped_and_sorted(tmp_path):
    write(tmp_path, [train_row(0), train_row(2), train_row(1), train_row(1), train_row(3)], [])
    lines = sorted_out(tmp_path)
    assert [k.line.step for k in lines.train] == [0, 1, 2, 3] and lines.refusal is None
    assert lines.notes == ["train.jsonl line 4 is a repeat of line 3: dropped",
                           "train.jsonl's lines out of step order (sorted)"]


def test_test_lines_stand_alone(tmp_path):
    write(tmp_path, [train_row(s) for s in range(3)],
          [eval_row(3), "junk", eval_row(1), eval_row(0, predictions=["a"]), eval_row(0), eval_row(0)])
    lines = sorted_out(tmp_path)
    assert sorted(lines.test) == [0] and lines.test[0].number == 5  # step 3 is not completed yet: pending
    assert [k.line.step for k in lines.pending] == [3] and lines.rewrite_test and not lines.rewrite_train
    assert [note.split(" ", 3)[2] for note in lines.test_notes] == ["2", "3", "4", "6"]


def test_the_readers_see_the_steps_a_resume_continues_from(tmp_path):
    """Lines out of order: the readers read every step, sorted, and call the run damaged (a resume
    rewrites the file sorted); not the steps before the first line out of place."""
    (tmp_path / "config.json").write_text(json.dumps({
        **run_config(STEPS, test_answers=["a", "b"]), "train_example_ids": IDS}))
    write(tmp_path, [train_row(1), train_row(0), train_row(2), train_row(3)], [eval_row(0), eval_row(3)])
    state = read_log(tmp_path)
    assert [k.line.step for k in state.lines.train] == [0, 1, 2, 3] and state.complete and not state.finished
    assert state.damage == "train.jsonl's lines out of step order (sorted)"
    assert [k.number for k in sorted_out(tmp_path).train] == [k.number for k in state.lines.train]
