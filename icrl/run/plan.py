"""The plan of a run, pure functions of its configuration and data sizes: the mode, the steps
and test steps, and the summary (results.json) of its records."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence


def mode_of(icrl: bool, max_examples: int) -> str:
    """As published: no context examples means zero-shot, whatever --icrl says."""
    if max_examples == 0:
        return "zero_shot"
    return "icrl" if icrl else "icl"


def plan_steps(mode: str, num_train: int, test_every: int, max_examples: int) -> tuple[int, list[int]]:
    """(number of steps, test steps): 0, every t with (t + 1) % test_every == 0, and the last."""
    if mode == "zero_shot":
        return 1, [0]
    steps = num_train
    tests = sorted({0, steps - 1} | {t for t in range(steps) if (t + 1) % test_every == 0})
    if mode == "icl":  # stop at the first test step at or after a full context
        last = next((t for t in tests if t >= max_examples), steps - 1)
        steps, tests = last + 1, [t for t in tests if t <= last]
    return steps, tests


def steps_done(mode: str, train: Sequence[dict], test: Sequence[dict]) -> int:
    """Completed steps: training records, or for zero-shot its one test step."""
    return (1 if test else 0) if mode == "zero_shot" else len(train)


def summarize(train: Sequence[dict], test: Sequence[dict], steps: int, mode: str) -> dict:
    """results.json: final/best test accuracy, regret, accuracy per test step, time per step."""
    done = len(test) > 0 if mode == "zero_shot" else len(train) == steps
    accuracy = {r["step"]: r["accuracy"] for r in test}
    best = max(accuracy.items(), key=lambda kv: (kv[1], -kv[0])) if accuracy else (None, None)
    predicted = [r["accuracy"] for r in train if r["accuracy"] is not None]
    # A training record's time covers its whole step, the step's test included.
    times = [r["time_s"] for r in train] or [r["time_s"] for r in test]
    return {
        "finished": done, "mode": mode, "total_steps": steps,
        "steps_completed": steps_done(mode, train, test),
        "final_test_accuracy": test[-1]["accuracy"] if test else None,
        "best_test_accuracy": best[1], "best_test_step": best[0],
        "regret": (len(predicted) - sum(predicted)) if mode == "icrl" else None,
        "train_accuracy": (sum(predicted) / len(predicted)) if predicted else None,
        "test_accuracy": {str(k): v for k, v in accuracy.items()},
        "mean_step_time_s": (sum(times) / len(times)) if times else None,
        "total_time_s": sum(times),
    }


def per_class_accuracy(answers: Sequence[str], correct: Sequence[int]) -> dict:
    totals: dict = {}
    for answer, ok in zip(answers, correct):
        n, k = totals.get(answer, (0, 0))
        totals[answer] = (n + 1, k + ok)
    return {label: k / n for label, (n, k) in sorted(totals.items())}


@dataclass(frozen=True)
class Plan:
    """What a run will do: its mode, context size, number of steps and test steps."""

    mode: str
    max_examples: int
    steps: int
    test_steps: tuple

    @classmethod
    def of(cls, icrl: bool, max_examples: int, num_train: int, test_every: int) -> "Plan":
        mode = mode_of(icrl, max_examples)
        steps, tests = plan_steps(mode, num_train, test_every, max_examples)
        return cls(mode, max_examples, steps, tuple(tests))

    def with_tests(self, extra) -> "Plan":
        """The plan with more test steps (kept from the shorter runs an extended run grew from)."""
        return replace(self, test_steps=tuple(sorted(set(self.test_steps) | set(extra))))
