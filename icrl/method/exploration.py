"""Exploration beyond the paper: our definitions of the three flags the published script parsed
and never read (docs/method.md, "Beyond the paper: exploration and rewards"). All are off by
default; a run without them draws nothing more and records exactly what it recorded before.

- ``--p_exploration p`` (epsilon-greedy): at training step t, with probability p the step's
  prediction is a uniformly random label and the model is not called. The strategy's select is
  still called on that step (its context is recorded, and a stateful strategy's random stream
  stays aligned with the run's steps); the episode joins the history like any other. Test steps
  always use the model.
- ``--prob_reset p``: at the start of step t, with probability p, the strategy forgets every
  episode of steps < t: from then on only episodes of steps >= t can enter a context (a stateful
  strategy forgets its episodes: the approximate contexts restart empty).
- ``--ucb_alpha a`` (approximate strategies): the context shown is chosen by UCB over the K
  contexts (:class:`icrl.method.strategies.ucb.UCB`), not uniformly or by probability.

Each is declared once (:class:`ExplorationMethod`, registered in ``EXPLORATIONS``) with its
parameter; a method is on when its parameter is set. Each draw comes from a generator of its
own, ``step_rng(seed, t, stream)``, separate from the strategy's ``default_rng(seed + t)``,
from the feedback flipping's and from the query-aware test generators
(``icrl.method.agents.llm.query_rng``), so a flag changes only what it defines.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from ..errors import UsageError
from .episode import Episode, StepRecord
from .registry import Param, Registry, finite_non_negative, probability
from .shape import RunShape
from .strategies import strategy_of
from .strategies.approximate import Approximate
from .strategies.base import Strategy, StrategyChoice
from .strategies.ucb import UCB

EXPLORE_STREAM, RESET_STREAM = 1, 2


def step_rng(seed: int, step: int, stream: int) -> np.random.Generator:
    """Step ``step``'s generator of one exploration stream. Its entropy (seed + step, 0, stream)
    differs from the strategy's (seed + step) and from every query generator's (seed + step,
    index + 1) in the second word or the third, so none of them ever coincide."""
    return np.random.default_rng((seed + step, 0, stream))


# -- the declarations --------------------------------------------------------------------------
class ExplorationMethod:
    """One exploration method: its parameter (on when set), what it needs of the run (``check``),
    and how it joins the run's strategy (``attach``)."""

    name = ""
    param: Param
    summary = ""

    def check(self, run: RunShape) -> None:
        """Refuse in one line a run this method cannot act on (its parameter's range is checked
        before, from ``param``)."""

    def attach(self, strategy: Strategy, value: float) -> None:
        """Make ``strategy`` act on the method (most act in the loop instead: nothing here)."""


class EpsilonExploration(ExplorationMethod):
    name = "epsilon_greedy"
    param = Param("p_exploration", None, "epsilon-greedy: with this probability a training step's prediction is a "
                  "uniformly random label, with no model call (test steps always use the model)",
                  check=probability, folder="epsgreedy", column="p_exploration", label="epsilon {}", only="llm")
    summary = "a random label instead of the model's at a training step"

    def check(self, run: RunShape) -> None:
        if not run.icrl:
            raise UsageError("--p_exploration only applies to ICRL (it replaces a training prediction); use --icrl")


class Reset(ExplorationMethod):
    name = "reset"
    param = Param("prob_reset", None, "with this probability, at the start of a step, the strategy forgets every "
                  "earlier episode (approximate strategies: the contexts restart empty)",
                  check=probability, folder="forget", column="prob_reset", label="reset {}", only="llm")
    summary = "the strategy forgets every earlier episode"


class ContextUCB(ExplorationMethod):
    name = "ucb"
    param = Param("ucb_alpha", None, "approximate strategies: choose which of the K contexts to show by UCB over each "
                  "context's rewards, mean + ALPHA * sqrt(ln N / n), instead of "
                  "--approximate_context_sampling_method", check=finite_non_negative, folder="ctxucb",
                  column="ucb_alpha", label="UCB {}", only="llm")
    summary = "UCB over the K contexts of an approximate strategy"

    def check(self, run: RunShape) -> None:
        name = run.strategy
        if not name or strategy_of(name).family != "approximate":
            raise UsageError(f"--ucb_alpha chooses among the K contexts of an approximate strategy, not "
                             f"{name or 'none'}; use --context_strategy_name approximate or "
                             f"approximate_only_positive")
        if not run.icrl:
            raise UsageError("--ucb_alpha learns from rewards: use --icrl")

    def attach(self, strategy: Strategy, value: float) -> None:
        if isinstance(strategy, Approximate):  # the only family it accepts (check)
            strategy.chooser = UCB(value, strategy.max_contexts)


