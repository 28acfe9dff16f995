"""A run's log (``icrl.records.log.RunLog``) checked against its data and against what the run
itself would write: the records check of a resume and of every reader that has the run's data.

First config.json against the data and the arguments (``check_config``: its labels, data,
test set, training stream and exemplars the ones these arguments draw; refused in one line
naming the field). Then no line is trusted on its word: each is rebuilt by running the run's
own loop (``Loop.step``) over the recorded steps with stand-ins for the model that answer
every call with what is on record (``icrl.run.replay``), and compared with the line on disk:

- what follows from the data, the seeds and the predictions is rebuilt exactly and repaired
  where it differs: a training line's prompt and answer (its example's), accuracy, feedback
  (the reward of prediction against answer, flipped with the run's seed), reward, ``reset``,
  ``explored`` and context size; a test line's accuracies, reward and context size; a
  learner's every field (a learner is its own model); the fields' order, and fields the run
  does not write;
- what only the model could say, an LLM's prediction, must be a label of the task that the
  fields computed from it do not all contradict (its accuracy and feedback; under a reward a
  model gives, its accuracy alone: the reward follows the verdict), shown the context and
  metrics the strategy draws at that step with the run's seed (else the line was edited or is
  another run's); a verdict of a reward's call must not be contradicted by both its reward and
  feedback, a reasoning count must be within --reasoning, and a timing a number of seconds.
  One field of a line is never trusted over the others that agree: one that disagrees with
  them is repaired, a model output they all contradict refused at its own line (so the line
  named is the first wrong one, and deleting it and the lines after it recomputes the
  uninterrupted run). A training line that fails is refused in one line naming the
  file and line (the steps after it were computed from it) unless it is the last one, which
  is dropped and its step recomputed; a test line that fails is dropped and its step
  recomputed (a test line stands alone);
- a query-aware strategy's contexts (``knn_*``) are not drawn again (that would score every
  step again): each must name earlier steps that the strategy's filter admits, each once, at
  most the context size.

What the log itself sorted out (lines that are not JSON, duplicated, out of order, of another
example than their step's, of steps not completed) comes in its notes. Nothing here writes: the
caller writes the repairs once every check that can refuse has passed, so a refusal leaves the
records (and the log) as they were.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Optional, TypeVar

from ..config import RunConfig, given
from ..errors import DamagedRecords
from ..method.agents import is_learner
from ..method.calls import ModelCall, declared_calls
from ..method.rewards import Reward
from ..records import TRAIN, RunLog
from ..records.lines import Kept, as_json_text, refused_line
from ..records.log import FIX_CONFIG
from ..records.plan import Plan
from ..records.schema import TestLine, TrainLine, UsageRecord
from ..records.typed import expected
from .assemble import MemoryRecords, assemble
from .data import RunData
from .replay import ContextsOnRecord, OnRecord, Unverifiable

L = TypeVar("L", TrainLine, TestLine)


@dataclass
class Checked:
    """The records a run continues from: ``train`` and ``test`` as an uninterrupted run wrote
    them (a test step left out is recomputed by the caller), ``repairs`` (one note per change
    made to damaged records; empty after a kill, whose cut line is no damage) and whether each
    file must be rewritten."""

    train: list[TrainLine]
    test: list[TestLine]
    repairs: list[str] = field(default_factory=list)
    rewrite_train: bool = False
    rewrite_test: bool = False

    @property
    def changed(self) -> bool:
        return bool(self.repairs or self.rewrite_train or self.rewrite_test)


# -- config.json against the data and the arguments -------------------------------------------------
def check_config(log: RunLog, data: RunData) -> Plan:
    """config.json (checked against itself by ``read_log``, and its arguments against the run's by
    the resume) against the data (no model needed); returns the plan it records. Refused in one line naming the field:
    config.json is not rebuilt, it says what the run is."""
    recorded, where = log.checked_config(), log.directory / "config.json"

    def refuse(what: str) -> DamagedRecords:
        return DamagedRecords(f"{where}: {what}; {FIX_CONFIG}")

    labels = data.task.labels
    if recorded.dataset.labels != list(labels):
        raise DamagedRecords(f"{log.directory}: the labels in config.json are not the task's ({len(labels)} labels "
                             f"{', '.join(labels[:4])}{', ...' if len(labels) > 4 else ''}); {FIX_CONFIG}")
    s, exemplars = recorded.spec, len(data.exemplars)  # the arguments as recorded (before an extension)
    pool = data.task.num_train - exemplars
    num_train = 0 if s.max_context_examples == 0 else (pool if s.train_k == -1 else min(s.train_k, pool))
    plan = Plan.of(given(s.icrl, "icrl"), recorded.resolved.max_context_examples, num_train, s.test_every)
    plan = plan.with_tests(e.start - 1 for e in recorded.extended if e.start <= plan.steps)
    expected_plan = {"steps": plan.steps, "test_steps": list(plan.test_steps), "num_exemplars": exemplars,
                     "train_examples": num_train, "test_examples": len(data.test)}
    for key, value in expected_plan.items():
        if getattr(recorded.resolved, key) != value:
            raise refuse(f"resolved.{key} is {getattr(recorded.resolved, key)!r}, the run plans {value!r}")
    record = data.record()
    for part in ("dataset", "test_set"):
        for key, value in record[part].items():
            if as_json_text(getattr(getattr(recorded, part), key)) != as_json_text(value):
                raise refuse(f"{part}.{key} is not the data's")
    ids = [e.id for e in data.train[:plan.steps]] if plan.mode != "zero_shot" else []
    if recorded.train_example_ids != ids:
        raise refuse("train_example_ids are not the training examples these arguments draw")
    task = data.task
    shots = [(e.id, task.prompt(e), task.answer(e)) for e in data.exemplars]
    if [(e.id, e.prompt, e.answer) for e in recorded.exemplars] != shots:
        raise refuse("exemplars are not the ones these arguments draw")
    return plan


# -- the lines against the rebuilt ones ---------------------------------------------------------------
def _differences(recorded: dict[str, Any], rebuilt: dict[str, Any]) -> list[str]:
    keys = list(dict.fromkeys([*rebuilt, *recorded]))
    changed = [k for k in keys if k not in recorded or k not in rebuilt or as_json_text(recorded[k]) != as_json_text(rebuilt[k])]
    if not changed and list(recorded) != list(rebuilt):
        changed = ["field order"]
    return changed


def _witnessed(recorded: dict[str, Any], rebuilt: dict[str, Any], witnesses: tuple[str, ...], what: str) -> None:
    """A recorded model output (``what``: its field) that every field computed from it
    (``witnesses``) contradicts was itself changed (or the line is another run's), or, with one
    witness, either may have been: neither can be trusted (Unverifiable). One field of several
    that disagrees is that field's damage, repaired."""
    present = [k for k in witnesses if k in rebuilt and rebuilt[k] is not None]
    if present and all(as_json_text(recorded.get(k)) != as_json_text(rebuilt[k]) for k in present):
        raise Unverifiable(f"has the {what} {recorded.get(what)!r}, which its {' and '.join(present)} "
                           f"contradict{'s' if len(present) == 1 else ''} (edited, or of another run)")


def _consistent(kept: Kept[TrainLine], line: TrainLine, reward_calls: list[ModelCall], learner: bool) -> None:
    """The fields of one training line against each other, through the rebuilt line (built from
    its recorded model outputs): the prediction against what is computed from it (its accuracy,
    and the feedback and reward of a rule; a reward a model gives follows its verdict, not the
    prediction), each verdict of a reward's call against its reward and feedback; an LLM's
    context and metrics against the strategy's draw. Unverifiable for a contradiction."""
    recorded, rebuilt = kept.raw, line.as_json()
    if not learner:  # a learner's every field is its own: rebuilt
        _same_decision(recorded, rebuilt)
        if line.prediction == kept.line.prediction and "prediction" not in kept.wrong:
            _witnessed(recorded, rebuilt, ("accuracy",) if reward_calls else ("accuracy", "feedback", "reward"),
                       "prediction")
    for call in reward_calls:
        _witnessed(recorded, rebuilt, ("reward", "feedback"), call.field or "")


def _same_decision(recorded: dict[str, Any], rebuilt: dict[str, Any]) -> None:
    """The context shown and the strategy's metrics identify the step of this run a model output
    belongs to: a line whose context is not the one the strategy draws was edited or is another
    run's (with another --seed, its draws differ), and its prediction cannot be trusted."""
    for key in ("context", "contexts", "metrics"):
        if key in rebuilt and as_json_text(recorded.get(key)) != as_json_text(rebuilt[key]):
            raise Unverifiable(f"has the {key} {recorded.get(key)!r}, not the one the strategy draws at this step "
                               f"({rebuilt[key]!r}): edited, or a line of another run")


class _Quiet(logging.Filter):
    """Keeps the replayed loop's log lines (test accuracies) out of the console and the log."""

    def __init__(self) -> None:
        super().__init__()
        self.thread = threading.get_ident()

    def filter(self, record: logging.LogRecord) -> bool:
        return record.thread != self.thread


def check_records(log: RunLog, config: RunConfig, data: RunData, plan: Plan, reward: Reward) -> Checked:
    """The lines of ``log`` (a run with this recorded ``plan``) checked line by line against the
    lines the run rebuilds (module docstring); DamagedRecords (one line) for what cannot be
    rebuilt."""
    quiet, logger = _Quiet(), logging.getLogger("icrl")
    logger.addFilter(quiet)
    try:
        return _check_records(log, config, data, plan, reward)
    finally:
        logger.removeFilter(quiet)


def _check_records(log: RunLog, config: RunConfig, data: RunData, plan: Plan, reward: Reward) -> Checked:
    lines = log.refuse().lines
    path = log.directory / TRAIN
    model = OnRecord(data.task.labels)
    capture = MemoryRecords()
    parts = assemble(config, data, plan, model.model, capture, reward=copy.copy(reward),
                     contexts=lambda strategy: ContextsOnRecord(strategy, model) if strategy.query_aware else strategy)
    loop, strategy = parts.loop, parts.strategy
    reward_calls = [call for call in declared_calls(parts.reward) if call.field]
    out = Checked([], [], list(log.problems), lines.rewrite_train, lines.rewrite_test)
    zero_shot = plan.mode == "zero_shot"
    steps = (1 if 0 in lines.test else 0) if zero_shot else len(lines.train)
    for t in range(steps):
        kept = None if zero_shot else lines.train[t]
        entry = lines.test.get(t)
        for answering in (model, strategy) if isinstance(strategy, ContextsOnRecord) else (model,):
            answering.step(kept, entry, data)
        try:
            loop.step(t)
            if kept is not None:  # its example is its step's (read_log)
                rebuilt = _as_recorded(capture.train[-1], kept)
                _consistent(kept, rebuilt, reward_calls, is_learner(config.shape.agent))
        except Unverifiable as exc:
            number = kept.number if kept is not None else 0
            if t < steps - 1:
                raise DamagedRecords(refused_line(path, number, f"(step {t}) {exc}")) from None
            out.repairs.append(f"train.jsonl line {number} (step {t} {exc}; its step is recomputed)")
            out.rewrite_train = out.rewrite_test = True  # its test line, if any, goes with it
            break
        if kept is not None:
            _take(out, "train", f"training step {t}'s", kept.raw, rebuilt)
        if t in plan.test_steps and entry is not None:
            _take_test(out, t, entry, capture.test[-1], model)
    return out


def _as_recorded(line: L, kept: Kept[Any]) -> L:
    """The rebuilt ``line`` with what only the run could measure taken from the ``kept`` one: its
    ``time_s`` (a number of seconds) and the API's ``usage`` (where recorded); Unverifiable where
    either is not of its kind."""
    if "time_s" in kept.wrong or kept.line.time_s < 0:
        raise Unverifiable(f"has time_s {kept.value('time_s')!r}, not a number of seconds")
    if "usage" in kept.wrong:
        raise Unverifiable(f"has the usage {kept.value('usage')!r}, not {expected(UsageRecord)}")
    return dataclasses.replace(line, time_s=kept.line.time_s, usage=kept.line.usage)


def _take(out: Checked, which: str, what: str, recorded: dict[str, Any], rebuilt: Any) -> None:
    """Continue from the ``rebuilt`` line (of ``which`` file), noting where ``recorded`` differs."""
    changed = _differences(recorded, rebuilt.as_json())
    if changed:
        out.repairs.append(f"{what} {', '.join(changed)}")
        setattr(out, f"rewrite_{which}", True)
    getattr(out, which).append(rebuilt)


def _take_test(out: Checked, t: int, entry: Kept[TestLine], line: TestLine, model: OnRecord) -> None:
    """Step ``t``'s recorded test line (``entry``) against the rebuilt ``line``: taken (repaired),
    or dropped to be recomputed when what the model said is unusable."""
    rebuilt: Optional[TestLine] = None
    try:
        rebuilt = _as_recorded(line, entry)
        _witnessed(entry.raw, rebuilt.as_json(), ("accuracy", "per_class_accuracy", "reward"), "predictions")
        _same_decision(entry.raw, rebuilt.as_json())
    except Unverifiable:
        model.test_ok = False
    if rebuilt is None or not model.test_ok:
        out.repairs.append(f"test.jsonl line {entry.number} (step {t}: predictions, contexts, usage or time_s "
                           f"unusable; recomputed)")
        out.rewrite_test = True
        return
    _take(out, "test", f"test step {t}'s", entry.raw, rebuilt)
