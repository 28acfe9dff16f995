"""The agent of the paper: an LLM that predicts with a context its strategy chooses.

Each training step t, in the published order: the strategy picks the context from the history
with ``default_rng(seed + t)``; in ICRL the model predicts the training input with it
(generation seed ``seed + t``); supervised ICL makes no call (the gold answer is shown). A test
step predicts every test prompt with the same context and seed. A query-aware strategy sees
the input it chooses a context for: the training input, and at a test step each test input,
whose context is drawn with ``query_rng(seed, t, i)``. Zero-shot has no strategy and no context.

Exploration beyond the paper (``icrl.method.exploration``, each off by default and drawing
nothing when off): before the strategy picks, ``--prob_reset`` may make it forget the history
so far; ``--p_exploration`` may replace the model's training prediction by a random label (no
model call); an approximate strategy with ``--ucb_alpha`` learns from each step's reward.
"""

from __future__ import annotations

import logging
from typing import Sequence

import numpy as np

from ..episode import Episode
from ..exploration import Exploration
from ..prompts import build_messages
from .policy import Decision, Policy

log = logging.getLogger("icrl")


def query_rng(seed: int, step: int, index: int) -> np.random.Generator:
    """The generator of test input ``index``'s context at ``step`` (query-aware strategies)."""
    return np.random.default_rng((seed + step, index + 1))


class LLMPolicy(Policy):
    """An LLM (``backend``) with a context strategy (None for zero-shot) in ``mode`` (icrl, icl or
    zero_shot). Declared like the learners, as the agent ``llm``."""

    name = "llm"
    title = "LLM"
    params: tuple = ()
    summary = "an LLM with a context strategy (the paper)"

    def __init__(self, backend, task, strategy, mode: str, spec, exemplars: Sequence = (), debug_k: int = 0):
        self.backend, self.task, self.strategy, self.mode = backend, task, strategy, mode
        self.seed, self.temperature = spec.seed, spec.temperature
        self.omit_feedback = spec.icrl_omit_feedback
        self.exemplars = list(exemplars)
        self.explore = Exploration.of(spec)
        self.debug_k = debug_k
        self.model_calls = 0
        self.visible_from = 0  # --prob_reset: the first step whose episode a context may hold

    def describe(self) -> dict:
        return self.backend.describe()

    @property
    def query_aware(self) -> bool:
        return bool(getattr(self.strategy, "query_aware", False))

    # -- the model ------------------------------------------------------------------------------
    def predict(self, rendered: list[str], seed: int, progress=None) -> list[str]:
        options = {} if progress is None else {"progress": progress}
        out = self.backend.predict(rendered, self.task.labels, self.temperature, seed, **options)
        if self.model_calls < self.debug_k:
            log.info("model call %d (%d prompts, seed %d); first prompt:\n%s\n-> %s",
                     self.model_calls, len(rendered), seed, rendered[0], out if len(out) <= 20 else out[:20])
        self.model_calls += 1
        return out

    def render(self, context: Sequence[Episode], prompt: str) -> str:
        messages, prefix = build_messages(
            self.task, context, prompt, self.mode, omit_feedback=self.omit_feedback,
            exemplars=self.exemplars, supports_system_role=self.backend.supports_system_role)
        return self.backend.render(messages, prefix)

    # -- the policy -----------------------------------------------------------------------------
    def act(self, step, prompt, history):
        fields: dict = {}
        if self.explore.prob_reset is not None:
            fields["reset"] = self.explore.resets_at(self.seed, step)
            if fields["reset"]:
                self.strategy.forget()
                self.visible_from = step
        visible = list(history[self.visible_from:])
        query = {"query": prompt} if self.query_aware else {}
        context = self.strategy.select(visible, np.random.default_rng(self.seed + step), **query)
        decision = Decision(context, self.strategy.metrics(), None, fields, visible)
        if self.mode != "icrl":  # supervised ICL: no call, no reward
            return decision
        explored = self.explore.explored_label(self.seed, step, self.task.labels)
        if self.explore.p_exploration is not None:
            fields["explored"] = explored is not None
        decision.explored = explored is not None
        decision.prediction = explored if explored is not None else \
            self.predict([self.render(context, prompt)], self.seed + step)[0]
        return decision

    def learn(self, step, decision, reward, answer):
        if decision.prediction is not None and not decision.explored:
            self.strategy.observe_reward(reward)  # --ucb_alpha: the shown context's reward

    def test(self, step, decision, prompts, progress=None):
        if self.query_aware:
            contexts = [self.strategy.select(decision.visible, query_rng(self.seed, step, i), query=p)
                        for i, p in enumerate(prompts)]
            rendered = [self.render(c, p) for c, p in zip(contexts, prompts)]
            shown = {"context_size": [len(c) for c in contexts],  # steps of the whole history
                     "contexts": [[e.step for e in c] for c in contexts]}
        else:
            rendered = [self.render(decision.context, p) for p in prompts]
            shown = {"context_size": len(decision.context), "context": decision.context_ids}
        return self.predict(rendered, self.seed + step, progress), shown

    def replay(self, records, history):
        if self.strategy is not None:
            self.explore.replay(self.strategy, history, records, self.seed)
        self.visible_from = self.explore.last_reset(self.seed, len(records) - 1)

    def recall(self, step, records, history):
        record = records[step]
        context = [history[i] for i in record["context"]]
        return Decision(context, record["metrics"], record["prediction"], {},
                        list(history[self.explore.last_reset(self.seed, step):step]))


def zero_shot_decision() -> Decision:
    """The decision of a zero-shot run's one test step: no context."""
    return Decision()

