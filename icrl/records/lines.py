"""The lines of a run's train.jsonl and test.jsonl sorted out against its plan: the pass that
``records.log.read_log`` makes over the files for the resume and every reader before they use a
line. Nothing here raises for bad content or writes.

Training lines (``sort_out`` with the plan's steps, test steps, mode, training example ids and
test-set size; the ids and the size may be None when unknown):

- a line cut short by a kill (no newline) is dropped, as is the last line when it is not JSON,
  not a training step, or of another example than its step's: nothing depends on it yet
  (``notes`` says so, except for the cut line, ``cut_train``);
- a line repeated word for word is dropped, lines out of step order are sorted (noted);
- the first line the steps after it depend on and that cannot be used is the ``refusal``: not
  JSON, not a training step, of another example than its step's, a step repeated with other
  content, a gap before it, a step beyond the plan, or any line of a zero-shot run. The lines
  after it are not read; ``train`` keeps the steps 0, 1, ... read before it.

Test lines stand alone: one that is not JSON, not of a planned test step, incomplete (no
accuracy, or not one prediction per test example), or repeated is dropped (noted); one of a
step not completed yet (written just before a kill cut its step short) is ``pending``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

from .io import parse_jsonl
from .layout import TEST, TRAIN
from .typed import is_int, is_number


@dataclass(frozen=True)
class Refusal:
    """A training line the steps after it depend on and that cannot be used. ``kind``: "line"
    (restore or delete it and the lines after it), "zero_shot" (a zero-shot run has no training
    lines), "beyond_plan" (a step after the last one the run plans)."""

    number: int
    problem: str
    kind: str = "line"

    def __str__(self) -> str:
        return f"{TRAIN} line {self.number} {self.problem}"

    def said(self, path: Path) -> str:
        """The one line that refuses the run for it (``path``: its train.jsonl), with the remedy."""
        if self.kind == "zero_shot":
            return f"{path} line {self.number} {self.problem}: delete the file, or pass --overwrite to start again"
        if self.kind == "beyond_plan":
            return (f"{path} line {self.number} {self.problem}: restore the files of one run, or delete that line "
                    f"and the ones after it, or pass --overwrite to start again")
        return refused_line(path, self.number, self.problem)


def refused_line(path: Path, number: int, problem: str) -> str:
    """A training line that cannot be used, and the steps after it depend on it."""
    return (f"{path} line {number} {problem}; the steps after it were computed from it, so the run cannot resume: "
            f"restore that line, or delete it and the lines after it to recompute them, or pass --overwrite to "
            f"start again")


@dataclass
class Lines:
    """The record files sorted out (module docstring): ``train`` holds (line number, record) of
    steps 0, 1, ... in order; ``test`` step -> (line number, record) of the planned test steps
    of completed steps; ``pending`` the test records of steps not completed; ``train_notes`` and
    ``test_notes`` what was dropped or reordered in each file."""

    train: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    test: dict[int, tuple[int, dict[str, Any]]] = field(default_factory=dict)
    pending: list[dict[str, Any]] = field(default_factory=list)
    train_notes: list[str] = field(default_factory=list)
    test_notes: list[str] = field(default_factory=list)
    refusal: Optional[Refusal] = None
    cut_train: bool = False
    cut_test: bool = False

    @property
    def notes(self) -> list[str]:
        return self.train_notes + self.test_notes

    @property
    def rewrite_train(self) -> bool:
        """Whether train.jsonl differs from the lines kept (something dropped or reordered)."""
        return self.cut_train or bool(self.train_notes)

    @property
    def rewrite_test(self) -> bool:
        return self.cut_test or bool(self.pending) or bool(self.test_notes)


def as_json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def sort_out(directory: Path, steps: int, test_steps: Iterable[int], mode: str,
             train_ids: Optional[Sequence[int]] = None, num_test: Optional[int] = None) -> Lines:
    """The lines of ``directory``'s record files sorted out against the plan (module docstring).
    OSError when a file cannot be read."""
    out = Lines()
    _sort_train(out, Path(directory) / TRAIN, steps, mode, train_ids)
    done = 1 if mode == "zero_shot" else len(out.train)
    _sort_test(out, Path(directory) / TEST, set(test_steps), done, num_test)
    return out


def _sort_train(out: Lines, path: Path, steps: int, mode: str, train_ids: Optional[Sequence[int]]) -> None:
    lines, bad, out.cut_train = parse_jsonl(path)
    if mode == "zero_shot":
        if lines or bad:
            out.refusal = Refusal(min([n for n, _ in lines] + bad), "is a training line, and a zero-shot run has "
                                  "none", "zero_shot")
        return
    last = max([n for n, _ in lines] + bad, default=0)
    by_step: dict[int, tuple[int, dict[str, Any]]] = {}
    for n, record in sorted([(n, None) for n in bad] + lines, key=lambda item: item[0]):
        problem, kind = _train_problem(n in bad, record, by_step, train_ids, steps)
        if kind == "ok" and isinstance(record, dict):  # "ok": a JSON object with its step
            by_step[record["step"]] = (n, record)
        elif kind == "repeat":
            out.train_notes.append(f"{TRAIN} line {n} {problem}: dropped")
        elif kind == "unusable" and n == last:
            out.train_notes.append(f"{TRAIN} line {n} {problem}: dropped, its step is recomputed")
        else:
            out.refusal = Refusal(n, problem, "beyond_plan" if kind == "beyond_plan" else "line")
            break
    kept = 0
    while kept in by_step:
        kept += 1
    gap = [s for s in by_step if s > kept]
    if gap and out.refusal is None:
        out.refusal = Refusal(by_step[min(gap)][0], f"is step {min(gap)}, and no line is step {kept}")
    out.train = [by_step[s] for s in range(kept)]
    numbers = [n for n, _ in out.train]
    if numbers != sorted(numbers):
        out.train_notes.append(f"{TRAIN}'s lines out of step order (sorted)")


def _train_problem(not_json: bool, record: object, by_step: dict[int, tuple[int, dict[str, Any]]],
                   train_ids: Optional[Sequence[int]], steps: int) -> tuple[str, str]:
    """(what is wrong with a training line, its kind): "ok"; "repeat" (of an earlier line, word
    for word); "unusable" (dropped when it is the last line); "refused" (a step repeated with other
    content); "beyond_plan"."""
    if not_json:
        return "is not JSON", "unusable"
    step = record.get("step") if isinstance(record, dict) else None
    if not isinstance(record, dict) or not is_int(step) or step < 0:
        return f"is not a training step (step {step!r})", "unusable"
    if step >= steps:
        return f"is step {step}, but the run plans {steps} steps (config.json)", "beyond_plan"
    if step in by_step:
        first, earlier = by_step[step]
        if as_json_text(earlier) != as_json_text(record):
            return f"repeats step {step} (line {first}) with other content", "refused"
        return f"is a repeat of line {first}", "repeat"
    if train_ids is not None and step < len(train_ids) and record.get("example_id") != train_ids[step]:
        return (f"(step {step}) is example {record.get('example_id')!r}, and step {step} of this run is example "
                f"{train_ids[step]!r}", "unusable")
    return "", "ok"


def _sort_test(out: Lines, path: Path, planned: set[int], done: int, num_test: Optional[int]) -> None:
    lines, bad, out.cut_test = parse_jsonl(path)
    out.test_notes += [f"{TEST} line {n} is not JSON: dropped, its step is recomputed" for n in bad]
    order: list[int] = []
    for n, record in lines:
        step = record.get("step") if isinstance(record, dict) else None
        if not isinstance(record, dict) or not is_int(step) or step not in planned:
            out.test_notes.append(f"{TEST} line {n} is not a planned test step ({step!r}): dropped")
        elif num_test is not None and not _complete(record, num_test):
            out.test_notes.append(f"{TEST} line {n} (step {step}) has no accuracy or not {num_test} predictions: "
                                  f"dropped, its step is recomputed")
        elif step >= done:
            out.pending.append(record)  # written just before a kill cut its step short: recomputed
        elif step in out.test:
            out.test_notes.append(f"{TEST} line {n} repeats step {step}: dropped")
        else:
            out.test[step] = (n, record)
            order.append(step)
    if order != sorted(order):
        out.test_notes.append(f"{TEST}'s lines out of step order (sorted)")


def _complete(record: dict[str, Any], num_test: int) -> bool:
    predictions = record.get("predictions")
    return is_number(record.get("accuracy")) and isinstance(predictions, list) and len(predictions) == num_test
