"""A run's records checked against what the run itself would write, before its model loads.

Resuming (and reporting a run finished) trusts no line on its word: each is rebuilt by running
the run's own loop (``Loop.step``) over the recorded steps with a stand-in for the model that
answers every call with the predictions on record, and compared with the line on disk:

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

config.json is checked against the arguments and the data first, and lines that are not JSON,
duplicated, out of order, of another example than their step's or of steps the run has not
completed are sorted out (``icrl.run.recorded``, through ``icrl.records.lines``: the pass every
reader of records makes). Nothing here writes: the caller writes the repairs once every check that can
refuse has passed, so a refusal leaves the records (and the log) as they were.
"""

from __future__ import annotations

import copy
import logging
import math
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..config import RunConfig
from ..method.agents import is_learner
from ..method.calls import ANSWER, TEST_ANSWER, ModelCall, declared_calls
from ..records import TRAIN
from ..records.schema import UsageRecord
from ..records.typed import expected, fits
from .assemble import MemoryRecords, assemble
from .data import RunData
from .plan import Plan
from .recorded import as_json_text, is_int, is_seconds, read_lines, refuse_line


@dataclass
class Checked:
    """The records a run continues from: ``train`` and ``test`` as an uninterrupted run wrote
    them (a test step left out is recomputed by the caller), ``repairs`` (one note per change
    made to damaged records; empty after a kill, whose cut line is no damage) and whether each
    file must be rewritten."""

    train: list
    test: list
    repairs: list = field(default_factory=list)
    rewrite_train: bool = False
    rewrite_test: bool = False


class _Unverifiable(Exception):
    """What a line says that the run cannot rebuild nor accept (the message: what is wrong)."""


# -- replaying the loop -----------------------------------------------------------------------------
class _OnRecord:
    """The model's stand-in: each declared call (``icrl.method.calls``) is answered from the
    step's records (``model(call)``): a training call with the recorded prediction, a test call
    with the recorded test predictions (or, where none are usable, placeholders, and ``test_ok``
    turns False: that test step is recomputed), the reasoning before an answer (--reasoning) and
    what another part's call answered (a guide, a verdict: its declared field). None of it can
    be checked against a model; each must be of the right kind."""

    def __init__(self, labels):
        self.labels = list(labels)
        self.record: dict = {}
        self.test, self.test_reasoning, self.test_ok = None, None, True

    def step(self, record: dict, test_entry: Optional[dict], data: RunData) -> None:
        """Answer step ``record``'s calls (and its test line's, ``test_entry``, when it has one)."""
        self.record, self.test, self.test_ok, self.test_reasoning = record, None, True, None
        if test_entry is not None:
            self.test = _test_predictions(test_entry, data)
            self.test_reasoning = (test_entry.get("reasoning"), test_entry.get("reasoning_tokens"))

    def model(self, call: ModelCall) -> "_Answering":
        return _Answering(self, call)


class _Answering:
    """What answers one declared call from the records (``_OnRecord``); it reads no prompt."""

    supports_system_role = True
    thinks = False
    reads_prompts = False

    def __init__(self, on_record: _OnRecord, call: ModelCall):
        self.on, self.call = on_record, call

    def render(self, messages, prefix):
        return ""

    def generate(self, prompts, max_tokens, temperature, seed, stop=()):
        from ..backends import Generated

        on, call = self.on, self.call
        if call == ANSWER:
            text, tokens = on.record.get("reasoning"), on.record.get("reasoning_tokens")
            if not isinstance(text, str) or not is_int(tokens) or tokens < 0:
                raise _Unverifiable(f"has the reasoning {text!r} of {tokens!r} tokens, not a text and a count")
            if tokens > max_tokens:
                raise _Unverifiable(f"has reasoning_tokens {tokens}, more than the run's budget of {max_tokens} "
                                    f"(--reasoning)")
            return [Generated(text, tokens)]
        if call == TEST_ANSWER:
            texts, tokens = on.test_reasoning or (None, None)
            if not (isinstance(texts, list) and isinstance(tokens, list) and len(texts) == len(tokens) == len(prompts)
                    and all(isinstance(t, str) for t in texts)
                    and all(is_int(n) and 0 <= n <= max_tokens for n in tokens)):
                on.test_ok = False
                return [Generated("", 0) for _ in prompts]
            return [Generated(t, n) for t, n in zip(texts, tokens)]
        written = on.record.get(call.field)
        if not isinstance(written, str):
            raise _Unverifiable(f"has the {call.field} {written!r}, and its {call.kind} was written at this step")
        return [Generated(written, 0)]

    def predict(self, prompts, labels, temperature, seed, progress=None):
        on, call = self.on, self.call
        if call == TEST_ANSWER:
            if on.test is None:
                on.test_ok = False
                return [on.labels[0]] * len(prompts)
            return list(on.test)
        answer = on.record.get("prediction" if call == ANSWER else call.field)
        if answer not in labels:
            what = "a label of the task" if call == ANSWER else f"one of {', '.join(labels)}"
            raise _Unverifiable(f"has the {'prediction' if call == ANSWER else call.field} {answer!r}, which is not "
                                f"{what}")
        return [answer]


