"""The model's and a query-aware strategy's stand-ins of the records check (``icrl.run.rebuild``):
the run's own loop is replayed over the recorded steps with them, and they answer every call
and draw every retrieval context from what the records say, checking that it is of its kind
(``Unverifiable`` otherwise: the line cannot be trusted)."""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

import numpy as np

from ..method.calls import ANSWER, TEST_ANSWER, ModelCall
from ..method.episode import Episode
from ..method.strategies.base import Strategy
from ..records.lines import Kept, as_json_text
from ..records.schema import TestLine, TrainLine
from ..records.typed import is_int
from .data import RunData

if TYPE_CHECKING:
    from ..backends import Generated

TRAIN_FIELDS = frozenset(f.name for f in dataclasses.fields(TrainLine))
PREDICTION, REASONING, REASONING_TOKENS = "prediction", "reasoning", "reasoning_tokens"  # the model's fields


class Unverifiable(Exception):
    """What a line says that the run cannot rebuild nor accept (the message: what is wrong)."""


class OnRecord:
    """The model's stand-in: each declared call (``icrl.method.calls``) is answered from the
    step's records (``model(call)``): a training call with the recorded prediction, a test call
    with the recorded test predictions (or, where none are usable, placeholders, and ``test_ok``
    turns False: that test step is recomputed), the reasoning before an answer (--reasoning) and
    what another part's call answered (a guide, a verdict: its declared field). None of it can
    be checked against a model; each must be of the right kind."""

    def __init__(self, labels: Sequence[str]) -> None:
        self.labels = list(labels)
        self.record: Optional[Kept[TrainLine]] = None
        self.test: Optional[list[str]] = None
        self.test_line: Optional[Kept[TestLine]] = None
        self.test_ok = True

    def step(self, record: Optional[Kept[TrainLine]], test_line: Optional[Kept[TestLine]], data: RunData) -> None:
        """Answer the calls of step ``record`` (None: a zero-shot run's) and of its test line."""
        self.record, self.test_line, self.test, self.test_ok = record, test_line, None, True
        if test_line is not None:
            self.test = _test_predictions(test_line, data)

    def recorded(self, name: str) -> Any:
        """What the step's training line holds in field ``name``; Unverifiable where it is not of
        its type (a declared call's answer: its field in ``answers``)."""
        kept = self.record
        if kept is None:
            raise Unverifiable("is no training line")
        if name in kept.wrong:
            raise Unverifiable(f"has the {name} {kept.wrong[name]!r}, not of its type")
        return getattr(kept.line, name) if name in TRAIN_FIELDS else kept.line.answers.get(name)

    def model(self, call: ModelCall) -> "_Answering":
        return _Answering(self, call)


class _Answering:
    """What answers one declared call from the records (``OnRecord``); it reads no prompt."""

    supports_system_role = True
    thinks = False
    reads_prompts = False

    def __init__(self, on_record: OnRecord, call: ModelCall) -> None:
        self.on, self.call = on_record, call

    def render(self, messages: Sequence[dict[str, Any]], prefix: str) -> str:
        return ""

    def generate(self, prompts: Sequence[str], max_tokens: int, temperature: float, seed: int,
                 stop: Sequence[str] = ()) -> list[Generated]:
        from ..backends import Generated

        on, call = self.on, self.call
        if call == ANSWER:
            text, tokens = on.recorded(REASONING), on.recorded(REASONING_TOKENS)
            if not isinstance(text, str) or not is_int(tokens) or tokens < 0:
                raise Unverifiable(f"has the reasoning {text!r} of {tokens!r} tokens, not a text and a count")
            if tokens > max_tokens:
                raise Unverifiable(f"has reasoning_tokens {tokens}, more than the run's budget of {max_tokens} "
                                    f"(--reasoning)")
            return [Generated(text, tokens)]
        if call == TEST_ANSWER:
            kept = on.test_line
            texts, tokens = (kept.line.reasoning, kept.line.reasoning_tokens) if kept is not None else (None, None)
            if kept is None or {REASONING, REASONING_TOKENS} & set(kept.wrong) or texts is None or tokens is None \
                    or not len(texts) == len(tokens) == len(prompts) or not all(0 <= n <= max_tokens for n in tokens):
                on.test_ok = False
                return [Generated("", 0) for _ in prompts]
            return [Generated(t, n) for t, n in zip(texts, tokens)]
        written = on.recorded(call.field or "")
        if not isinstance(written, str):
            raise Unverifiable(f"has the {call.field} {written!r}, and its {call.kind} was written at this step")
        return [Generated(written, 0)]

    def predict(self, prompts: Sequence[str], labels: Sequence[str], temperature: float, seed: int,
                progress: Optional[Callable[[int], None]] = None) -> list[str]:
        on, call = self.on, self.call
        if call == TEST_ANSWER:
            if on.test is None:
                on.test_ok = False
                return [on.labels[0]] * len(prompts)
            return list(on.test)
        answer = on.recorded(PREDICTION if call == ANSWER else call.field or "")
        if answer not in labels:
            what = "a label of the task" if call == ANSWER else f"one of {', '.join(labels)}"
            raise Unverifiable(f"has the {'prediction' if call == ANSWER else call.field} {answer!r}, which is not "
                                f"{what}")
        return [answer]


