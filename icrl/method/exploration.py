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
  strategy is reset: the approximate contexts restart empty).
- ``--ucb_alpha a`` (approximate strategies): the context shown is chosen by UCB over the K
  contexts (``UCBApproximate``), not uniformly or by probability.

Each draw comes from a generator of its own, ``step_rng(seed, t, stream)``, separate from the
strategy's ``default_rng(seed + t)``, from the feedback flipping's and from the query-aware test
generators (``icrl.run.loop.query_rng``), so a flag changes only what it defines.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from .strategies.base import Approximate, replay
from ..errors import UsageError

EXPLORE_STREAM, RESET_STREAM = 1, 2


def step_rng(seed: int, step: int, stream: int) -> np.random.Generator:
    """Step ``step``'s generator of one exploration stream. Its entropy (seed + step, 0, stream)
    differs from the strategy's (seed + step) and from every query generator's (seed + step,
    index + 1) in the second word or the third, so none of them ever coincide."""
    return np.random.default_rng((seed + step, 0, stream))


@dataclass(frozen=True)
class Exploration:
    """The exploration flags of one run; each None when off."""

    p_exploration: Optional[float] = None
    prob_reset: Optional[float] = None
    ucb_alpha: Optional[float] = None

    @classmethod
    def of(cls, spec) -> "Exploration":
        return cls(spec.p_exploration, spec.prob_reset, spec.ucb_alpha)

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

    def replay(self, strategy, history: Sequence, train_recs: Sequence[dict], seed: int):
        """Rebuild a stateful strategy's state after steps 0..len(history)-1, as if they had run
        live: the published ``context.replay`` when no flag acts on the strategy; else each step's
        reset, select on the visible history, and (UCB) the observed reward of a step that showed
        its context (not explored)."""
        if self.prob_reset is None and not isinstance(strategy, UCBApproximate):
            return replay(strategy, history, seed)
        strategy.reset()
        if not strategy.stateful:
            return strategy
        start = 0
        for t in range(len(history)):
            if self.resets_at(seed, t):
                getattr(strategy, "reset_history", strategy.reset)()
                start = t
            strategy.select(history[start:t], np.random.default_rng(seed + t))
            if isinstance(strategy, UCBApproximate) and not train_recs[t].get("explored"):
                record = train_recs[t]
                strategy.observe_reward(record["reward"] if "reward" in record else record["accuracy"])
        return strategy


def validate(spec) -> None:
    """One-line errors for the exploration flags and the reward of a run (cli.validate)."""
    strategy = spec.context_strategy_name or ""
    for name in ("p_exploration", "prob_reset"):
        value = getattr(spec, name)
        if value is not None and not 0 <= value <= 1:
            raise UsageError(f"--{name} must be a probability in [0, 1], got {value}")
    if spec.max_context_examples == 0 and any(getattr(spec, n) is not None for n in ("p_exploration", "prob_reset",
                                                                                      "ucb_alpha")):
        raise UsageError("a zero-shot run (--max_context_examples 0) has no training steps to explore; drop "
                         "--p_exploration, --prob_reset and --ucb_alpha")
    if spec.p_exploration is not None and not spec.icrl:
        raise UsageError("--p_exploration only applies to ICRL (it replaces a training prediction); use --icrl")
    if spec.ucb_alpha is not None:
        if not strategy.startswith("approximate"):
            raise UsageError(f"--ucb_alpha chooses among the K contexts of an approximate strategy, not "
                             f"{strategy or 'none'}; use --context_strategy_name approximate or "
                             f"approximate_only_positive")
        if not spec.icrl:
            raise UsageError("--ucb_alpha learns from rewards: use --icrl")
        if not (0 <= spec.ucb_alpha < math.inf):
            raise UsageError(f"--ucb_alpha must be a finite number >= 0, got {spec.ucb_alpha}")
    from .rewards import reward_names

    if spec.reward not in reward_names():
        raise UsageError(f"unknown --reward {spec.reward!r}; choose one of: {', '.join(reward_names())}")
    if spec.reward != "exact_match" and not spec.icrl:
        raise UsageError(f"--reward {spec.reward} only applies to ICRL; drop it or use --icrl")


class UCBApproximate(Approximate):
    """The approximate strategy, its shown context chosen by UCB (``--ucb_alpha``), our definition.

    The K contexts grow exactly as in ``Approximate`` (same draws). Then, instead of drawing the
    index, it takes the context k with the highest

        mean_k + alpha * sqrt(ln N / n_k)

    where n_k is the number of steps that showed context k so far, mean_k the mean reward of
    those steps and N the sum of the n_k. A context never shown comes first; ties (among
    untried contexts, or equal scores) go to the lowest index. No draw is made for the index.
    The reward is the step's reward (``observe_reward``; never flipped), observed only for steps that
    showed the context to the model (not explored steps). A reset (``--prob_reset``) empties
    the contexts but keeps the statistics: they belong to the K slots, not to their episodes.
    """

    def __init__(self, *args, alpha: float, **kwargs):
        self.alpha = alpha
        super().__init__(*args, **kwargs)

    def reset(self):
        super().reset()
        self.counts = [0] * self.max_contexts
        self.sums = [0.0] * self.max_contexts
        self._scores: list = [None] * self.max_contexts

    def reset_history(self):
        """Forget the episodes (``--prob_reset``), keep the slots' statistics."""
        counts, sums = self.counts, self.sums
        self.reset()
        self.counts, self.sums = counts, sums

    def _pick(self, rng, early: bool) -> int:
        total = sum(self.counts)
        scores = []
        for n, s in zip(self.counts, self.sums):
            scores.append(math.inf if n == 0 else s / n + self.alpha * math.sqrt(math.log(total) / n))
        self._scores = scores
        return max(range(self.max_contexts), key=lambda k: (scores[k], -k))

    def observe_reward(self, reward) -> None:
        """The reward of the step that showed the last chosen context."""
        k = self._last_index
        self.counts[k] += 1
        self.sums[k] += float(reward)

    def metrics(self):
        out = super().metrics()
        if out:
            k = self._last_index
            score = self._scores[k]
            out["ucb"] = {"score": None if score == math.inf else score, "counts": list(self.counts),
                          "means": [s / n if n else None for s, n in zip(self.sums, self.counts)]}
        return out


def with_ucb(strategy, alpha: Optional[float]):
    """``strategy`` as a UCBApproximate when ``alpha`` is set (validate checked it is approximate)."""
    if alpha is None:
        return strategy
    if not isinstance(strategy, Approximate):
        raise UsageError("--ucb_alpha needs an approximate strategy")
    return UCBApproximate(strategy.max_examples, strategy.p_keep, strategy.accept, max_contexts=strategy.max_contexts,
                          sampling_method=strategy.sampling_method, alpha=float(alpha))
