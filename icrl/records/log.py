"""A run's log read back: ``read_log(run_dir) -> RunLog``, the one reader of a run's files.

Each file is read once and each line parsed once (``records.io.loads``: no key given twice, no
NaN or Infinity, nesting bounded). What it answers, for the resume and every reader alike:

- **refused** (``refusal``, one line naming the file, the line or field, and the remedy): the
  run cannot be used. config.json is missing (beside records), not JSON, not of its types
  (``ConfigFile.parse``) or contradicts itself (``configfile.problem``: another format version,
  a plan its arguments do not give, ...); or a training line that the steps after it depend on
  cannot be used (``line_refusal``; ``records.lines``: not JSON, not its step's example, a gap,
  a step repeated with other content, beyond the plan, any line of a zero-shot run).
- **what a resume continues from**: the training lines of steps 0, 1, ... and the test lines of
  their planned test steps, sorted out (``records.lines``: repeats, reorderings, cut and
  unusable last lines dropped, each a note in ``problems``), as their JSON objects (``train``,
  ``test``): the records check (``icrl.run.rebuild``) rebuilds the lines from them, repairing
  what it can and refusing what it cannot, and parses them into ``TrainLine``/``TestLine``;
  ``typed()`` parses them without that check (a line that is not of its type: a problem).
- **complete / finished**: every planned step and test step is on disk; finished is complete
  with nothing noted.

results.json is not read: it sums up the records, and a resume rewrites it from them. Nothing
here writes or raises for bad content: the refusal is a value, raised by whoever uses the run
(``RunLog.refuse``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ..errors import DamagedRecords
from .configfile import ConfigFile, problem
from .io import read_json
from .layout import CONFIG, TEST, TRAIN
from .lines import Lines, sort_out
from .schema import TestLine, TrainLine
from .summary import per_class_accuracy

FIX_CONFIG = "restore config.json as the run wrote it, or pass --overwrite to start the run again"


@dataclass
class RunLog:
    """One run's files as read (module docstring)."""

    directory: Path
    config: Optional[ConfigFile] = None
    config_json: dict[str, Any] = field(default_factory=dict)  # config.json as written (an extension grows it)
    refusal: Optional[str] = None
    lines: Lines = field(default_factory=Lines)
    problems: list[str] = field(default_factory=list)
    complete: bool = False

    @property
    def line_refusal(self) -> Optional[str]:
        """Why a training line the steps after it depend on cannot be used (None: every line kept
        can be); said after config.json's own refusal, and after a resume has checked
        config.json against its data (a training stream of other examples is said there)."""
        return None if self.lines.refusal is None else self.lines.refusal.said(self.directory / TRAIN)

    @property
    def usable(self) -> bool:
        return self.refusal is None and self.config is not None and self.lines.refusal is None

    @property
    def finished(self) -> bool:
        """Complete and nothing noted: the only state in which a run is trusted as done."""
        return self.usable and self.complete and not self.problems

    @property
    def damage(self) -> str:
        refused = self.refusal or self.line_refusal
        return "; ".join(([refused] if refused else []) + self.problems)

    @property
    def mode(self) -> str:
        return self.config.resolved.mode if self.config is not None else ""

    @property
    def train(self) -> list[dict[str, Any]]:
        """The training lines a resume continues from (steps 0, 1, ...), as written."""
        return [record for _, record in self.lines.train]

    @property
    def test(self) -> list[dict[str, Any]]:
        """The test lines of completed planned test steps, in step order, as written."""
        return [self.lines.test[t][1] for t in sorted(self.lines.test)]

    @property
    def steps_done(self) -> int:
        if self.mode == "zero_shot":
            return 1 if self.lines.test else 0
        return len(self.lines.train)

    @property
    def missing_tests(self) -> list[int]:
        """Planned test steps of completed steps that have no usable line."""
        if self.config is None:
            return []
        done = self.steps_done
        return [t for t in self.config.resolved.test_steps if t < done and t not in self.lines.test]

    def checked_config(self) -> ConfigFile:
        """config.json, when it can be used; DamagedRecords with its refusal otherwise."""
        if self.refusal is not None:
            raise DamagedRecords(self.refusal)
        if self.config is None:
            raise DamagedRecords(f"{self.directory} has no config.json: not a run")
        return self.config

    def refuse(self) -> "RunLog":
        """The log, when the run can be used; DamagedRecords with the refusal otherwise."""
        self.checked_config()
        if self.line_refusal is not None:
            raise DamagedRecords(self.line_refusal)
        return self

    def typed(self) -> tuple[list[TrainLine], list[TestLine], list[str]]:
        """(training lines, test lines, problems) parsed into their types without the records
        check: the training lines up to the first that is not of its type, the test lines that
        are; each line left out is a problem."""
        train: list[TrainLine] = []
        found: list[str] = []
        for number, record in self.lines.train:
            try:
                train.append(TrainLine.from_json(record, f"{self.directory / TRAIN} line {number}"))
            except DamagedRecords as exc:
                found.append(f"{exc} (the steps from it on are left out)")
                break
        test: list[TestLine] = []
        for step in sorted(self.lines.test):
            number, record = self.lines.test[step]
            if step >= len(train) and self.mode != "zero_shot":
                continue
            try:
                test.append(TestLine.from_json(record, f"{self.directory / TEST} line {number}"))
            except DamagedRecords as exc:
                found.append(f"{exc} (left out)")
        return train, test, found


