"""The loop of one run: each step, in this order (the published protocol):

1. the policy acts on the training input (``icrl.method.agents``: the LLM's strategy picks the
   context and the model predicts; a learner plays a label; supervised ICL predicts nothing);
2. a prediction is rewarded by the reward function (the step's reward and the feedback shown);
3. at a test step, every test input is predicted with the step's state, and the test line is
   written;
4. the training line is written, the episode joins the history and the policy learns from the
   step's reward;
5. at a test step, results.json is refreshed.

Zero-shot is one test at step 0 with no context. The training line's ``accuracy`` is always
exact match; a reward other than exact match is recorded apart (``reward``). Where the run's
models report what their API used (``meter``: ``icrl.backends.usage.Meter``), the training line
records the usage of steps 1-2 and the test line that of step 3 (``usage``); other runs' lines
have no such field.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Callable, Optional, Protocol, Sequence

from ..backends.usage import Meter
from ..errors import UsageError
from ..infra import signals
from ..method.agents import Decision, Policy
from ..method.episode import Episode
from ..method.rewards import Reward
from ..records.plan import Plan
from ..records.schema import TestLine, TrainLine, train_line_fields
from ..records.summary import per_class_accuracy
from .data import RunData
from .environment import tell
from .observers import Observer

log = logging.getLogger("icrl")


class LoopRecords(Protocol):
    """Where the loop writes its lines: the run's files (``icrl.records.RunRecords``) or memory
    (``icrl.run.assemble.MemoryRecords``)."""

    def append_train(self, line: TrainLine) -> TrainLine: ...

    def append_test(self, line: TestLine) -> TestLine: ...

    def rewrite_train(self, lines: Sequence[TrainLine]) -> None: ...

    def rewrite_test(self, lines: Sequence[TestLine]) -> None: ...

    def refresh_results(self, train: Sequence[TrainLine], test: Sequence[TestLine], steps: int,
                        mode: str) -> object: ...


class Continued(Protocol):
    """The checked records a run continues from (``icrl.run.rebuild.Checked``)."""

    train: list[TrainLine]
    test: list[TestLine]
    repairs: list[str]
    rewrite_train: bool
    rewrite_test: bool


class Loop:
    """Runs the steps of one run on its records; ``observers`` hear its events."""

    def __init__(self, seed: int, data: RunData, plan: Plan, policy: Policy, reward: Reward, records: LoopRecords,
                 observers: Sequence[Observer] = (), check_directory: Callable[[], None] = lambda: None,
                 meter: Optional[Meter] = None):
        self.data, self.plan = data, plan
        self.meter = meter or Meter()  # the usage its models' APIs report (none for local models)
        self.policy, self.reward, self.records = policy, reward, records
        self.observers = list(observers)
        self.check_directory = check_directory  # before each step: still the directory we locked
        self.seed = seed  # --seed: the reward's feedback flipping draws from it
        self.task = data.task
        self.steps_done = 0
        self.train_recs: list[TrainLine] = []
        self.test_recs: list[TestLine] = []
        self.history: list[Episode] = []

    @property
    def zero_shot(self) -> bool:
        return self.plan.mode == "zero_shot"

    # -- resuming ------------------------------------------------------------------------------
    def restore(self, checked: Continued, out_dir: Path, resuming: bool) -> int:
        """Continue from the checked records (``icrl.run.rebuild.Checked``): write their repairs,
        rebuild the history and the policy's state, recompute missing test steps; returns the
        step to start at."""
        train_recs, test_recs = list(checked.train), list(checked.test)
        if checked.repairs:
            notes = checked.repairs
            tell(f"records of {out_dir} need repair ({'; '.join(notes[:3])}"
                f"{f' and {len(notes) - 3} more' if len(notes) > 3 else ''}); repairing them")
            for note in notes:
                log.info("repaired: %s", note)
        if checked.rewrite_train:
            self.records.rewrite_train(train_recs)
        if checked.rewrite_test:
            self.records.rewrite_test(test_recs)
        history = [Episode(r.prompt, r.prediction, r.feedback, r.answer, r.accuracy, i)
                   for i, r in enumerate(train_recs)]
        for r, example in zip(train_recs, self.data.train):
            if r.example_id != example.id:
                raise UsageError(f"{out_dir}: step {r.step} used example {r.example_id}, the data "
                                 f"now gives {example.id}; the dataset changed, pass --overwrite")
        if not self.zero_shot:
            self.policy.replay(train_recs, history)
        self.train_recs, self.test_recs, self.history = train_recs, test_recs, history
        start = len(train_recs) if not self.zero_shot else len(test_recs)
        self.steps_done = start
        if resuming:
            tell(f"resuming {out_dir} at step {start} of {self.plan.steps}")
        missing = [t for t in self.plan.test_steps if t < start and t not in {r.step for r in test_recs}]
        if missing and not self.zero_shot:
            tell(f"recomputing test steps {missing}, missing from {out_dir / 'test.jsonl'}")
            for t in missing:
                test_recs.append(self.test_step(t, self.policy.recall(t, train_recs, history), report=False))
            test_recs.sort(key=lambda r: r.step)
            self.records.rewrite_test(test_recs)
            self.records.refresh_results(train_recs, test_recs, self.plan.steps, self.plan.mode)
        return start

    # -- the steps -----------------------------------------------------------------------------
    def run(self, start: int) -> None:
        self._emit("on_start", self, start)
        for t in range(start, self.plan.steps):
            signals.check()  # a stop that arrived inside an import
            self.check_directory()
            self.step(t)
        self._emit("on_loop_end", self)

    def step(self, t: int) -> None:
        tic = time.perf_counter()
        spent = self.meter.read()
        example = None if self.zero_shot else self.data.train[t]
        decision, episode, reward = Decision(), None, None
        if example is not None:
            prompt, answer = self.task.prompt(example), self.task.answer(example)
            decision = self.policy.act(t, prompt, self.history)
            feedback = accuracy = None
            if decision.prediction is not None:  # supervised ICL shows the gold answer: no reward
                reward, feedback = self.reward(decision.prediction, answer, seed=self.seed, step=t, prompt=prompt)
                accuracy = int(decision.prediction == answer)
                decision.fields.update(self.reward.fields())  # what the reward's own calls answered
            episode = Episode(prompt, decision.prediction, feedback, answer, accuracy, t)
        usage = self.meter.since(spent)

        if t in self.plan.test_steps:
            tested = self.records.append_test(self.test_step(t, decision))
            self.test_recs.append(tested)
            self._emit("on_test", t, tested)

        if episode is not None and example is not None:
            line = TrainLine(t, example.id, episode.prompt, episode.prediction, episode.feedback, episode.answer,
                             episode.accuracy, len(decision.context), decision.context_ids, decision.metrics,
                             **train_line_fields(decision.fields), usage=usage, time_s=time.perf_counter() - tic)
            if reward is not None and not self.reward.same_as_accuracy:
                line.reward = reward
            record = self.records.append_train(line)
            self.train_recs.append(record)
            self.history.append(episode)
            if reward is not None:
                self.policy.learn(t, decision, reward, episode.answer)
            self._emit("on_train", t, record)
        self.steps_done = t + 1
        if t in self.plan.test_steps:
            self.records.refresh_results(self.train_recs, self.test_recs, self.plan.steps, self.plan.mode)
        self._emit("on_step", t, self)

    def test_step(self, t: int, decision: Decision, report: bool = True) -> TestLine:
        """Predict every test input with step t's state (``decision``) and seed; the test line.
        ``report``: tell the observers that want it how many test inputs are done (not while
        resuming, before the loop starts)."""
        task, test = self.task, self.data.test
        answers = [task.answer(e) for e in test]
        prompts = [task.prompt(e) for e in test]
        tic = time.perf_counter()
        progress = None
        if report and any(o.wants_test_progress for o in self.observers):
            done = [0]

            def progress(n: int) -> None:
                done[0] += n
                self._emit("on_test_progress", done[0], len(test))

            progress(0)
        spent = self.meter.read()
        predictions, shown = self.policy.test(t, decision, prompts, progress)
        correct = [int(p == g) for p, g in zip(predictions, answers)]  # test accuracy: always exact match
        line = TestLine(t, sum(correct) / len(correct), per_class_accuracy(answers, correct), predictions,
                        metrics=decision.metrics, usage=self.meter.since(spent), **shown)
        if not self.reward.same_as_accuracy and self.reward.scores_tests:
            line.reward = sum(self.reward.score(p, g) for p, g in zip(predictions, answers)) / len(answers)
        line.time_s = time.perf_counter() - tic
        log.info("step %d: test accuracy %.4f", t, line.accuracy)
        return line

    def _emit(self, event: str, *args: object) -> None:
        for observer in self.observers:
            getattr(observer, event)(*args)
