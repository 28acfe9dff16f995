"""The records' schema (icrl/records/schema.py) against the model calls the method declares
(icrl.method.calls): each declared call's answer is its own top-level field of a training line,
written only when set, read back into ``TrainLine.answers``; a call that a reward or strategy
registered outside the package is recorded and read back like a built-in's."""

from __future__ import annotations

from dataclasses import fields

import pytest

from icrl.method.calls import ModelCall
from icrl.method.rewards import REWARDS, Reward, register_reward
from icrl.errors import DamagedRecords
from icrl.records.schema import OPTIONAL_TRAIN, TrainLine, train_line_fields
from icrl.run.assemble import all_calls


def line(**answers) -> TrainLine:
    return TrainLine(0, 1, "Q", "a", 1, "a", 1, 0, [], {}, **train_line_fields(answers))


def test_a_calls_answer_is_written_only_when_set_and_read_back():
    assert not set(line().as_json()) & {call.field for call in all_calls()}
    for call in all_calls():
        if not call.field:
            continue
        answered = line(**{call.field: "yes"})
        record = answered.as_json()
        assert record[call.field] == "yes" and list(record)[-2:] == [call.field, "time_s"]
        assert "answers" not in record
        assert call.answered(answered) and TrainLine.from_json(record) == answered


def test_answers_keep_their_order_before_the_time_and_the_usage():
    record = line(reflection="be brief", judge="no").as_json()
    assert list(record)[-3:] == ["reflection", "judge", "time_s"]
    assert OPTIONAL_TRAIN == ("reset", "explored", "reward", "reasoning", "reasoning_tokens", "usage")
    assert [f.name for f in fields(TrainLine)][-3:] == ["answers", "time_s", "usage"]


@pytest.mark.parametrize("change, said", [
    ({"judge": 3}, "field 'judge' is 3, expected text or null"),
    ({"reflection": ["a"]}, "field 'reflection' is ['a'], expected text or null"),
    ({"answers": {"judge": "yes"}}, "field 'answers' is not a field of TrainLine"),
    ({"critique": "x"}, "field 'critique' is not a field of TrainLine (step, example_id, "),
])
def test_an_answer_that_does_not_fit_is_one_line(change, said):
    record = {**line().as_json(), **change}
    with pytest.raises(DamagedRecords) as caught:
        TrainLine.from_json(record, "run/train.jsonl line 2")
    assert str(caught.value).startswith(f"run/train.jsonl line 2: {said}")


def test_a_null_answer_reads_as_no_answer():
    record = {**line().as_json(), "judge": None}
    assert TrainLine.from_json(record).answers == {}


def test_a_call_declared_outside_the_package_is_recorded_and_read_back():
    """A reward registered as a plugin registers it: its call's field is a field of the line."""
    critique = ModelCall("critique", field="critique", option=None, summary="critic calls")

    @register_reward
    class Critic(Reward):
        name = "test_schema_critic"
        calls = (critique,)

    try:
        assert critique in all_calls()
        record = line(critique="too long").as_json()
        assert record["critique"] == "too long"
        assert TrainLine.from_json(record).answers == {"critique": "too long"}
    finally:
        REWARDS.unregister("test_schema_critic")
    with pytest.raises(DamagedRecords, match="field 'critique' is not a field of TrainLine"):
        TrainLine.from_json(record)
