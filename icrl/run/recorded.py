"""What a run's files say, sorted out and checked before anything is rebuilt from them (the
first part of the one records check on resume; ``icrl.run.rebuild`` is the rest).

``check_config``: config.json against the arguments and the data (its labels the task's, its
plan, data, training stream and exemplars the ones these arguments give); refused in one line
naming the field. ``read_lines``: the lines of train.jsonl and test.jsonl sorted out (lines cut
short, not JSON, duplicated, out of order, of steps not planned or not completed). Nothing here
writes.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, TypeGuard, Union

from ..config import RunConfig, given
from ..method.agents import is_learner
from ..records import CONFIG, FORMAT_VERSION, TEST, TRAIN, DamagedRecords, parse_jsonl, verify
from .data import RunData
from .plan import Plan


def as_json_text(value) -> str:
    return json.dumps(value, ensure_ascii=False)


def is_int(value) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def is_seconds(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


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
@dataclass
class Lines:
    """The lines of train.jsonl and test.jsonl sorted out: ``train`` holds (line number, record)
    of steps 0, 1, ... in order; ``test`` step -> (line number, record) of the planned test steps
    among them; ``notes`` what was dropped or reordered because it was damaged."""

    train: list
    test: dict
    notes: list = field(default_factory=list)
    rewrite_train: bool = False
    rewrite_test: bool = False


def read_lines(out_dir: Path, plan: Plan) -> Lines:
    """Sort out the record files: a line cut short by a kill is dropped (no note), as is a last
    training line that is not JSON; training lines out of order are sorted and a repeated one
    (the same line twice) dropped; a gap, a step repeated with other content, or a line that is
    not JSON before others are refused (the steps after it depend on it). Test lines that are not
    JSON, of steps not planned, repeated or of steps not completed are dropped."""
    train, notes, rewrite_train = _read_train(out_dir / TRAIN, plan)
    test, test_notes, rewrite_test = _read_test(out_dir / TEST, plan, 1 if plan.mode == "zero_shot" else len(train))
    return Lines(train, test, notes + test_notes, rewrite_train, rewrite_test)


def _read_train(path: Path, plan: Plan) -> tuple[list, list, bool]:
    """(line number, record) of steps 0, 1, ... in order, the notes, whether to rewrite the file."""
    lines, bad, cut = parse_jsonl(path)
    notes: list = []
    rewrite_train = cut
    last = max([n for n, _ in lines] + bad, default=0)
    for n in bad:
        if n != last:
            raise refuse_line(path, n, "is not JSON")
        notes.append(f"train.jsonl line {n} (not JSON; its step is recomputed)")
        rewrite_train = True
    if plan.mode == "zero_shot" and lines:
        raise DamagedRecords(f"{path} has {len(lines)} lines; a zero-shot run has none: delete the file, or pass "
                             f"--overwrite to start again")
    by_step: dict = {}
    for n, record in lines:
        step = record.get("step") if isinstance(record, dict) else None
        if not is_int(step) or step < 0:
            if n == last:
                notes.append(f"train.jsonl line {n} (not a training step; its step is recomputed)")
                rewrite_train = True
                continue
            raise refuse_line(path, n, f"is not a training step (step {step!r})")
        if step in by_step:
            first, earlier = by_step[step]
            if as_json_text(earlier) != as_json_text(record):
                raise refuse_line(path, n, f"repeats step {step} (line {first}) with other content")
            notes.append(f"train.jsonl line {n} (a repeat of line {first})")
            rewrite_train = True
            continue
        by_step[step] = (n, record)
    steps = sorted(by_step)
    for i, step in enumerate(steps):
        if step != i:
            n = by_step[step][0]
            raise refuse_line(path, n, f"is step {step}, and no line is step {i}")
    if steps and [n for n, _ in (by_step[s] for s in steps)] != sorted(n for n, _ in by_step.values()):
        notes.append("train.jsonl's lines out of step order (sorted)")
        rewrite_train = True
    if len(steps) > plan.steps:
        n = by_step[plan.steps][0]
        raise DamagedRecords(f"{path} line {n} is step {plan.steps}, but the run plans {plan.steps} steps "
                             f"(config.json): "
                             f"restore the files of one run, or delete that line and the ones after it, or pass "
                             f"--overwrite to start again")
    return [by_step[s] for s in steps], notes, rewrite_train


def _read_test(path: Path, plan: Plan, done: int) -> tuple[dict, list, bool]:
    """Step -> (line number, record) of the planned test steps among the ``done`` completed
    steps, the notes, whether to rewrite the file."""
    t_lines, t_bad, t_cut = parse_jsonl(path)
    rewrite_test = t_cut or bool(t_bad)
    notes = [f"test.jsonl line {n} (not JSON; its step is recomputed)" for n in t_bad]
    test: dict = {}
    order = []
    for n, record in t_lines:
        step = record.get("step") if isinstance(record, dict) else None
        if not is_int(step) or step not in plan.test_steps:
            notes.append(f"test.jsonl line {n} (not a planned test step: {step!r})")
        elif step >= done:
            pass  # written just before a kill cut its step short: recomputed, no damage
        elif step in test:
            notes.append(f"test.jsonl line {n} (a repeat of step {step})")
        else:
            test[step] = (n, record)
            order.append(step)
            continue
        rewrite_test = True
    if order != sorted(order):
        notes.append("test.jsonl's lines out of step order (sorted)")
        rewrite_test = True
    return test, notes, rewrite_test
