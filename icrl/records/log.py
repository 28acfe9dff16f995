"""A run's log read back: ``read_log(run_dir) -> RunLog``, the one reader of a run's files.

Each file is read once and each line parsed once (``records.io.loads``: no key given twice,
nesting bounded; a number that is NaN or infinite is refused by the record's types). What it
answers, for the resume and every reader alike:

- **refused** (``refusal``, one line naming the file, the line or field, and the remedy): the
  run cannot be used. config.json is missing (beside records), not JSON, not of its types
  (``ConfigFile.parse``) or contradicts itself (``config_problem``: another format version, a
  plan its arguments do not give, a test set of other sizes or answers that are no labels); or
  a training line that the steps after it depend on cannot be used (``line_refusal``;
  ``records.lines``: not JSON, not its step's example, a gap, a step repeated with other
  content, beyond the plan, any line of a zero-shot run).
- **what a resume continues from** (``lines``): the training lines of steps 0, 1, ... and the
  test lines of their planned test steps, sorted out (``records.lines``: repeats, reorderings,
  cut and unusable last lines dropped, each a note in ``problems``), each parsed into
  ``TrainLine``/``TestLine`` with what of it does not fit its type beside it: the records check
  (``icrl.run.rebuild``) rebuilds the lines from them, repairing what it can and refusing what
  it cannot; ``typed()`` gives them without that check (a line not of its type: a problem).
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
from .configfile import ConfigFile
from .layout import FORMAT_VERSION
from .plan import Plan, mode_of
from .io import read_json
from .layout import CONFIG, TEST, TRAIN
from .lines import Lines, sort_out
from .schema import TestLine, TrainLine
from .summary import per_class_accuracy
from .typed import shown

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
        for kept in self.lines.train:
            if not kept.sound:
                found.append(f"{self.directory / TRAIN} line {kept.number}: {_wrong(kept.wrong)} (the steps from it "
                             f"on are left out)")
                break
            train.append(kept.line)
        test: list[TestLine] = []
        for step in sorted(self.lines.test):
            kept_test = self.lines.test[step]
            if step >= len(train) and self.mode != "zero_shot":
                continue
            if kept_test.sound:
                test.append(kept_test.line)
            else:
                found.append(f"{self.directory / TEST} line {kept_test.number}: {_wrong(kept_test.wrong)} (left out)")
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
    wrong = config_problem(config)
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
        log.problems.append(f"{TEST} has steps after the last one ({[kept.line.step for kept in lines.pending]})")
    log.complete = done == r.steps and not log.missing_tests if r.mode != "zero_shot" else bool(lines.test)
    if r.mode != "zero_shot" and done == r.steps and log.missing_tests:
        log.problems.append(f"test steps {log.missing_tests} are missing from {TEST}")


MODES = ("icrl", "icl", "zero_shot")


def config_problem(config: ConfigFile) -> Optional[str]:
    """What config.json shows wrong with itself (module docstring), in words that follow its
    path, or None."""
    if config.format_version != FORMAT_VERSION:
        return (f"format_version is {config.format_version}, and this icrl reads format {FORMAT_VERSION} (a run of "
                f"another version of icrl)")
    return _plan_problem(config) or _data_problem(config)


def _plan_problem(config: ConfigFile) -> Optional[str]:
    r, spec, dataset = config.resolved, config.spec, config.dataset
    if r.mode not in MODES:
        return f"resolved.mode is {r.mode!r}, not one of {', '.join(MODES)}"
    if r.num_exemplars != len(config.exemplars):
        return f"resolved.num_exemplars is {r.num_exemplars}, and config.json holds {len(config.exemplars)} exemplars"
    if not isinstance(spec.train_k, int) or spec.train_k == 0 or spec.train_k < -1:
        return f"args.train_k is {spec.train_k!r}"
    if not isinstance(spec.test_every, int) or spec.test_every < 1:
        return f"args.test_every is {spec.test_every!r}"
    pool = dataset.num_train - r.num_exemplars
    zero_shot = r.mode == "zero_shot"
    num_train = 0 if zero_shot else (pool if spec.train_k == -1 else min(spec.train_k, pool))
    size = _size_problem(config)
    if size is not None:
        return size
    if spec.icrl is None or r.mode != mode_of(spec.icrl, r.max_context_examples):
        return f"resolved.mode is {r.mode!r}, and args give icrl {spec.icrl!r} with {r.max_context_examples!r} episodes"
    starts = [e.start for e in config.extended]
    if not all(0 < e.start < e.to for e in config.extended):
        return "extended is not a list of extensions (from, to steps)"
    plan = Plan.of(r.mode != "icl", r.max_context_examples, num_train, spec.test_every)
    plan = plan.with_tests(s - 1 for s in starts if s <= plan.steps)
    for name, value, planned in (("steps", r.steps, plan.steps), ("test_steps", r.test_steps, list(plan.test_steps)),
                                 ("train_examples", r.train_examples, num_train)):
        if value != planned:
            return f"resolved.{name} is {value!r}, the run plans {planned!r}"
    ids = len(config.train_example_ids)
    if ids != (0 if zero_shot else r.steps):
        return f"train_example_ids has {ids} ids for {r.steps} steps"
    return None


def _size_problem(config: ConfigFile) -> Optional[str]:
    """resolved.max_context_examples against the arguments: None for a learner, the given size
    less the exemplars (0: zero-shot), or a size >= 1 found from the window."""
    size, given, spec = config.resolved.max_context_examples, config.spec.max_context_examples, config.spec
    if spec.agent not in (None, "llm"):
        planned: object = None
    elif given is not None:
        planned = 0 if given == 0 else given - config.resolved.num_exemplars
    else:
        planned = size if isinstance(size, int) and size >= 1 else "a number of episodes >= 1"
    if size != planned or (size is not None and size < 0):
        return f"resolved.max_context_examples is {size!r}, the arguments give {planned!r}"
    return None


def _data_problem(config: ConfigFile) -> Optional[str]:
    labels, tests = config.dataset.labels, config.test_set
    if not labels or len(set(labels)) != len(labels):
        return "dataset.labels is not a list of distinct labels"
    if not len(tests.ids) == len(tests.prompts) == len(tests.answers) == config.resolved.test_examples:
        return (f"test_set holds {len(tests.ids)} ids, {len(tests.prompts)} prompts and {len(tests.answers)} "
                f"answers for resolved.test_examples {config.resolved.test_examples}")
    if not tests.ids:
        return "test_set is empty"
    known = set(labels)
    if any(answer not in known for answer in tests.answers):
        return "the labels in config.json (dataset.labels) do not hold the test set's answers (test_set.answers)"
    if any(e.answer not in known for e in config.exemplars):
        return "exemplars' answers are not labels of dataset.labels"
    return None


def _wrong(wrong: dict[str, Any]) -> str:
    """What of a line does not fit its type, in words."""
    return "; ".join(f"field {name!r} is {shown(value)}" for name, value in wrong.items())


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
