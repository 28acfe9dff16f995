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
- what only the model could say, an LLM's prediction, must be a label of the task that its
  accuracy and feedback do not both contradict, shown the context and metrics the strategy
  draws at that step with the run's seed (else the line was edited or is another run's), and a
  timing a number of seconds: a training line that fails is refused in one line naming the
  file and line (the steps after it were computed from it) unless it is the last one, which
  is dropped and its step recomputed; a test line that fails is dropped and its step
  recomputed (a test line stands alone);
- a query-aware strategy's contexts (``knn_*``) are not drawn again (that would score every
  step again): each must name earlier steps that the strategy's filter admits, each once, at
  most the context size.

Lines that are not JSON, duplicated, out of order or of steps the run has not completed are
sorted out first (``read_lines``); ``check_config`` checks config.json against the arguments
and the data. Nothing here writes: the caller writes the repairs once every check that can
refuse has passed, so a refusal leaves the records (and the log) as they were.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..config import RunConfig
from ..method.agents import is_learner
from ..method.calls import ANSWER, TEST_ANSWER, ModelCall
from ..records import CONFIG, FORMAT_VERSION, TEST, TRAIN, DamagedRecords, parse_jsonl
from ..records.schema import TestLine, TrainLine
from .assemble import MemoryRecords, assemble
from .data import RunData
from .plan import Plan

TRAIN_FIELDS = tuple(TrainLine.__dataclass_fields__)
TEST_FIELDS = tuple(TestLine.__dataclass_fields__)


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