EXPLORATIONS: Registry[ExplorationMethod] = Registry("exploration", "exploration")
for _method in (EpsilonExploration(), Reset(), ContextUCB()):
    EXPLORATIONS.register(_method.name, _method)


def exploration_params() -> list[Param]:
    return [method.param for method in EXPLORATIONS]


def check_exploration(exploration: "Exploration", run: RunShape) -> None:
    """One-line errors for the exploration flags of a run (icrl.cli.validate)."""
    on = [method for method in EXPLORATIONS if exploration.value(method) is not None]
    for method in on:
        problem = method.param.problem(exploration.value(method))
        if problem:
            raise UsageError(problem)
    if on and run.zero_shot:
        raise UsageError(f"a zero-shot run (--max_context_examples 0) has no training steps to explore; drop "
                         f"{', '.join(m.param.flag for m in list(EXPLORATIONS)[:-1])} and "
                         f"{list(EXPLORATIONS)[-1].param.flag}")
    for method in on:
        method.check(run)


def strategy_of_run(choice: StrategyChoice, max_examples: int, exploration: "Exploration") -> Strategy:
    """The strategy a run chose (``choice``) with ``max_examples`` episodes in context, acting on
    the exploration methods that are on (``--ucb_alpha``)."""
    strategy = choice.build(max_examples)
    for method in EXPLORATIONS:
        value = exploration.value(method)
        if value is not None:
            method.attach(strategy, value)
    return strategy


# -- what the loop asks ----------------------------------------------------------------------
@dataclass(frozen=True)
class Exploration:
    """The exploration flags of one run; each None when off."""

    p_exploration: Optional[float] = None
    prob_reset: Optional[float] = None
    ucb_alpha: Optional[float] = None

    def value(self, method: ExplorationMethod) -> Optional[float]:
        """The value of ``method``'s parameter in this run (None: off)."""
        found: Optional[float] = getattr(self, method.param.name)
        return found

    def explored_label(self, seed: int, step: int, labels: Sequence[str]) -> Optional[str]:
        """The random label of an explored step, or None when the step uses the model: one
        ``random()`` < p, then (only when exploring) ``integers(len(labels))``."""
        if self.p_exploration is None:
            return None
        rng = step_rng(seed, step, EXPLORE_STREAM)
        if rng.random() < self.p_exploration:
            return labels[int(rng.integers(len(labels)))]
        return None

    def resets_at(self, seed: int, step: int) -> bool:
        """Whether the strategy forgets the history at the start of ``step`` (one ``random()``)."""
        return self.prob_reset is not None and step_rng(seed, step, RESET_STREAM).random() < self.prob_reset

    def last_reset(self, seed: int, step: int) -> int:
        """The first step whose episodes a context may hold at ``step``: the latest reset at or
        before it (0 when none)."""
        if self.prob_reset is None:
            return 0
        return next((t for t in range(step, 0, -1) if self.resets_at(seed, t)), 0)

    def replay(self, strategy: Strategy, history: Sequence[Episode], train_recs: Sequence[StepRecord],
               seed: int) -> Strategy:
        """Rebuild a stateful (or learning) strategy's state after steps 0..len(history)-1, as if
        they had run live: each step's reset (``forget``), select on the visible history (stateful
        ones), and the reward of a step that showed its context to the model (not explored; the
        recorded context). With no flag on this is the published ``replay`` (icrl.method.strategies.base)."""
        strategy.reset()
        if not (strategy.stateful or strategy.learns):
            return strategy
        start = 0
        for t in range(len(history)):
            if self.resets_at(seed, t):
                strategy.forget()
                start = t
            if strategy.stateful:
                strategy.select(history[start:t], np.random.default_rng(seed + t))
            if strategy.learns:  # what a learning strategy reports once a step (curated retrieval's pruned)
                strategy.metrics()
            record = train_recs[t]
            if not record.explored and record.prediction is not None and record.earned is not None:
                strategy.observe_reward(record.earned, [history[i] for i in record.context])
        return strategy
