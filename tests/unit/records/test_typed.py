"""A JSON value against an annotation (icrl.records.typed): what each annotation admits, how a
misfit is said, and the strict parse of a record line into its dataclass."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Union

import pytest

from icrl.records import DamagedRecords
from icrl.records.schema import TestLine, TrainLine
from icrl.records.typed import expected, fits, parse


@pytest.mark.parametrize("value, annotation, ok", [
    (3, int, True), (True, int, False), (3.0, int, False), (3, float, True), (2.5, float, True),
    (False, float, False), ("3", float, False), (None, Optional[str], True), ("x", Optional[str], True),
    (3, Optional[str], False), ([1, 2], List[int], True), ([1, True], List[int], False), ("12", List[int], False),
    ([[0], [1, 2]], List[List[int]], True), ([[0], "1"], List[List[int]], False), ({"a": 0.5}, Dict[str, float], True),
    ({"a": "x"}, Dict[str, float], False), ([], dict, False), ({"k": [1]}, dict, True),
    (4, Union[int, List[int]], True), ([4, 5], Union[int, List[int]], True), ("4", Union[int, List[int]], False), ({"any": None}, Any, True),
    (True, bool, True), (1, bool, False), (float("nan"), float, False), (float("-inf"), Optional[float], False),
    ([1.0, float("inf")], List[float], False), ({"a": float("nan")}, Dict[str, float], False),
])
def test_what_each_annotation_admits(value, annotation, ok):
    assert fits(value, annotation) is ok


@pytest.mark.parametrize("annotation, words", [
    (Optional[str], "text or null"), (List[int], "a list of integers"), (Optional[List[List[int]]],
                                                                         "a list of lists of integers or null"),
    (Dict[str, float], "an object of finite numbers"), (Union[int, List[int]], "an integer or a list of integers"),
    (Optional[float], "a finite number or null"), (List[str], "a list of texts"),
])
def test_the_expected_type_in_words(annotation, words):
    assert expected(annotation) == words


USAGE = {"prompt_tokens": 30, "cached_prompt_tokens": 20, "output_tokens": 2, "requests": 1}


def test_a_line_parses_into_its_type_and_back():
    line = TrainLine(3, 7, "Q", "a", 1, "a", 1, 2, [0, 2], {"explored": False}, reasoning="it is a", time_s=0.5)
    assert TrainLine.from_json(line.as_json()) == line
    billed = TrainLine(3, 7, "Q", "a", 1, "a", 1, 2, [0, 2], {}, time_s=0.5, usage=USAGE)
    assert list(billed.as_json())[-2:] == ["time_s", "usage"] and TrainLine.from_json(billed.as_json()) == billed
    test = TestLine(2, 0.5, {"a": 0.5, "b": 0.5}, ["a", "b"], [1, 2], contexts=[[0], [0, 1]])
    assert TestLine.from_json(test.as_json()) == test


@pytest.mark.parametrize("change, said", [
    ({"reasoning": 3}, "field 'reasoning' is 3, expected text or null"),
    ({"context": "0 1"}, "field 'context' is '0 1', expected a list of integers"),
    ({"feedback": "yes"}, "field 'feedback' is 'yes', expected a finite number or null"),
    ({"feedback": float("nan")}, "field 'feedback' is nan, expected a finite number or null"),
    ({"time_s": float("inf")}, "field 'time_s' is inf, expected a finite number"),
    ({"step": "3"}, "field 'step' is '3', expected an integer"),
    ({"example_id": True}, "field 'example_id' is true, expected an integer"),
    ({"context": [0, "x" * 60]}, "field 'context' is " + repr([0, "x" * 60])[:37] + "..., expected"),  # 40 characters
    ({"colour": "red"}, "field 'colour' is not a field of TrainLine (step, example_id, "),
    ({"usage": {"prompt_tokens": 3}}, "field 'usage' is {'prompt_tokens': 3}, expected an object of exactly "
                                      "prompt_tokens (an integer), cached_prompt_tokens (an integer), output_tokens"),
    ({"usage": {**USAGE, "requests": 1.5}}, "field 'usage' is"),
])
def test_a_misfit_names_where_the_field_and_what_was_expected(change, said):
    record = {**TrainLine(3, 7, "Q", "a", 1, "a", 1, 0, [], {}).as_json(), **change}
    with pytest.raises(DamagedRecords) as caught:
        TrainLine.from_json(record, "run/train.jsonl line 4")
    assert str(caught.value).startswith(f"run/train.jsonl line 4: {said}")
    assert "\n" not in str(caught.value)


def test_a_missing_field_and_a_line_that_is_no_object():
    record = TestLine(0, 1.0, {}, ["a"], 0).as_json()
    del record["predictions"]
    with pytest.raises(DamagedRecords, match=r"^t line 1: field 'predictions' is missing, expected a list of texts$"):
        parse(TestLine, record, "t line 1")
    with pytest.raises(DamagedRecords, match=r"^t line 2 is \[1, 2\], expected an object \(a record of TestLine\)$"):
        parse(TestLine, [1, 2], "t line 2")
    with_default = TestLine(0, 1.0, {}, ["a"], 0).as_json()
    del with_default["time_s"]  # a field with a default may be absent
    assert TestLine.from_json(with_default).time_s == 0.0


def test_earned_is_the_reward_where_recorded_else_the_accuracy():
    line = TrainLine(0, 0, "Q", "a", 1, "b", 0, 0, [], {})
    assert line.earned == 0
    line.reward = 0.5
    assert line.earned == 0.5
    assert TrainLine(0, 0, "Q", None, None, "b", None, 0, [], {}).earned is None  # supervised ICL: no reward
