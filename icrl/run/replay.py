"""The model's and a query-aware strategy's stand-ins of the records check (``icrl.run.rebuild``):
the run's own loop is replayed over the recorded steps with them, and they answer every call
and draw every retrieval context from what the records say, checking that it is of its kind
(``Unverifiable`` otherwise: the line cannot be trusted)."""

from __future__ import annotations

import math
from typing import Optional

from ..method.calls import ANSWER, TEST_ANSWER, ModelCall
from ..records.lines import as_json_text
from ..records.typed import is_int
from .data import RunData


class Unverifiable(Exception):
    """What a line says that the run cannot rebuild nor accept (the message: what is wrong)."""


class OnRecord:
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
    """What answers one declared call from the records (``OnRecord``); it reads no prompt."""

    supports_system_role = True
    thinks = False
    reads_prompts = False

    def __init__(self, on_record: OnRecord, call: ModelCall):
        self.on, self.call = on_record, call

    def render(self, messages, prefix):
        return ""

    def generate(self, prompts, max_tokens, temperature, seed, stop=()):
        from ..backends import Generated

        on, call = self.on, self.call
        if call == ANSWER:
            text, tokens = on.record.get("reasoning"), on.record.get("reasoning_tokens")
            if not isinstance(text, str) or not is_int(tokens) or tokens < 0:
                raise Unverifiable(f"has the reasoning {text!r} of {tokens!r} tokens, not a text and a count")
            if tokens > max_tokens:
                raise Unverifiable(f"has reasoning_tokens {tokens}, more than the run's budget of {max_tokens} "
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
            raise Unverifiable(f"has the {call.field} {written!r}, and its {call.kind} was written at this step")
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

    def __getattr__(self, name):
        if name == "strategy":  # not set yet
            raise AttributeError(name)
        return getattr(self.strategy, name)

    def __init__(self, strategy, model: OnRecord):
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
        if not isinstance(ids, list) or len(ids) > self.strategy.max_examples \
                or len(set(map(as_json_text, ids))) < len(ids) \
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

    def metrics(self):
        return dict(self._metrics)

    def reset(self):
        self.strategy.reset()

    def forget(self):
        self.strategy.forget()

    def observe_reward(self, reward, context=()):
        self.strategy.observe_reward(reward, context)


def _test_predictions(record: dict, data: RunData) -> Optional[list]:
    predictions = record.get("predictions")
    labels = set(data.task.labels)
    if isinstance(predictions, list) and len(predictions) == len(data.test) and \
            all(isinstance(p, str) and p in labels for p in predictions):
        return predictions
    return None
