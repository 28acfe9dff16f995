"""The random family (the paper's naive, naive+ and explorative ICRL): each past episode is kept
with probability p_keep, then the kept ones are cut to the context size, stateless."""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from ..episode import Episode
from .base import Strategy, register_strategy


class RandomStrategy(Strategy):
    """Keep each (filtered) episode with probability p_keep, then cut to max_examples.

    Random stream, in order: binomial(1, p_keep, size=n); permutation of the kept positions
    (always drawn, even when nothing or everything is kept); then ``_cut`` picks at most
    max_examples of them. The context is in chronological order.
    """

    family = "random"
    published = True

    def select(self, history: Sequence[Episode], rng: np.random.Generator,
               query: Optional[str] = None) -> list[Episode]:
        pool = [episode for episode in history if self.accept(episode)]
        keep = rng.binomial(1, self.p_keep, size=len(pool))
        idx = rng.permutation(np.nonzero(keep == 1)[0])
        return [pool[i] for i in self._cut(idx)]

    def _cut(self, idx: np.ndarray) -> np.ndarray:
        raise NotImplementedError


@register_strategy
class BiasedStart(RandomStrategy):
    """random_biased_start: of the kept episodes, the max_examples OLDEST ones.

    With p_keep = 1 the context freezes on the first max_examples episodes.
    """

    name = "random_biased_start"
    title = "oldest (start)"
    summary = "of the kept episodes, the oldest"

    def _cut(self, idx: np.ndarray) -> np.ndarray:
        return np.sort(idx)[: self.max_examples]


@register_strategy
class BiasedEnd(RandomStrategy):
    """random_biased_end: of the kept episodes, the max_examples MOST RECENT ones.

    With p_keep = 1 this is the paper's naive ICRL (a sliding window of recent episodes).
    """

    name = "random_biased_end"
    title = "most recent (end)"
    summary = "of the kept episodes, the most recent (naive ICRL at p_keep 1)"

    def _cut(self, idx: np.ndarray) -> np.ndarray:
        idx = np.sort(idx)
        return idx[max(len(idx) - self.max_examples, 0):]  # not idx[-m:]: m = 0 means none


@register_strategy
class Unbiased(RandomStrategy):
    """random_unbiased: of the kept episodes, max_examples chosen uniformly at random.

    With p_keep = 0.1 and the positive filter this is the paper's explorative ICRL.
    """

    name = "random_unbiased"
    title = "random (unbiased)"
    summary = "of the kept episodes, a uniform random choice (explorative ICRL: _only_positive, p_keep 0.1)"

    def _cut(self, idx: np.ndarray) -> np.ndarray:
        return np.sort(idx[: self.max_examples])
