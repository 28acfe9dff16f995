"""The loop of one run: each step, in this order (the published protocol):

1. the strategy picks the context from the history with ``default_rng(seed + t)``;
2. ICRL: the training example is predicted with that context (generation seed ``seed + t``) and
   rewarded (the reward function: accuracy and shown feedback); supervised ICL makes no call;
3. at a test step, every test prompt is predicted with the same context and seed, and the test
   record is written;
4. the training record is written and the episode joins the history;
5. at a test step, results.json is rewritten.

A query-aware strategy (``strategy.query_aware``) sees the input it chooses a context for: the
training input in 1, and in 3 each test input gets its own context, drawn with
``query_rng(seed, t, i)``; the test record then holds ``contexts`` (one list of episode
indices per test input). Zero-shot is one test at step 0 with no context.

Beyond the paper (``icrl.method.exploration``, each off by default and drawing nothing when off):
before 1, ``--prob_reset`` may make the strategy forget the history so far; in 2,
``--p_exploration`` may replace the model's training prediction by a random label (no model
call); ``--ucb_alpha`` is told each step's reward. The training record's ``accuracy`` is always
exact match; a reward other than exact match is recorded apart (``reward``).

A learner that is not an LLM (``agent``, icrl.method.agents: LinUCB, epsilon-greedy, online supervised)
takes the place of 1 and the model call in 2 and 3: it plays the step's label (no context, no
model call), the reward function scores it as in 2, it learns once the episode joins the
history (4), and a test step asks it for its greedy labels.
"""

from __future__ import annotations

import logging
import time
from typing import Sequence

import numpy as np

from ..config import RunConfig
from ..method.episode import Episode
from ..method.exploration import Exploration
from ..errors import UsageError
from ..method.prompts import build_messages
from ..records import verify
from ..records import TRAIN
from ..infra import signals
from .environment import say
from .observers import Observer
from .plan import per_class_accuracy, summarize

log = logging.getLogger("icrl")


def query_rng(seed: int, step: int, index: int) -> np.random.Generator:
    """The generator of test input ``index``'s context at ``step`` (query-aware strategies)."""
    return np.random.default_rng((seed + step, index + 1))