def _dump(value) -> str:
    return json.dumps(value, ensure_ascii=False)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _seconds(value) -> bool:
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
    the run is (``resolved``, the data, the training stream, the exemplars)."""
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
    if is_learner(s.agent):
        expected_size = None
    elif s.max_context_examples is not None:
        expected_size = 0 if s.max_context_examples == 0 else s.max_context_examples - exemplars
    else:  # automatic: found from the window, checked against it once the model loads
        expected_size = size if _is_int(size) and size >= 1 else "a number of episodes >= 1"
    if _dump(size) != _dump(expected_size):
        raise refuse(f"resolved.max_context_examples is {size!r}, the arguments give {expected_size!r}")
    train_k = recorded["args"].get("train_k")
    if not _is_int(train_k) or train_k == 0 or train_k < -1:
        raise refuse(f"args.train_k is {train_k!r}")
    pool = data.task.num_train - exemplars
    num_train = 0 if s.max_context_examples == 0 else (pool if train_k == -1 else min(train_k, pool))
    extended = recorded.get("extended", [])
    if not isinstance(extended, list) or not all(
            isinstance(e, dict) and _is_int(e.get("from")) and _is_int(e.get("to")) and 0 < e["from"] < e["to"]
            for e in extended):
        raise refuse("extended is not a list of extensions (from, to steps)")
    plan = Plan.of(s.icrl, size, num_train, s.test_every)
    plan = plan.with_tests(e["from"] - 1 for e in extended if e["from"] <= plan.steps)
    expected = {"mode": plan.mode, "max_context_examples": size, "steps": plan.steps,
                "test_steps": list(plan.test_steps), "num_exemplars": exemplars, "train_examples": num_train,
                "test_examples": len(data.test)}
    for key, value in expected.items():
        if _dump(resolved.get(key)) != _dump(value):
            raise refuse(f"resolved.{key} is {resolved.get(key)!r}, the run plans {value!r}")
    record = data.record()
    for part in ("dataset", "test_set"):
        for key, value in record[part].items():
            if _dump(recorded[part].get(key)) != _dump(value):
                raise refuse(f"{part}.{key} is not the data's")
    ids = [e.id for e in data.train[:plan.steps]] if plan.mode != "zero_shot" else []
    if _dump(recorded.get("train_example_ids")) != _dump(ids):
        raise refuse("train_example_ids are not the training examples these arguments draw")
    task = data.task
    shots = [{"id": e.id, "prompt": task.prompt(e), "answer": task.answer(e)} for e in data.exemplars]
    if _dump(recorded.get("exemplars")) != _dump(shots):
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
    path = out_dir / TRAIN
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
        if not _is_int(step) or step < 0:
            if n == last:
                notes.append(f"train.jsonl line {n} (not a training step; its step is recomputed)")
                rewrite_train = True
                continue
            raise refuse_line(path, n, f"is not a training step (step {step!r})")
        if step in by_step:
            first, earlier = by_step[step]
            if _dump(earlier) != _dump(record):
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
        raise DamagedRecords(f"{path} line {n} is step {plan.steps}, but the run plans {plan.steps} steps (config.json): "
                             f"restore the files of one run, or delete that line and the ones after it, or pass "
                             f"--overwrite to start again")
    train = [by_step[s] for s in steps]
    done = 1 if plan.mode == "zero_shot" else len(train)

    t_lines, t_bad, t_cut = parse_jsonl(out_dir / TEST)
    rewrite_test = t_cut or bool(t_bad)
    notes += [f"test.jsonl line {n} (not JSON; its step is recomputed)" for n in t_bad]
    test: dict = {}
    order = []
    for n, record in t_lines:
        step = record.get("step") if isinstance(record, dict) else None
        if not _is_int(step) or step not in plan.test_steps:
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
    return Lines(train, test, notes, rewrite_train, rewrite_test)


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
            if not isinstance(text, str) or not _is_int(tokens) or tokens < 0:
                raise _Unverifiable(f"has the reasoning {text!r} of {tokens!r} tokens, not a text and a count")
            return [Generated(text, tokens)]
        if call == TEST_ANSWER:
            texts, tokens = on.test_reasoning or (None, None)
            if not (isinstance(texts, list) and isinstance(tokens, list) and len(texts) == len(tokens) == len(prompts)
                    and all(isinstance(t, str) for t in texts) and all(_is_int(n) and n >= 0 for n in tokens)):
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
        self.train, self.train_metrics, self.test = None, None, []
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
        if not isinstance(ids, list) or len(ids) > self.strategy.max_examples or len(set(map(_dump, ids))) < len(ids) \
                or not all(_is_int(i) and i in by_step and self.strategy.accept(by_step[i]) for i in ids):
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
            if k in SCORES else _dump(metrics[k]) == _dump(shape[k]) for k in shape)

    def select(self, history, rng, query=None):
        if self.training:
            self.training = False
            chosen = self._episodes(history, self.train)
            if chosen is None or not self._metrics_fit(self.train_metrics, chosen):
                raise _Unverifiable(f"has the context {self.train!r} with the metrics {self.train_metrics!r}, not what "
                                    f"the strategy can draw (earlier steps it admits, each once, at most "
                                    f"{self.strategy.max_examples}, a score each)")
            self._metrics = self.train_metrics
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
    changed = [k for k in keys if k not in recorded or k not in rebuilt or _dump(recorded[k]) != _dump(rebuilt[k])]
    if not changed and list(recorded) != list(rebuilt):
        changed = ["field order"]
    return changed


def _witnessed(recorded: dict, rebuilt: dict, witnesses: tuple, what: str) -> None:
    """A recorded model output that every field computed from it contradicts was itself changed
    (or the line is another run's): it cannot be trusted (_Unverifiable). One field alone that
    disagrees is that field's damage, repaired."""
    present = [k for k in witnesses if k in rebuilt and rebuilt[k] is not None]
    if present and all(_dump(recorded.get(k)) != _dump(rebuilt[k]) for k in present):
        raise _Unverifiable(f"has {what} that its {' and '.join(present)} contradict (edited, or of another run)")


def _same_decision(recorded: dict, rebuilt: dict) -> None:
    """The context shown and the strategy's metrics identify the step of this run a model output
    belongs to: a line whose context is not the one the strategy draws was edited or is another
    run's (with another --seed, its draws differ), and its prediction cannot be trusted."""
    for key in ("context", "contexts", "metrics"):
        if key in rebuilt and _dump(recorded.get(key)) != _dump(rebuilt[key]):
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
    lines = read_lines(out_dir, plan)
    path = out_dir / TRAIN
    model = _OnRecord(data.task.labels)
    capture = MemoryRecords()
    parts = assemble(config, data, plan, model.model, capture, reward=copy.copy(reward),
                     contexts=lambda strategy: _ContextsOnRecord(strategy, model) if strategy.query_aware else strategy)
    loop, strategy = parts.loop, parts.strategy
    notes = list(lines.notes)
    rewrite_train, rewrite_test = lines.rewrite_train, lines.rewrite_test
    train, test = [], []
    zero_shot = plan.mode == "zero_shot"
    steps = (1 if 0 in lines.test else 0) if zero_shot else len(lines.train)
    for t in range(steps):
        number, record = lines.train[t] if not zero_shot else (None, {})
        entry = lines.test.get(t)
        for answering in (model, strategy) if isinstance(strategy, _ContextsOnRecord) else (model,):
            answering.step(record, entry[1] if entry is not None else None, data)
        try:
            if not zero_shot:
                if record.get("example_id") != data.train[t].id:
                    raise _Unverifiable(f"is example {record.get('example_id')!r}, and step {t} of this run is "
                                        f"example {data.train[t].id!r}")
                if not _seconds(record.get("time_s")):
                    raise _Unverifiable(f"has time_s {record.get('time_s')!r}, not a number of seconds")
            loop.step(t)
            if not zero_shot:
                rebuilt = {**capture.train[-1], "time_s": record.get("time_s")}
                if not is_learner(config.spec.agent):  # a learner's every field is its own: rebuilt
                    _same_decision(record, rebuilt)
                    if rebuilt["prediction"] == record.get("prediction"):
                        _witnessed(record, rebuilt, ("accuracy", "feedback", "reward"), "prediction")
        except _Unverifiable as exc:
            if t < steps - 1:
                raise refuse_line(path, number, f"(step {t}) {exc}") from None
            notes.append(f"train.jsonl line {number} (step {t} {exc}; its step is recomputed)")
            rewrite_train = rewrite_test = True  # its test line, if any, goes with it
            break
        if not zero_shot:
            changed = _differences(record, rebuilt)
            if changed:
                notes.append(f"training step {t}'s {', '.join(changed)}")
                rewrite_train = True
            train.append(rebuilt)
        if t in plan.test_steps and entry is not None:
            number, recorded_test = entry
            rebuilt = {**capture.test[-1], "time_s": recorded_test.get("time_s")}
            try:
                _witnessed(recorded_test, rebuilt, ("accuracy", "per_class_accuracy", "reward"), "predictions")
                _same_decision(recorded_test, rebuilt)
            except _Unverifiable:
                model.test_ok = False
            if not model.test_ok or not _seconds(recorded_test.get("time_s")):
                notes.append(f"test.jsonl line {number} (step {t}: predictions, contexts or time_s unusable; "
                             f"recomputed)")
                rewrite_test = True
                continue
            changed = _differences(recorded_test, rebuilt)
            if changed:
                notes.append(f"test step {t}'s {', '.join(changed)}")
                rewrite_test = True
            test.append(rebuilt)
    return Checked(train, test, notes, rewrite_train, rewrite_test)