SCORES = ("knn_scores",)  # metrics a query-aware strategy computes by scoring: checked for shape only


class _ContextsOnRecord:
    """A query-aware strategy's stand-in: the recorded contexts, checked, not drawn again. What
    the strategy learns from rewards (curated retrieval) is learned by the strategy itself, so
    its other metrics (``pruned``) and its pool are the rebuilt ones; everything else (its
    preamble, its settings) is the strategy's."""

    query_aware = True
    stateful = False

    def __getattr__(self, name):
        if name == "strategy":  # not set yet
            raise AttributeError(name)
        return getattr(self.strategy, name)

    def __init__(self, strategy, model: _OnRecord):
        self.strategy, self.model = strategy, model
        self.train: Optional[list] = None
        self.train_metrics: Optional[dict] = None
        self.test: list = []
        self.training = False  # the step's training context is still to be drawn (it comes first)
        self._metrics: dict = {}

    def step(self, record: dict, test_entry: Optional[dict], data: RunData) -> None:
        """The contexts of step ``record`` (and of its test line, ``test_entry``)."""
        self.train, self.train_metrics, self.training = record.get("context"), record.get("metrics"), True
        if test_entry is not None:
            contexts = test_entry.get("contexts")
            self.test = list(contexts) if isinstance(contexts, list) and len(contexts) == len(data.test) else []

    def _episodes(self, history, ids) -> Optional[list]:
        by_step = {e.step: e for e in history}
        if not isinstance(ids, list) or len(ids) > self.strategy.max_examples or len(set(map(as_json_text, ids))) < len(ids) \
                or not all(is_int(i) and i in by_step and self.strategy.accept(by_step[i]) for i in ids):
            return None
        return [by_step[i] for i in ids]

    def _metrics_fit(self, metrics, chosen) -> bool:
        """The strategy's metric names; its scores one finite number per episode, the others (a
        learning strategy's, e.g. ``pruned``) the rebuilt ones."""
        shape = self.strategy.metrics()  # once a training step, as the run calls it
        if not isinstance(metrics, dict) or set(metrics) != set(shape):
            return False
        return all((isinstance(metrics[k], list) and len(metrics[k]) == len(chosen) and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in metrics[k]))
            if k in SCORES else as_json_text(metrics[k]) == as_json_text(shape[k]) for k in shape)

    def select(self, history, rng, query=None):
        if self.training:
            self.training = False
            chosen = self._episodes(history, self.train)
            metrics = self.train_metrics
            if chosen is None or not self._metrics_fit(metrics, chosen) or not isinstance(metrics, dict):
                raise _Unverifiable(f"has the context {self.train!r} with the metrics {self.train_metrics!r}, not what "
                                    f"the strategy can draw (earlier steps it admits, each once, at most "
                                    f"{self.strategy.max_examples}, a score each)")
            self._metrics = metrics
            return chosen
        ids = self.test.pop(0) if self.test else None
        chosen = self._episodes(history, ids)
        if chosen is None:
            self.model.test_ok = False
            return []
        return chosen

    def metrics(self):
        return dict(self._metrics)

    def reset(self):
        self.strategy.reset()

    def forget(self):
        self.strategy.forget()

    def observe_reward(self, reward, context=()):
        self.strategy.observe_reward(reward, context)


