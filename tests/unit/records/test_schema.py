"""The records' schema (icrl/records/schema.py) against the model calls the method declares
(icrl.method.calls): each declared call's answer has its own optional text field on a training
line, written only when set, and no such field outlives its declaration."""

from __future__ import annotations

from dataclasses import fields
from typing import Optional, get_type_hints

from icrl.records.schema import OPTIONAL_TRAIN, TrainLine
from icrl.run.assemble import all_calls

# The optional fields of the flags beyond the paper that are not a model call's answer.
FLAGS = ("reset", "explored", "reward", "reasoning", "reasoning_tokens")


def test_every_declared_calls_field_is_an_optional_text_field_of_a_training_line():
    declared = [call.field for call in all_calls() if call.field]
    assert declared, "no call declares a record field"
    hints = get_type_hints(TrainLine)
    defaults = {f.name: f.default for f in fields(TrainLine)}
    for name in declared:
        assert hints[name] == Optional[str] and defaults[name] is None, name
    names = [f.name for f in fields(TrainLine)]
    call_fields = [n for n in names if n in declared]
    # no optional field beyond a flag's, a call's, and the usage an API reports (after the time)
    assert OPTIONAL_TRAIN == (*FLAGS, *call_fields, "usage")
    assert names[-2:] == ["time_s", "usage"] and names[-2 - len(call_fields):-2] == call_fields


def test_a_calls_answer_is_written_only_when_set_and_read_back():
    line = TrainLine(0, 1, "Q", "a", 1, "a", 1, 0, [], {})
    assert not set(line.as_json()) & {call.field for call in all_calls()}
    for call in all_calls():
        answered = TrainLine(0, 1, "Q", "a", 1, "a", 1, 0, [], {}, **{call.field: "yes"})
        record = answered.as_json()
        assert record[call.field] == "yes" and list(record)[-2:] == [call.field, "time_s"]
        assert call.answered(record) and TrainLine.from_json(record) == answered
