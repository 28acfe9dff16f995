"""Reward functions: a prediction and the gold label -> the reward (recorded as the step's
accuracy) and the feedback shown in context.

    reward = make_reward()                                  # exact match, the published reward
    accuracy, feedback = reward(prediction, answer, seed=seed, step=t)

``score`` is the reward; ``shown`` turns it into the feedback the prompt shows (1 or 0: the
prompt says right or wrong), which is then flipped with --icrl_flip_feedback exactly as
``icrl.feedback.shown_feedback`` does (its own generator, seeded seed + step), so the published
runs keep their random streams. Omitting the feedback (--icrl_omit_feedback)
is a matter of the prompt (``icrl.prompts``), not of the reward. A new reward subclasses
``Reward`` and is registered with ``register_reward``.
"""

from __future__ import annotations

from typing import Callable, Optional

from .errors import UsageError
from .feedback import shown_feedback


class Reward:
    """Scores a prediction against the gold label; ``flip``/``flip_prob``: the feedback ablation."""

    name = "reward"

    def __init__(self, flip: bool = False, flip_prob: Optional[float] = None):
        self.flip, self.flip_prob = flip, flip_prob

    def score(self, prediction: str, answer: str):
        """The reward of ``prediction`` (recorded as the step's accuracy)."""
        raise NotImplementedError

    def shown(self, reward) -> int:
        """The feedback a reward shows in context, 1 (right) or 0 (wrong), before any flipping."""
        return reward

    def __call__(self, prediction: str, answer: str, *, seed: int, step: int) -> tuple:
        """(reward, shown feedback) of one training step."""
        reward = self.score(prediction, answer)
        return reward, shown_feedback(self.shown(reward), seed, step, self.flip, self.flip_prob)


class ExactMatch(Reward):
    """1 when the predicted label is the gold label, else 0 (the paper's reward)."""

    name = "exact_match"

    def score(self, prediction, answer):
        return int(prediction == answer)


REWARDS: dict[str, Callable[..., Reward]] = {"exact_match": ExactMatch}
DEFAULT_REWARD = "exact_match"


def register_reward(name: str, factory: Callable[..., Reward]) -> None:
    """Make ``make_reward(name)`` build ``factory(flip=..., flip_prob=...)``."""
    REWARDS[name] = factory


def make_reward(name: str = DEFAULT_REWARD, flip: bool = False, flip_prob: Optional[float] = None) -> Reward:
    if name not in REWARDS:
        raise UsageError(f"unknown reward {name!r}; choose one of: {', '.join(REWARDS)}")
    return REWARDS[name](flip=flip, flip_prob=flip_prob)
