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

Each line kept is parsed once into its type, leniently (``Kept``: the line, and ``wrong``, what
of the record does not fit it; ``records.typed.parse_leniently``): the records check repairs or
refuses those fields (``icrl.run.rebuild``), and a line is trusted as it is only when nothing is
wrong with it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Optional, Sequence, TypeVar

from .io import parse_jsonl
from .layout import TEST, TRAIN
from .schema import TestLine, TrainLine

L = TypeVar("L", TrainLine, TestLine)


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


@dataclass(frozen=True)
class Kept(Generic[L]):
    """A line kept: its ``number`` in the file, the JSON object as written (``raw``), the ``line``
    it parses into and what of it does not fit (``wrong``: field -> what the record holds)."""

    number: int
    raw: dict[str, Any]
    line: L
    wrong: dict[str, Any]

    @property
    def sound(self) -> bool:
        return not self.wrong

    def value(self, name: str) -> Any:
        """What the record holds in field ``name`` as written (for a message)."""
        return self.wrong[name] if name in self.wrong else getattr(self.line, name)


@dataclass
class Lines:
    """The record files sorted out (module docstring): ``train`` the lines of steps 0, 1, ... in
    order; ``test`` step -> the line of each planned test step of a completed step; ``pending``
    the test lines of steps not completed; ``train_notes`` and ``test_notes`` what was dropped or
    reordered in each file."""

    train: list[Kept[TrainLine]] = field(default_factory=list)
    test: dict[int, Kept[TestLine]] = field(default_factory=dict)
    pending: list[Kept[TestLine]] = field(default_factory=list)
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


def sort_out(directory: Path, steps: int, test_steps: Sequence[int], mode: str, train_ids: Sequence[int],
             num_test: int) -> Lines:
    """The lines of ``directory``'s record files sorted out against the plan (module docstring).
    OSError when a file cannot be read."""
    out = Lines()
    _sort_train(out, Path(directory) / TRAIN, steps, mode, train_ids)
    done = 1 if mode == "zero_shot" else len(out.train)
    _sort_test(out, Path(directory) / TEST, set(test_steps), done, num_test)
    return out


def _kept_train(number: int, record: object) -> Optional[Kept[TrainLine]]:
    """A training line's JSON value parsed (None: not an object)."""
    if not isinstance(record, dict):
        return None
    line, wrong = TrainLine.leniently(record)
    return Kept(number, record, line, wrong)


def _sort_train(out: Lines, path: Path, steps: int, mode: str, train_ids: Sequence[int]) -> None:
    lines, bad, out.cut_train = parse_jsonl(path)
    if mode == "zero_shot":
        if lines or bad:
            out.refusal = Refusal(min([n for n, _ in lines] + bad), "is a training line, and a zero-shot run has "
                                  "none", "zero_shot")
        return
    last = max([n for n, _ in lines] + bad, default=0)
    by_step: dict[int, Kept[TrainLine]] = {}
    for n, record in sorted([(n, None) for n in bad] + lines, key=lambda item: item[0]):
        kept = None if n in bad else _kept_train(n, record)
        problem, kind = _train_problem(n in bad, kept, by_step, train_ids, steps)
        if kept is not None and kind == "ok":
            by_step[kept.line.step] = kept
        elif kind == "repeat":
            out.train_notes.append(f"{TRAIN} line {n} {problem}: dropped")
        elif kind == "unusable" and n == last:
            out.train_notes.append(f"{TRAIN} line {n} {problem}: dropped, its step is recomputed")
        else:
            out.refusal = Refusal(n, problem, "beyond_plan" if kind == "beyond_plan" else "line")
            break
    done = 0
    while done in by_step:
        done += 1
    gap = [s for s in by_step if s > done]
    if gap and out.refusal is None:
        out.refusal = Refusal(by_step[min(gap)].number, f"is step {min(gap)}, and no line is step {done}")
    out.train = [by_step[s] for s in range(done)]
    numbers = [k.number for k in out.train]
    if numbers != sorted(numbers):
        out.train_notes.append(f"{TRAIN}'s lines out of step order (sorted)")


def _train_problem(not_json: bool, kept: Optional[Kept[TrainLine]], by_step: dict[int, Kept[TrainLine]],
                   train_ids: Sequence[int], steps: int) -> tuple[str, str]:
    """(what is wrong with a training line, its kind): "ok"; "repeat" (of an earlier line, word
    for word); "unusable" (dropped when it is the last line); "refused" (a step repeated with other
    content); "beyond_plan"."""
    if not_json:
        return "is not JSON", "unusable"
    if kept is None or "step" in kept.wrong or kept.line.step < 0:
        shown = kept.value("step") if kept is not None else None
        return f"is not a training step (step {shown!r})", "unusable"
    step = kept.line.step
    if step >= steps:
        return f"is step {step}, but the run plans {steps} steps (config.json)", "beyond_plan"
    if step in by_step:
        first = by_step[step]
        if as_json_text(first.raw) != as_json_text(kept.raw):
            return f"repeats step {step} (line {first.number}) with other content", "refused"
        return f"is a repeat of line {first.number}", "repeat"
    if step < len(train_ids) and ("example_id" in kept.wrong or kept.line.example_id != train_ids[step]):
        return (f"(step {step}) is example {kept.value('example_id')!r}, and step {step} of this run is example "
                f"{train_ids[step]!r}", "unusable")
    return "", "ok"


def _sort_test(out: Lines, path: Path, planned: set[int], done: int, num_test: int) -> None:
    lines, bad, out.cut_test = parse_jsonl(path)
    out.test_notes += [f"{TEST} line {n} is not JSON: dropped, its step is recomputed" for n in bad]
    order = []
    for n, record in lines:
        kept = None
        if isinstance(record, dict):
            line, wrong = TestLine.leniently(record)
            kept = Kept(n, record, line, wrong)
        if kept is None or "step" in kept.wrong or kept.line.step not in planned:
            shown = kept.value("step") if kept is not None else None
            out.test_notes.append(f"{TEST} line {n} is not a planned test step ({shown!r}): dropped")
            continue
        step = kept.line.step
        if not _complete(kept, num_test):
            out.test_notes.append(f"{TEST} line {n} (step {step}) has no accuracy or not {num_test} predictions: "
                                  f"dropped, its step is recomputed")
        elif step >= done:
            out.pending.append(kept)  # written just before a kill cut its step short: recomputed
        elif step in out.test:
            out.test_notes.append(f"{TEST} line {n} repeats step {step}: dropped")
        else:
            out.test[step] = kept
            order.append(step)
    if order != sorted(order):
        out.test_notes.append(f"{TEST}'s lines out of step order (sorted)")


def _complete(kept: Kept[TestLine], num_test: int) -> bool:
    return not {"accuracy", "predictions"} & set(kept.wrong) and len(kept.line.predictions) == num_test