SCORES = ("knn_scores",)  # metrics a query-aware strategy computes by scoring: checked for shape only


class ContextsOnRecord:
    """A query-aware strategy's stand-in: the recorded contexts, checked, not drawn again. What
    the strategy learns from rewards (curated retrieval) is learned by the strategy itself, so
    its other metrics (``pruned``) and its pool are the rebuilt ones; everything else (its
    preamble, its settings) is the strategy's."""

    query_aware = True
    stateful = False

    def __getattr__(self, name: str) -> Any:
        if name == "strategy":  # not set yet
            raise AttributeError(name)
        return getattr(self.strategy, name)

    def __init__(self, strategy: Strategy, model: OnRecord) -> None:
        self.strategy, self.model = strategy, model
        self.train: object = None  # the step's recorded context and metrics, as recorded: checked when drawn
        self.train_metrics: object = None
        self.test: list[list[int]] = []
        self.training = False  # the step's training context is still to be drawn (it comes first)
        self._metrics: dict[str, Any] = {}

    def step(self, record: Optional[Kept[TrainLine]], test_line: Optional[Kept[TestLine]], data: RunData) -> None:
        """The contexts of step ``record`` (and of its test line)."""
        self.training = True
        self.train = record.value("context") if record is not None else None
        self.train_metrics = record.value("metrics") if record is not None else None
        if test_line is not None:
            contexts = None if "contexts" in test_line.wrong else test_line.line.contexts
            self.test = list(contexts) if contexts is not None and len(contexts) == len(data.test) else []

    def _episodes(self, history: Sequence[Episode], ids: object) -> Optional[list[Episode]]:
        by_step = {e.step: e for e in history}
        if not isinstance(ids, list) or len(ids) > self.strategy.max_examples \
                or len(set(map(as_json_text, ids))) < len(ids) \
                or not all(is_int(i) and i in by_step and self.strategy.accept(by_step[i]) for i in ids):
            return None
        return [by_step[i] for i in ids]

    def _metrics_fit(self, metrics: object, chosen: Sequence[Episode]) -> bool:
        """The strategy's metric names; its scores one finite number per episode, the others (a
        learning strategy's, e.g. ``pruned``) the rebuilt ones."""
        shape = self.strategy.metrics()  # once a training step, as the run calls it
        if not isinstance(metrics, dict) or set(metrics) != set(shape):
            return False
        return all((isinstance(metrics[k], list) and len(metrics[k]) == len(chosen) and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in metrics[k]))
            if k in SCORES else as_json_text(metrics[k]) == as_json_text(shape[k]) for k in shape)

    def select(self, history: Sequence[Episode], rng: np.random.Generator,
               query: Optional[str] = None) -> list[Episode]:
        if self.training:
            self.training = False
            chosen = self._episodes(history, self.train)
            metrics = self.train_metrics
            if chosen is None or not self._metrics_fit(metrics, chosen) or not isinstance(metrics, dict):
                raise Unverifiable(f"has the context {self.train!r} with the metrics {self.train_metrics!r}, not what "
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

    def metrics(self) -> dict[str, Any]:
        return dict(self._metrics)

    def reset(self) -> None:
        self.strategy.reset()

    def forget(self) -> None:
        self.strategy.forget()

    def observe_reward(self, reward: float, context: Sequence[Episode] = ()) -> None:
        self.strategy.observe_reward(reward, context)


def _test_predictions(kept: Kept[TestLine], data: RunData) -> Optional[list[str]]:
    """A test line's predictions, where they are one label per test example."""
    predictions, labels = kept.line.predictions, set(data.task.labels)
    if "predictions" in kept.wrong or len(predictions) != len(data.test) or any(p not in labels for p in predictions):
        return None
    return predictions