def read_log(directory: Path) -> RunLog:
    """The run in ``directory`` as its files say (module docstring); never raises for content
    (OSError when a record file cannot be read: the tools say so in one line)."""
    log = RunLog(Path(directory))
    path = log.directory / CONFIG
    try:
        raw = read_json(path)
    except FileNotFoundError:
        log.refusal = f"{log.directory} has records but no config.json; restore it, or pass --overwrite to start " \
                      f"the run again"
        return log
    except (OSError, ValueError) as exc:
        log.refusal = f"{path} is unreadable ({exc}); {FIX_CONFIG}"
        return log
    try:
        config = ConfigFile.parse(raw, str(path))
    except DamagedRecords as exc:
        log.refusal = f"{exc}; {FIX_CONFIG}"
        return log
    wrong = problem(config)
    if wrong is not None:
        log.refusal = f"{path}: {wrong}; {FIX_CONFIG}"
        return log
    log.config, log.config_json = config, dict(raw)
    _sort(log, config)
    return log


def _sort(log: RunLog, config: ConfigFile) -> None:
    r = config.resolved
    lines = sort_out(log.directory, r.steps, r.test_steps, r.mode, config.train_example_ids, len(config.test_set.ids))
    log.lines = lines
    if lines.refusal is not None:
        return
    log.problems += lines.notes
    for name, cut in ((TRAIN, lines.cut_train), (TEST, lines.cut_test)):
        if cut:
            log.problems.append(f"{name} ends with a line cut short")
    done = log.steps_done
    if lines.pending and r.mode != "zero_shot" and done == r.steps:
        log.problems.append(f"{TEST} has steps after the last one ({[rec.get('step') for rec in lines.pending]})")
    log.complete = done == r.steps and not log.missing_tests if r.mode != "zero_shot" else bool(lines.test)
    if r.mode != "zero_shot" and done == r.steps and log.missing_tests:
        log.problems.append(f"test steps {log.missing_tests} are missing from {TEST}")


def record_problems(config: ConfigFile, train: list[TrainLine], test: list[TestLine]) -> list[str]:
    """What config.json alone shows wrong in the typed lines (no data, no replay): a training
    line's answer not a label of the task, or (an ICRL run) its prediction not one or its
    accuracy not what follows from the two; a test line's predictions not one label per test
    answer, or its accuracy or per-class accuracy not what follows from them. [] when nothing."""
    labels, answers, icrl = set(config.labels), config.test_set.answers, config.resolved.mode == "icrl"
    found = []
    for r in train:
        if r.answer not in labels or (icrl and r.prediction not in labels):
            found.append(f"training step {r.step}'s answer {r.answer!r} or prediction {r.prediction!r} is not a label")
        elif icrl and r.accuracy != int(r.prediction == r.answer):
            found.append(f"training step {r.step}'s accuracy {r.accuracy!r} is not {int(r.prediction == r.answer)}")
    for t in test:
        if len(t.predictions) != len(answers) or any(p not in labels for p in t.predictions):
            found.append(f"test step {t.step}'s predictions are not one label per test example")
            continue
        correct = [int(p == g) for p, g in zip(t.predictions, answers)]
        accuracy, per_class = sum(correct) / len(correct), per_class_accuracy(answers, correct)
        if not math.isclose(t.accuracy, accuracy, abs_tol=1e-12) or t.per_class_accuracy != per_class:
            found.append(f"test step {t.step}'s accuracy {t.accuracy!r} is not {accuracy:.4f}")
    return found