def _differences(recorded: dict, rebuilt: dict) -> list:
    keys = list(dict.fromkeys([*rebuilt, *recorded]))
    changed = [k for k in keys if k not in recorded or k not in rebuilt or as_json_text(recorded[k]) != as_json_text(rebuilt[k])]
    if not changed and list(recorded) != list(rebuilt):
        changed = ["field order"]
    return changed


def _witnessed(recorded: dict, rebuilt: dict, witnesses: tuple, what: str) -> None:
    """A recorded model output (``what``: its field) that every field computed from it
    (``witnesses``) contradicts was itself changed (or the line is another run's), or, with one
    witness, either may have been: neither can be trusted (_Unverifiable). One field of several
    that disagrees is that field's damage, repaired."""
    present = [k for k in witnesses if k in rebuilt and rebuilt[k] is not None]
    if present and all(as_json_text(recorded.get(k)) != as_json_text(rebuilt[k]) for k in present):
        raise _Unverifiable(f"has the {what} {recorded.get(what)!r}, which its {' and '.join(present)} "
                            f"contradict{'s' if len(present) == 1 else ''} (edited, or of another run)")


def _consistent(recorded: dict, rebuilt: dict, reward_calls: list, learner: bool) -> None:
    """The fields of one training line against each other, through the rebuilt line (built from
    its recorded model outputs): the prediction against what is computed from it (its accuracy,
    and the feedback and reward of a rule; a reward a model gives follows its verdict, not the
    prediction), each verdict of a reward's call against its reward and feedback; an LLM's
    context and metrics against the strategy's draw. _Unverifiable for a contradiction."""
    if not learner:  # a learner's every field is its own: rebuilt
        _same_decision(recorded, rebuilt)
        if rebuilt["prediction"] == recorded.get("prediction"):
            _witnessed(recorded, rebuilt, ("accuracy",) if reward_calls else ("accuracy", "feedback", "reward"),
                       "prediction")
    for call in reward_calls:
        _witnessed(recorded, rebuilt, ("reward", "feedback"), call.field)


def _same_decision(recorded: dict, rebuilt: dict) -> None:
    """The context shown and the strategy's metrics identify the step of this run a model output
    belongs to: a line whose context is not the one the strategy draws was edited or is another
    run's (with another --seed, its draws differ), and its prediction cannot be trusted."""
    for key in ("context", "contexts", "metrics"):
        if key in rebuilt and as_json_text(recorded.get(key)) != as_json_text(rebuilt[key]):
            raise _Unverifiable(f"has the {key} {recorded.get(key)!r}, not the one the strategy draws at this step "
                                f"({rebuilt[key]!r}): edited, or a line of another run")


def _test_predictions(record: dict, data: RunData) -> Optional[list]:
    predictions = record.get("predictions")
    labels = set(data.task.labels)
    if isinstance(predictions, list) and len(predictions) == len(data.test) and \
            all(isinstance(p, str) and p in labels for p in predictions):
        return predictions
    return None


class _Quiet(logging.Filter):
    """Keeps the replayed loop's log lines (test accuracies) out of the console and the log."""

    def __init__(self):
        super().__init__()
        self.thread = threading.get_ident()

    def filter(self, record: logging.LogRecord) -> bool:
        return record.thread != self.thread


def check_records(config: RunConfig, out_dir: Path, data: RunData, plan: Plan, reward) -> Checked:
    """The records of a run with this (recorded) ``plan``, checked line by line against the lines
    the run rebuilds (module docstring); DamagedRecords (one line) for what cannot be rebuilt."""
    quiet, logger = _Quiet(), logging.getLogger("icrl")
    logger.addFilter(quiet)
    try:
        return _check_records(config, out_dir, data, plan, reward)
    finally:
        logger.removeFilter(quiet)


