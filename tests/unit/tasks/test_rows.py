"""A task file's rows (icrl/tasks/rows.py): a bad row is named where it is in the file, also when
``test_ratio`` holds out a shuffled part of it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from icrl.errors import UsageError
from icrl.tasks import load_task

GOOD_ROWS = ["one,x", "two,y", "three,x", "four,y", "five,x", "six,y", "seven,x", "eight,y", "nine,x", "ten,y"]


def task_file(folder: Path, data: str, split: str) -> str:
    (folder / "d.csv").write_text("text,label\n" + data, encoding="utf-8")
    (folder / "t.toml").write_text('prompt_template = "Q: {text}"\nprediction_prefix = "A:"\n[data]\n'
                                   f'train = "d.csv"\n{split}\n[labels]\nnames = ["x", "y"]\n', encoding="utf-8")
    return str(folder / "t.toml")


def bad_label_line(path: str) -> str:
    with pytest.raises(UsageError) as raised:
        load_task(path)
    return str(raised.value)


@pytest.mark.parametrize("split", ['test = "d.csv"', "test_ratio = 0.3\nsplit_seed = 1"])
def test_a_bad_label_is_named_at_its_line_in_the_file(tmp_path, split):
    rows = GOOD_ROWS[:4] + ["five,z"] + GOOD_ROWS[5:]  # data row 4 (from 0), line 6 of the file
    message = bad_label_line(task_file(tmp_path, "\n".join(rows) + "\n", split))
    assert f"{tmp_path / 'd.csv'} line 6: label 'z' is not in [labels]" in message, message


def test_the_held_out_split_really_shuffles_the_rows(tmp_path):
    """Why the line matters: the held-out split's order is not the file's."""
    task = load_task(task_file(tmp_path, "\n".join(GOOD_ROWS) + "\n", "test_ratio = 0.3\nsplit_seed = 1"))
    order = [e.text for e in task.train] + [e.text for e in task.test]
    assert sorted(order) == sorted(r.split(",")[0] for r in GOOD_ROWS) and order != [r.split(",")[0] for r in GOOD_ROWS]


def test_a_quoted_field_over_two_lines_counts_both(tmp_path):
    rows = GOOD_ROWS[:2] + ['"three\nlines",x', "four,z"]
    message = bad_label_line(task_file(tmp_path, "\n".join(rows) + "\n", 'test = "d.csv"'))
    assert "d.csv line 6: label 'z'" in message, message


def test_a_json_lines_file_names_the_line_blank_lines_included(tmp_path):
    lines = [json.dumps({"text": "a", "label": "x"}), "", json.dumps({"text": "b", "label": "q"})]
    (tmp_path / "d.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (tmp_path / "t.toml").write_text('prompt_template = "Q: {text}"\nprediction_prefix = "A:"\n[data]\n'
                                     'train = "d.jsonl"\ntest = "d.jsonl"\n[labels]\nnames = ["x", "y"]\n',
                                     encoding="utf-8")
    assert "d.jsonl line 3: label 'q'" in bad_label_line(str(tmp_path / "t.toml"))