class Loop:
    """Runs the steps of one run on its records; ``observers`` hear its events."""

    def __init__(self, config: RunConfig, data, plan, backend, strategy, reward, records,
                 observers: Sequence[Observer] = (), check_directory=lambda: None, agent=None):
        self.config, self.data, self.plan = config, data, plan
        self.check_directory = check_directory  # before each step: still the directory we locked
        self.backend, self.strategy, self.reward, self.records = backend, strategy, reward, records
        self.observers = list(observers)
        self.agent = agent  # a learner (icrl.method.agents) in place of the strategy and the model, or None
        self.seed = config.spec.seed
        self.task = data.task
        self.exemplar_pairs = data.exemplar_pairs
        self.model_calls = 0
        self.steps_done = 0
        self.train_recs: list = []
        self.test_recs: list = []
        self.history: list = []
        self.index_of: dict = {}
        self.explore = Exploration.of(config.spec)
        self.visible_from = 0  # --prob_reset: the first step whose episode a context may hold

    @property
    def zero_shot(self) -> bool:
        return self.plan.mode == "zero_shot"

    @property
    def query_aware(self) -> bool:
        return bool(getattr(self.strategy, "query_aware", False))

    # -- model calls ---------------------------------------------------------------------------
    def predict(self, rendered: list[str], seed: int, progress=None) -> list[str]:
        options = {} if progress is None else {"progress": progress}
        out = self.backend.predict(rendered, self.task.labels, self.config.spec.temperature, seed, **options)
        if self.model_calls < self.config.options.debug_k:
            log.info("model call %d (%d prompts, seed %d); first prompt:\n%s\n-> %s",
                     self.model_calls, len(rendered), seed, rendered[0], out if len(out) <= 20 else out[:20])
        self.model_calls += 1
        return out

    def render(self, context: Sequence[Episode], prompt: str) -> str:
        messages, prefix = build_messages(
            self.task, context, prompt, self.plan.mode, omit_feedback=self.config.spec.icrl_omit_feedback,
            exemplars=self.exemplar_pairs, supports_system_role=self.backend.supports_system_role)
        return self.backend.render(messages, prefix)

    # -- resuming ------------------------------------------------------------------------------
    def restore(self, recorded: dict, out_dir, resuming: bool) -> int:
        """Load the complete steps from the records (repairing them), rebuild the history and the
        strategy's state, recompute missing test steps; returns the step to start at."""
        train_recs, test_recs, notes = self.records.load_for_resume(recorded)
        train_recs, test_recs, fixes = verify.repair(recorded, train_recs, test_recs, out_dir)
        if fixes:  # content that follows from the records: rewritten (dropped test steps are recomputed)
            self.records._rewrite(TRAIN, train_recs)
            self.records.rewrite_test(test_recs)
            say(f"repaired {out_dir}: {'; '.join(fixes)}")
        for note in notes:
            say(f"warning: {out_dir}: dropped {note}")
        history = [Episode(r["prompt"], r["prediction"], r["feedback"], r["answer"], r["accuracy"]) for r in train_recs]
        for r, example in zip(train_recs, self.data.train):
            if r["example_id"] != example.id:
                raise UsageError(f"{out_dir}: step {r['step']} used example {r['example_id']}, the data "
                                 f"now gives {example.id}; the dataset changed, pass --overwrite")
        if self.agent is not None:
            self.agent.replay(train_recs)
        elif not self.zero_shot:
            self.explore.replay(self.strategy, history, train_recs, self.seed)
        self.train_recs, self.test_recs, self.history = train_recs, test_recs, history
        self.index_of = {id(e): i for i, e in enumerate(history)}
        start = len(train_recs) if not self.zero_shot else len(test_recs)
        self.steps_done = start
        self.visible_from = self.explore.last_reset(self.seed, start - 1)
        if resuming:
            say(f"resuming {out_dir} at step {start} of {self.plan.steps}")
        missing = [t for t in self.plan.test_steps if t < start and t not in {r["step"] for r in test_recs}]
        if missing and not self.zero_shot:
            say(f"recomputing test steps {missing}, missing from {out_dir / 'test.jsonl'}")
            for t in missing:
                ids = train_recs[t]["context"]
                learner = self.agent.replayed(train_recs[:t]) if self.agent is not None else None  # as at step t
                test_recs.append(self.test_step(t, [history[i] for i in ids], ids, train_recs[t]["metrics"],
                                                history[self.explore.last_reset(self.seed, t):t], report=False,
                                                learner=learner))
            test_recs.sort(key=lambda r: r["step"])
            self.records.rewrite_test(test_recs)
            self.records.write_results(summarize(train_recs, test_recs, self.plan.steps, self.plan.mode))
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
        s, task = self.config.spec, self.task
        tic = time.perf_counter()
        example = None if self.zero_shot else self.data.train[t]
        extra: dict = {}  # record fields of the flags beyond the paper, only when they are set
        visible = self.history
        if self.zero_shot or self.agent is not None:
            context, metrics = [], {}
        else:
            if self.explore.prob_reset is not None:
                extra["reset"] = self.explore.resets_at(self.seed, t)
                if extra["reset"]:
                    self.strategy.forget()
                    self.visible_from = t
                visible = self.history[self.visible_from:]
            query = {"query": task.prompt(example)} if self.query_aware else {}
            context = self.strategy.select(visible, np.random.default_rng(self.seed + t), **query)
            metrics = self.strategy.metrics()
        context_ids = [self.index_of[id(e)] for e in context]

        episode = None
        if example is not None:
            prompt, answer = task.prompt(example), task.answer(example)
            if self.agent is None and self.plan.mode != "icrl":  # supervised ICL: no call, no reward
                episode = Episode(prompt, None, None, answer, None)
            else:
                explored = None
                if self.agent is not None:  # a learner plays the step
                    prediction, metrics = self.agent.act(t), self.agent.metrics()
                else:  # the LLM predicts with the context, unless --p_exploration explores
                    explored = self.explore.explored_label(self.seed, t, task.labels)
                    if self.explore.p_exploration is not None:
                        extra["explored"] = explored is not None
                    prediction = explored if explored is not None else \
                        self.predict([self.render(context, prompt)], self.seed + t)[0]
                reward, feedback = self.reward(prediction, answer, seed=s.seed, step=t)
                if not self.reward.same_as_accuracy:
                    extra["reward"] = reward
                if self.agent is None and explored is None:
                    self.strategy.observe_reward(reward)  # --ucb_alpha: the shown context's reward
                episode = Episode(prompt, prediction, feedback, answer, int(prediction == answer))

        if t in self.plan.test_steps:
            record = self.test_step(t, context, context_ids, metrics, visible)
            self.records.append_test(record)
            self.test_recs.append(record)
            self._emit("on_test", t, record)

        if episode is not None:
            record = {"step": t, "example_id": example.id, "prompt": episode.prompt,
                      "prediction": episode.prediction, "feedback": episode.feedback,
                      "answer": episode.answer, "accuracy": episode.accuracy,
                      "context_size": len(context), "context": context_ids, "metrics": metrics,
                      **extra, "time_s": time.perf_counter() - tic}
            self.records.append_train(record)
            self.train_recs.append(record)
            self.index_of[id(episode)] = len(self.history)
            self.history.append(episode)
            if self.agent is not None:
                self.agent.learn(t, episode.prediction, record.get("reward", episode.accuracy), episode.answer)
            self._emit("on_train", t, record)
        self.steps_done = t + 1
        if t in self.plan.test_steps:
            self.records.write_results(summarize(self.train_recs, self.test_recs, self.plan.steps, self.plan.mode))
        self._emit("on_step", t, self)

    def test_step(self, t: int, context, context_ids, metrics, history, report: bool = True,
                  learner=None) -> dict:
        """Predict every test prompt with step t's context (query-aware: each its own, chosen from
        ``history``) and seed; return the record. ``report``: tell the observers that want it how
        many test prompts are done (not while resuming, before the loop starts). A learner's run:
        ``learner`` (default: the loop's agent) predicts greedily, without a context."""
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
        learner = learner or self.agent
        if learner is not None:
            rendered, shown = None, {"context_size": 0, "context": []}
        elif self.query_aware:
            contexts = [self.strategy.select(history, query_rng(self.seed, t, i), query=p) for i, p in enumerate(prompts)]
            index_of = self.index_of  # steps of the whole history (a reset hides the older ones)
            rendered = [self.render(c, p) for c, p in zip(contexts, prompts)]
            shown = {"context_size": [len(c) for c in contexts],
                     "contexts": [[index_of[id(e)] for e in c] for c in contexts]}
        else:
            rendered = [self.render(context, p) for p in prompts]
            shown = {"context_size": len(context), "context": list(context_ids)}
        if learner is not None:
            predictions = learner.predict_test()
            if progress is not None:
                progress(len(predictions))
        else:
            predictions = self.predict(rendered, self.seed + t, progress)
        correct = [int(p == g) for p, g in zip(predictions, answers)]  # test accuracy: always exact match
        extra = {} if self.reward.same_as_accuracy else \
            {"reward": sum(self.reward.score(p, g) for p, g in zip(predictions, answers)) / len(answers)}
        record = {"step": t, "accuracy": sum(correct) / len(correct),
                  "per_class_accuracy": per_class_accuracy(answers, correct),
                  "predictions": predictions, **shown, "metrics": metrics, **extra,
                  "time_s": time.perf_counter() - tic}
        log.info("step %d: test accuracy %.4f", t, record["accuracy"])
        return record

    def _emit(self, event: str, *args) -> None:
        for observer in self.observers:
            getattr(observer, event)(*args)
