"""The plan of a run, pure functions of its configuration and data sizes: the mode, the steps
and test steps (the summary of its records, results.json, is ``icrl.records.summary``)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Optional


def mode_of(icrl: bool, max_examples: Optional[int]) -> str:
    """As published: no context examples means zero-shot, whatever --icrl says."""
    if max_examples == 0:
        return "zero_shot"
    return "icrl" if icrl else "icl"


def plan_steps(mode: str, num_train: int, test_every: int, max_examples: Optional[int]) -> tuple[int, list[int]]:
    """(number of steps, test steps): 0, every t with (t + 1) % test_every == 0, and the last
    (``max_examples``: None for a learner, which has no context and runs in ICRL mode)."""
    if mode == "zero_shot":
        return 1, [0]
    steps = num_train
    tests = sorted({0, steps - 1} | {t for t in range(steps) if (t + 1) % test_every == 0})
    if mode == "icl" and max_examples is not None:  # stop at the first test step at or after a full context
        last = next((t for t in tests if t >= max_examples), steps - 1)
        steps, tests = last + 1, [t for t in tests if t <= last]
    return steps, tests


@dataclass(frozen=True)
class Plan:
    """What a run will do: its mode, context size, number of steps and test steps."""

    mode: str
    max_examples: Optional[int]  # None: a learner's (no context)
    steps: int
    test_steps: tuple[int, ...]

    @classmethod
    def of(cls, icrl: bool, max_examples: Optional[int], num_train: int, test_every: int) -> "Plan":
        mode = mode_of(icrl, max_examples)
        steps, tests = plan_steps(mode, num_train, test_every, max_examples)
        return cls(mode, max_examples, steps, tuple(tests))

    def with_tests(self, extra: Iterable[int]) -> "Plan":
        """The plan with more test steps (kept from the shorter runs an extended run grew from)."""
        return replace(self, test_steps=tuple(sorted(set(self.test_steps) | set(extra))))
