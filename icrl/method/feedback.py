"""Feedback noise: the reward shown in context may be flipped, the accuracy never is."""

from __future__ import annotations

from typing import Optional

import numpy as np

from icrl.errors import UsageError


def shown_feedback(reward: float, seed: int, step: int, flip: bool, flip_prob: Optional[float]) -> float:
    """The feedback shown for step ``step``'s episode, given its true ``reward`` (1 or 0; a
    partial credit's 0.5, which a flip leaves 0.5).

    Without ``flip`` it is the reward. With ``flip`` it is ``1 - reward`` exactly when
    ``numpy.random.default_rng(seed + step).random() < flip_prob``: a fresh generator of its
    own, separate from the context strategy's, as in the published code.
    """
    if not flip:
        return reward
    if flip_prob is None or not 0 <= flip_prob <= 1:
        raise UsageError(f"flip_prob must be in [0, 1] when flipping feedback (got {flip_prob!r})")
    if np.random.default_rng(seed + step).random() < flip_prob:
        return 1 - reward
    return reward