def _check_records(config: RunConfig, out_dir: Path, data: RunData, plan: Plan, reward) -> Checked:
    lines = read_lines(out_dir, plan, data)
    path = out_dir / TRAIN
    model = _OnRecord(data.task.labels)
    capture = MemoryRecords()
    parts = assemble(config, data, plan, model.model, capture, reward=copy.copy(reward),
                     contexts=lambda strategy: _ContextsOnRecord(strategy, model) if strategy.query_aware else strategy)
    loop, strategy = parts.loop, parts.strategy
    reward_calls = [call for call in declared_calls(parts.reward) if call.field]
    out = Checked([], [], list(lines.notes), lines.rewrite_train, lines.rewrite_test)
    zero_shot = plan.mode == "zero_shot"
    steps = (1 if 0 in lines.test else 0) if zero_shot else len(lines.train)
    for t in range(steps):
        number, record = lines.train[t] if not zero_shot else (None, {})
        entry = lines.test.get(t)
        for answering in (model, strategy) if isinstance(strategy, _ContextsOnRecord) else (model,):
            answering.step(record, entry[1] if entry is not None else None, data)
        try:
            if not zero_shot and not is_seconds(record.get("time_s")):  # its example is its step's (read_lines)
                raise _Unverifiable(f"has time_s {record.get('time_s')!r}, not a number of seconds")
            loop.step(t)
            if not zero_shot:
                rebuilt = _as_recorded(capture.train[-1], record)
                _consistent(record, rebuilt, reward_calls, is_learner(config.spec.agent))
        except _Unverifiable as exc:
            if t < steps - 1:
                raise refuse_line(path, number, f"(step {t}) {exc}") from None
            out.repairs.append(f"train.jsonl line {number} (step {t} {exc}; its step is recomputed)")
            out.rewrite_train = out.rewrite_test = True  # its test line, if any, goes with it
            break
        if not zero_shot:
            _take(out, "train", f"training step {t}'s", record, rebuilt)
        if t in plan.test_steps and entry is not None:
            _take_test(out, t, entry, capture.test[-1], model)
    return out


def _as_recorded(line: dict, record: dict) -> dict:
    """The rebuilt ``line`` with what only the run could measure taken from ``record``: the
    API's ``usage`` (where recorded; an object of its counts, else _Unverifiable) and ``time_s``,
    in the order the loop writes them."""
    rebuilt = {k: v for k, v in line.items() if k not in ("usage", "time_s")}
    rebuilt["time_s"] = record.get("time_s")
    if "usage" in record:
        if not fits(record["usage"], UsageRecord):
            raise _Unverifiable(f"has the usage {record['usage']!r}, not {expected(UsageRecord)}")
        rebuilt["usage"] = record["usage"]
    return rebuilt


def _take(out: Checked, which: str, what: str, recorded: dict, rebuilt: dict) -> None:
    """Continue from the ``rebuilt`` line (of ``which`` file), noting where ``recorded`` differs."""
    changed = _differences(recorded, rebuilt)
    if changed:
        out.repairs.append(f"{what} {', '.join(changed)}")
        setattr(out, f"rewrite_{which}", True)
    getattr(out, which).append(rebuilt)


def _take_test(out: Checked, t: int, entry: tuple, line: dict, model: _OnRecord) -> None:
    """Step ``t``'s recorded test line (``entry``: line number, record) against the rebuilt
    ``line``: taken (repaired), or dropped to be recomputed when what the model said is unusable."""
    number, recorded = entry
    try:
        rebuilt = _as_recorded(line, recorded)
        _witnessed(recorded, rebuilt, ("accuracy", "per_class_accuracy", "reward"), "predictions")
        _same_decision(recorded, rebuilt)
    except _Unverifiable:
        model.test_ok = False
    if not model.test_ok or not is_seconds(recorded.get("time_s")):
        out.repairs.append(f"test.jsonl line {number} (step {t}: predictions, contexts, usage or time_s unusable; "
                           f"recomputed)")
        out.rewrite_test = True
        return
    _take(out, "test", f"test step {t}'s", recorded, rebuilt)
