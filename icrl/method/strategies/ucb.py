"""UCB over the K contexts of an approximate strategy (``--ucb_alpha``; ours, not the paper's):
which of the K contexts to show, chosen from the rewards of the steps that showed each."""

from __future__ import annotations

import math
from typing import Any, Optional


class UCB:
    """Picks the context k with the highest

        mean_k + alpha * sqrt(ln N / n_k)

    where n_k is the number of steps that showed context k so far, mean_k the mean reward of
    those steps and N the sum of the n_k. A context never shown comes first; ties (among
    untried contexts, or equal scores) go to the lowest index. No draw is made. The reward is
    the step's reward (never flipped), observed only for steps that showed the context to the
    model (not explored steps). A reset (``--prob_reset``) empties the contexts but keeps these
    statistics: they belong to the K slots, not to their episodes (``Approximate.forget``)."""

    def __init__(self, alpha: float, contexts: int):
        self.alpha, self.k = float(alpha), contexts
        self.reset()

    def reset(self) -> None:
        self.counts = [0] * self.k
        self.sums = [0.0] * self.k
        self._scores: list[float] = [math.inf] * self.k  # inf: not tried yet

    def pick(self) -> int:
        total = sum(self.counts)
        self._scores = [math.inf if n == 0 else s / n + self.alpha * math.sqrt(math.log(total) / n)
                        for n, s in zip(self.counts, self.sums)]
        return max(range(self.k), key=lambda i: (self._scores[i], -i))

    def observe(self, k: Optional[int], reward: float) -> None:
        """The reward of the step that showed context ``k``."""
        assert k is not None, "a reward follows the pick that showed a context"
        self.counts[k] += 1
        self.sums[k] += float(reward)

    def metrics(self, k: int) -> dict[str, Any]:
        """``ucb``: the shown context's score (None while untried), every slot's count and mean."""
        score = self._scores[k]
        return {"ucb": {"score": None if score == math.inf else score, "counts": list(self.counts),
                        "means": [s / n if n else None for s, n in zip(self.sums, self.counts)]}}
