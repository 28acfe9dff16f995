"""Observers of a run's loop: the progress bar, Weights & Biases and a sweep's test lines
subscribe to the loop's events instead of patching it.

The loop calls, in this order: ``on_start(loop, start)`` once before its first step; during a
test step ``on_test_progress(done, total)`` (only if some observer ``wants_test_progress``),
then ``on_test(t, record)`` once the test record is on disk; ``on_train(t, record)`` once the
training record is on disk; ``on_step(t, loop)`` at the end of each step (after results.json);
``on_loop_end(loop)`` after the last step; ``on_finish(summary)`` after the final results.json.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

from ..errors import UsageError
from ..infra.diskfull import OneLineFileHandler
from ..records.plan import Plan
from ..records.schema import TestLine, TrainLine


class LoopState(Protocol):
    """What an observer reads of the loop (``icrl.run.loop.Loop``): its plan and its lines so far."""

    plan: Plan
    train_recs: list[TrainLine]
    test_recs: list[TestLine]


class Observer:
    """Does nothing on every event; subclasses override the events they need."""

    wants_test_progress = False

    def on_start(self, loop: LoopState, start: int) -> None:
        pass

    def on_test_progress(self, done: int, total: int) -> None:
        pass

    def on_test(self, t: int, record: TestLine) -> None:
        pass

    def on_train(self, t: int, record: TrainLine) -> None:
        pass

    def on_step(self, t: int, loop: LoopState) -> None:
        pass

    def on_loop_end(self, loop: LoopState) -> None:
        pass

    def on_finish(self, summary: dict[str, Any]) -> None:
        pass


class LogFailure(Observer):
    """Says that the run's log file could not be written (``handler``: its OneLineFileHandler)
    once a step is on disk: the run goes on without its log. A run whose records cannot be
    written either stops with that error alone."""

    def __init__(self, handler: OneLineFileHandler) -> None:
        self.handler = handler

    def on_step(self, t: int, loop: LoopState) -> None:
        self.handler.say_pending()


class ProgressBar(Observer):
    """tqdm over the run's steps; during a test step its postfix shows ``testing i/n``, after
    each step the running train and last test accuracy."""

    def __init__(self, enabled: bool, desc: str) -> None:
        self.enabled, self.desc = enabled, desc
        self.bar: Any = None  # the tqdm bar, made in on_start
        self.wants_test_progress = enabled

    def on_start(self, loop: LoopState, start: int) -> None:
        from tqdm.auto import tqdm

        self.bar = tqdm(total=loop.plan.steps, initial=start, disable=not self.enabled, desc=self.desc,
                        unit="step", dynamic_ncols=True)

    def on_test_progress(self, done: int, total: int) -> None:
        self.bar.set_postfix_str(f"testing {done}/{total}")

    def on_step(self, t: int, loop: LoopState) -> None:
        self.bar.set_postfix(postfix(loop.train_recs, loop.test_recs), refresh=False)  # replaces "testing i/n"
        self.bar.update(1)

    def on_loop_end(self, loop: LoopState) -> None:
        self.bar.close()


def postfix(train_recs: Sequence[TrainLine], test_recs: Sequence[TestLine]) -> dict[str, str]:
    scored = [r.accuracy for r in train_recs if r.accuracy is not None]
    out: dict[str, str] = {}
    if scored:
        out["train_acc"] = f"{sum(scored) / len(scored):.3f}"
    if test_recs:
        out["test_acc"] = f"{test_recs[-1].accuracy:.3f}"
    return out


class Wandb(Observer):
    """Weights & Biases, offline: the run's identity as its config, accuracies per step, the
    summary at the end. The module is imported when the observer is made (a missing package is
    a UsageError before any model loads)."""

    def __init__(self, config: dict[str, Any], directory: Path, name: str) -> None:
        try:
            import wandb
        except ImportError:
            raise UsageError("--wandb needs the wandb package: pip install wandb") from None
        os.environ.setdefault("WANDB_MODE", "offline")
        self.wandb, self.config, self.directory, self.name = wandb, config, directory, name
        self.run: Any = None  # the wandb run, made in on_start

    def on_start(self, loop: LoopState, start: int) -> None:
        self.run = self.wandb.init(project="icrl", dir=str(self.directory), config=self.config, name=self.name)

    def on_test(self, t: int, record: TestLine) -> None:
        self.run.log({"test/accuracy": record.accuracy}, step=t)

    def on_train(self, t: int, record: TrainLine) -> None:
        if record.accuracy is not None:
            self.run.log({"train/accuracy": record.accuracy, "train/context_size": record.context_size}, step=t)

    def on_finish(self, summary: dict[str, Any]) -> None:
        self.run.summary.update({k: v for k, v in summary.items() if not isinstance(v, dict)})
        self.run.finish()


class TestLines(Observer):
    """A sweep's line per test step, written above its shared bar."""

    def __init__(self, write: Callable[[str], None], label: str) -> None:
        self.write, self.label = write, label

    def on_test(self, t: int, record: TestLine) -> None:
        self.write(f"{self.label}: step {record.step} test accuracy {record.accuracy:.3f}")
