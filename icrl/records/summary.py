"""results.json: a summary of a run's records (a pure function of them), and the per-class
accuracy of a test step. A run whose lines record ``usage`` (an API backend) has its sum,
training and test lines together, as results.json's ``usage``; other runs have no such key."""

from __future__ import annotations

from typing import Any, Optional, Sequence, Union

from ..backends.usage import UsageRecord
from .schema import TestLine, TrainLine


def per_class_accuracy(answers: Sequence[str], correct: Sequence[int]) -> dict[str, float]:
    """Gold label -> the accuracy on the test items of that label, labels sorted."""
    totals: dict[str, tuple[int, int]] = {}
    for answer, ok in zip(answers, correct):
        n, k = totals.get(answer, (0, 0))
        totals[answer] = (n + 1, k + ok)
    return {label: k / n for label, (n, k) in sorted(totals.items())}


def steps_done(mode: str, train: Sequence[TrainLine], test: Sequence[TestLine]) -> int:
    """Completed steps: training records, or for zero-shot its one test step."""
    return (1 if test else 0) if mode == "zero_shot" else len(train)




def usage_total(lines: Sequence[Union[TrainLine, TestLine]]) -> Optional[dict[str, int]]:
    """The sum of the lines' ``usage`` (None: no line records one)."""
    recorded: list[UsageRecord] = [r.usage for r in lines if r.usage is not None]
    if not recorded:
        return None
    return {"prompt_tokens": sum(u["prompt_tokens"] for u in recorded),
            "cached_prompt_tokens": sum(u["cached_prompt_tokens"] for u in recorded),
            "output_tokens": sum(u["output_tokens"] for u in recorded),
            "requests": sum(u["requests"] for u in recorded)}


def summarize(train: Sequence[TrainLine], test: Sequence[TestLine], steps: int, mode: str) -> dict[str, Any]:
    """results.json: final/best test accuracy, regret, accuracy per test step, time per step."""
    done = len(test) > 0 if mode == "zero_shot" else len(train) == steps
    accuracy = {r.step: r.accuracy for r in test}
    best = max(accuracy.items(), key=lambda kv: (kv[1], -kv[0])) if accuracy else (None, None)
    predicted = [r.accuracy for r in train if r.accuracy is not None]
    # A training record's time covers its whole step, the step's test included.
    times = [r.time_s for r in train] or [r.time_s for r in test]
    summary = {
        "finished": done, "mode": mode, "total_steps": steps,
        "steps_completed": steps_done(mode, train, test),
        "final_test_accuracy": test[-1].accuracy if test else None,
        "best_test_accuracy": best[1], "best_test_step": best[0],
        "regret": (len(predicted) - sum(predicted)) if mode == "icrl" else None,
        "train_accuracy": (sum(predicted) / len(predicted)) if predicted else None,
        "test_accuracy": {str(k): v for k, v in accuracy.items()},
        "mean_step_time_s": (sum(times) / len(times)) if times else None,
        "total_time_s": sum(times),
    }
    usage = usage_total([*train, *test])
    if usage is not None:
        summary["usage"] = usage
    return summary
