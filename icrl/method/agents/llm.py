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

The strategy may make model calls of its own before it picks (``Strategy.prepare``: a written
guide), with the model of each call it declares (``icrl.method.calls``), which the composition
root (``icrl.run.assemble``) gives it. The policy's own calls are ``ANSWER`` (the training
input, made with ``backend``) and ``TEST_ANSWER`` (the test inputs, made with ``tester``: the
same model in a run). A model that reads no prompt (``reads_prompts = False``: a stand-in that
answers from the records or an estimate's) is given each call's input alone, unrendered.

Reasoning (``--reasoning N``, ours): at every call, training and test, the model first writes up
to N tokens freely (``icrl.backends.Reasoner.generate``; a thinking template in its thinking
mode, any other template after an instruction to think and then write the prediction prefix),
with the call's seed; the label is then chosen after that reasoning exactly as without it. Each
call's reasoning and its token count are recorded; the episodes that later contexts show are
the episodes without it.
"""

from __future__ import annotations

import copy
import logging
from typing import Any, Callable, Optional, Protocol, Sequence

import numpy as np

from ..calls import Model
from ..episode import Episode, StepRecord
from ..prompts import Exemplar, Prompter, Renderer
from ..registry import Param
from ..strategies.base import Strategy
from ..task import TaskView
from .policy import AgentSetting, Decision, Policy

REASONING = Param("reasoning", None, "think before each answer (ours): at every call the model first writes up to "
                  "this many tokens freely (a thinking template's thinking mode; else an instruction to think, then "
                  "the prediction prefix), then the label is chosen as without it; each call's reasoning is recorded, "
                  "later contexts show the episodes without it", type=int,
                  check=lambda n: None if n >= 1 else "a number of tokens >= 1", folder="reasoning",
                  folder_value=False, column="reasoning", label="reasoning {}", only="llm")

log = logging.getLogger("icrl")


class ActingModel(Model, Renderer, Protocol):
    """What the policy asks of its model: the calls of ``Model``, the prompts as ``Renderer``
    renders them (a stand-in that reads no prompt says so: ``reads_prompts = False``), and
    config.json's "backend"."""

    def describe(self) -> dict[str, Any]: ...


def query_rng(seed: int, step: int, index: int) -> np.random.Generator:
    """The generator of test input ``index``'s context at ``step`` (query-aware strategies)."""
    return np.random.default_rng((seed + step, index + 1))


class LLMPolicy(Policy):
    """An LLM (``backend``) with a context strategy (None for zero-shot) in ``mode`` (icrl, icl or
    zero_shot). Declared like the learners, as the agent ``llm``."""

    name = "llm"
    title = "LLM"
    params: tuple[Param, ...] = (REASONING,)
    summary = "an LLM with a context strategy (the paper)"

    def __init__(self, backend: ActingModel, task: TaskView, strategy: Optional[Strategy], mode: str,
                 setting: AgentSetting, exemplars: Sequence[Exemplar] = (), debug_k: int = 0,
                 tester: Optional[ActingModel] = None):
        self.backend, self.task, self.strategy, self.mode = backend, task, strategy, mode
        self.tester = backend if tester is None else tester
        self.seed, self.temperature = setting.seed, setting.temperature
        self.reasoning = setting.reasoning  # --reasoning: the token budget, or None
        self.prompter = Prompter(task, mode, setting.omit_feedback, tuple(exemplars), self.reasoning is not None)
        self.explore = setting.exploration
        self.debug_k = debug_k
        self.model_calls = 0
        self.visible_from = 0  # --prob_reset: the first step whose episode a context may hold

    def describe(self) -> dict[str, Any]:
        return self.backend.describe()

    @property
    def query_aware(self) -> bool:
        return bool(getattr(self.strategy, "query_aware", False))

    def _strategy(self) -> Strategy:
        """The strategy of a run with training steps (a zero-shot run has neither)."""
        if self.strategy is None:
            raise ValueError("a zero-shot run has no context strategy and no training step")
        return self.strategy

    # -- the model ------------------------------------------------------------------------------
    def predict(self, rendered: list[str], seed: int, progress: Optional[Callable[[int], None]] = None,
                model: Optional[ActingModel] = None) -> list[str]:
        options = {} if progress is None else {"progress": progress}
        out = (model or self.backend).predict(rendered, self.task.labels, self.temperature, seed, **options)
        if self.model_calls < self.debug_k:
            log.info("model call %d (%d prompts, seed %d); first prompt:\n%s\n-> %s",
                     self.model_calls, len(rendered), seed, rendered[0], out if len(out) <= 20 else out[:20])
        self.model_calls += 1
        return out

    def answer(self, contexts: Sequence[Sequence[Episode]], prompts: Sequence[str], seed: int, preamble: str = "",
               progress: Optional[Callable[[int], None]] = None,
               model: Optional[ActingModel] = None) -> tuple[list[str], dict[str, Any]]:
        """A label per prompt (each after its context) from ``model`` (default: ``backend``), and
        with --reasoning the record fields of the reasoning before each (``reasoning``,
        ``reasoning_tokens``: lists, one per prompt)."""
        model = model or self.backend
        reads = getattr(model, "reads_prompts", True)
        if self.reasoning is None:
            rendered = [self.prompter.render(model, c, p, preamble) for c, p in zip(contexts, prompts)] \
                if reads else list(prompts)
            return self.predict(rendered, seed, progress, model), {}
        if reads:
            frames = [self.prompter.frame(model, c, p, preamble) for c, p in zip(contexts, prompts)]
            written = model.generate([f.prompt for f in frames], self.reasoning, self.temperature, seed,
                                     stop=[frames[0].stop])
            rendered = [f.answer_prompt(g.text) for f, g in zip(frames, written)]
        else:
            written = model.generate(list(prompts), self.reasoning, self.temperature, seed)
            rendered = list(prompts)
        labels = self.predict(rendered, seed, progress, model)
        return labels, {"reasoning": [g.text for g in written], "reasoning_tokens": [g.tokens for g in written]}

    # -- the policy -----------------------------------------------------------------------------
    def act(self, step: int, prompt: str, history: Sequence[Episode]) -> Decision:
        strategy = self._strategy()
        fields: dict[str, Any] = {}
        if self.explore.prob_reset is not None:
            fields["reset"] = self.explore.resets_at(self.seed, step)
            if fields["reset"]:
                strategy.forget()
                self.visible_from = step
        visible = list(history[self.visible_from:])
        fields.update(strategy.prepare(step, visible, self.task, self.seed, self.temperature))
        query = {"query": prompt} if self.query_aware else {}
        context = strategy.select(visible, np.random.default_rng(self.seed + step), **query)
        preamble = strategy.preamble(visible, self.task.labels)
        decision = Decision(context, strategy.metrics(), None, fields, visible, preamble=preamble)
        if self.mode != "icrl":  # supervised ICL: no call, no reward
            return decision
        explored = self.explore.explored_label(self.seed, step, self.task.labels)
        if self.explore.p_exploration is not None:
            fields["explored"] = explored is not None
        decision.explored = explored is not None
        if explored is not None:
            decision.prediction = explored
        else:
            labels, reasoning = self.answer([context], [prompt], self.seed + step, preamble)
            decision.prediction = labels[0]
            fields.update({k: v[0] for k, v in reasoning.items()})
        return decision

    def learn(self, step: int, decision: Decision, reward: float, answer: str) -> None:
        if decision.prediction is not None and not decision.explored:
            self._strategy().observe_reward(reward, decision.context)  # --ucb_alpha, curated retrieval

    def test(self, step: int, decision: Decision, prompts: Sequence[str],
             progress: Optional[Callable[[int], None]] = None) -> tuple[list[str], dict[str, Any]]:
        shown: dict[str, Any]
        if self.query_aware:
            strategy = self._strategy()
            contexts = [strategy.select(decision.visible, query_rng(self.seed, step, i), query=p)
                        for i, p in enumerate(prompts)]
            shown = {"context_size": [len(c) for c in contexts],  # steps of the whole history
                     "contexts": [[e.step for e in c] for c in contexts]}
        else:
            contexts = [decision.context] * len(prompts)
            shown = {"context_size": len(decision.context), "context": decision.context_ids}
        predictions, reasoning = self.answer(contexts, prompts, self.seed + step, decision.preamble, progress,
                                             self.tester)
        return predictions, {**shown, **reasoning}

    def replay(self, records: Sequence[StepRecord], history: Sequence[Episode]) -> None:
        if self.strategy is not None:
            self.explore.replay(self.strategy, history, records, self.seed)
            self.strategy.restore(records, len(records) - 1)  # what its own calls answered: read back
        self.visible_from = self.explore.last_reset(self.seed, len(records) - 1)

    def recall(self, step: int, records: Sequence[StepRecord], history: Sequence[Episode]) -> Decision:
        record = records[step]
        context = [history[i] for i in record.context]
        visible = list(history[self.explore.last_reset(self.seed, step):step])
        strategy = self.strategy
        if strategy is not None and strategy.calls:  # its state at that step, from the records
            strategy = copy.copy(strategy)
            strategy.restore(records, step)
        return Decision(context, record.metrics, record.prediction, {}, visible,
                        preamble=strategy.preamble(visible, self.task.labels) if strategy else "")


def zero_shot_decision() -> Decision:
    """The decision of a zero-shot run's one test step: no context."""
    return Decision()

