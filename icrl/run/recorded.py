"""What a run's files say, sorted out and checked before anything is rebuilt from them (the
first part of the one records check on resume; ``icrl.run.rebuild`` is the rest).

``check_config``: config.json against the arguments and the data (its labels the task's, its
plan, data, training stream and exemplars the ones these arguments give); refused in one line
naming the field. ``read_lines``: the lines of train.jsonl and test.jsonl sorted out
(``records.lines``, the pass the readers make too), refused in one line where a training line
that later steps depend on cannot be used. Nothing here writes.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional, Union

from ..config import RunConfig, given
from ..method.agents import is_learner
from ..records import CONFIG, FORMAT_VERSION, TRAIN, DamagedRecords, verify
from ..records.lines import Lines, as_json_text, is_int, is_number, sort_out
from .data import RunData
from .plan import Plan


def is_seconds(value) -> bool:
    return is_number(value) and math.isfinite(value) and value >= 0


def refuse_line(path: Path, number: int, problem: str) -> DamagedRecords:
    """A training line that cannot be used: the steps after it depend on it."""
    return DamagedRecords(f"{path} line {number} {problem}; the steps after it were computed from it, so the run "
                          f"cannot resume: restore that line, or delete it and the lines after it to recompute them, "
                          f"or pass --overwrite to start again")


# -- config.json --------------------------------------------------------------------------------
def check_config(out_dir: Path, recorded: dict, config: RunConfig, data: RunData) -> Plan:
    """config.json against the arguments and the data (no model needed); returns the plan it
    records. Refused in one line naming the field: config.json is not rebuilt, it says what
    the run is (its labels, ``resolved``, the data, the training stream, the exemplars)."""
    verify.check_labels(recorded, data.task.labels, out_dir)
    where = out_dir / CONFIG

    def refuse(what: str) -> DamagedRecords:
        return DamagedRecords(f"{where}: {what}; restore config.json, or pass --overwrite to start again")

    if recorded.get("format_version") != FORMAT_VERSION:
        raise refuse(f"format_version is {recorded.get('format_version')!r}, not {FORMAT_VERSION}")
    if not isinstance(recorded.get("created"), str):
        raise refuse(f"created is {recorded.get('created')!r}, not a time")
    for key in ("args", "runtime_args", "resolved", "backend", "environment", "dataset", "test_set"):
        if not isinstance(recorded.get(key), dict):
            raise refuse(f'"{key}" is not a JSON object')
    s, resolved = config.spec, recorded["resolved"]
    exemplars = len(data.exemplars)
    size = resolved.get("max_context_examples")
    expected_size: Optional[Union[int, str]]  # the size, or what it must be
    if is_learner(s.agent):
        expected_size = None
    elif s.max_context_examples is not None:
        expected_size = 0 if s.max_context_examples == 0 else s.max_context_examples - exemplars
    else:  # automatic: found from the window, checked against it once the model loads
        expected_size = size if is_int(size) and size >= 1 else "a number of episodes >= 1"
    if as_json_text(size) != as_json_text(expected_size):
        raise refuse(f"resolved.max_context_examples is {size!r}, the arguments give {expected_size!r}")
    train_k = recorded["args"].get("train_k")
    if not is_int(train_k) or train_k == 0 or train_k < -1:
        raise refuse(f"args.train_k is {train_k!r}")
    pool = data.task.num_train - exemplars
    num_train = 0 if s.max_context_examples == 0 else (pool if train_k == -1 else min(train_k, pool))
    extended = recorded.get("extended", [])
    if not isinstance(extended, list) or not all(
            isinstance(e, dict) and is_int(e.get("from")) and is_int(e.get("to")) and 0 < e["from"] < e["to"]
            for e in extended):
        raise refuse("extended is not a list of extensions (from, to steps)")
    plan = Plan.of(given(s.icrl, "icrl"), size, num_train, s.test_every)
    plan = plan.with_tests(e["from"] - 1 for e in extended if e["from"] <= plan.steps)
    expected = {"mode": plan.mode, "max_context_examples": size, "steps": plan.steps,
                "test_steps": list(plan.test_steps), "num_exemplars": exemplars, "train_examples": num_train,
                "test_examples": len(data.test)}
    for key, value in expected.items():
        if as_json_text(resolved.get(key)) != as_json_text(value):
            raise refuse(f"resolved.{key} is {resolved.get(key)!r}, the run plans {value!r}")
    record = data.record()
    for part in ("dataset", "test_set"):
        for key, value in record[part].items():
            if as_json_text(recorded[part].get(key)) != as_json_text(value):
                raise refuse(f"{part}.{key} is not the data's")
    ids = [e.id for e in data.train[:plan.steps]] if plan.mode != "zero_shot" else []
    if as_json_text(recorded.get("train_example_ids")) != as_json_text(ids):
        raise refuse("train_example_ids are not the training examples these arguments draw")
    task = data.task
    shots = [{"id": e.id, "prompt": task.prompt(e), "answer": task.answer(e)} for e in data.exemplars]
    if as_json_text(recorded.get("exemplars")) != as_json_text(shots):
        raise refuse("exemplars are not the ones these arguments draw")
    return plan


# -- the lines on disk ----------------------------------------------------------------------------
def read_lines(out_dir: Path, plan: Plan, data: RunData) -> Lines:
    """The record files sorted out against the plan (``records.lines``: what is dropped or
    reordered is in the notes); DamagedRecords in one line for a training line the steps after
    it depend on."""
    train_ids = [e.id for e in data.train[:plan.steps]] if plan.mode != "zero_shot" else []
    lines = sort_out(out_dir, plan.steps, plan.test_steps, plan.mode, train_ids, len(data.test))
    refusal, path = lines.refusal, out_dir / TRAIN
    if refusal is None:
        return lines
    if refusal.kind == "zero_shot":
        raise DamagedRecords(f"{path} line {refusal.number} {refusal.problem}: delete the file, or pass --overwrite "
                             f"to start again")
    if refusal.kind == "beyond_plan":
        raise DamagedRecords(f"{path} line {refusal.number} {refusal.problem}: restore the files of one run, or "
                             f"delete that line and the ones after it, or pass --overwrite to start again")
    raise refuse_line(path, refusal.number, refusal.problem)
