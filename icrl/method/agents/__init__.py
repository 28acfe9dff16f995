"""Agents that are not LLMs: classical contextual-bandit learners on the run's stream.

``--agent llm`` (the default) is today's agent: a context strategy and a backend. The others
(``AGENTS``) are learners on text features (``--features tfidf|minilm``), one arm per label:

    linucb          LinUCB, exploration bonus --bandit_alpha (bandit: learns from the reward)
    epsilon_greedy  ridge per arm, a random arm with probability --bandit_epsilon (bandit)
    supervised      the same ridge model given the gold label (online supervised: upper bound)

They run through the same runner (``icrl.run.loop``): each training step the loop asks the
agent for the step's label (``act``), scores it with the run's reward function, writes the
record, then tells the agent (``learn``) once the episode joins the history; a test step asks
for the greedy label of every test item (``predict_test``), which changes nothing. Nothing is
learned from a test item. Resuming rebuilds the learner by replaying the training records
(``replay``), exactly: the learners' randomness is seeded per step (``learners``).
"""

from __future__ import annotations

from typing import Sequence

from .features import featurize
from .learners import EpsilonGreedy, LinUCB, Supervised
from .naming import AGENTS, agent_label, is_learner, label_of_args  # noqa: F401

class NoModel:
    """What a learner's run has in place of a backend: no model to load, nothing to predict
    (config.json "backend" is ``{"name": "none"}``; its "args" say which learner ran). A sweep
    shares one between all its learners' runs: it holds no state."""

    supports_system_role = True

    def describe(self) -> dict:
        return {"name": "none"}

    def predict(self, *args, **kwargs):
        raise RuntimeError("a learner's run has no model to call")

    def close(self) -> None:
        pass


class Agent:
    """A learner on one run's stream: ``labels`` are its arms, the features of the training
    stream and test items are computed once, at construction."""

    def __init__(self, spec, labels: Sequence[str], features: tuple):
        self.spec, self.labels = spec, list(labels)
        self.index = {label: i for i, label in enumerate(self.labels)}
        self.X_train, self.X_test = features
        self.learner = self._learner()

    @classmethod
    def of_run(cls, spec, data) -> "Agent":
        """The agent of a run (``icrl.run.data.RunData``): features of its training stream and test items."""
        task = data.task
        features = featurize(spec.features, [task.prompt(e) for e in task.train], [task.prompt(e) for e in data.train],
                             [task.prompt(e) for e in data.test])
        return cls(spec, task.labels, features)

    def _learner(self):
        s, k, d = self.spec, len(self.labels), self.X_train.shape[1]
        if s.agent == "linucb":
            return LinUCB(k, d, s.seed, alpha=s.bandit_alpha)
        if s.agent == "epsilon_greedy":
            return EpsilonGreedy(k, d, s.seed, epsilon=s.bandit_epsilon)
        if s.agent == "supervised":
            return Supervised(k, d, s.seed)
        raise ValueError(f"unknown agent {s.agent!r}; choose one of: {', '.join(AGENTS[1:])}")

    def replayed(self, records: Sequence[dict]) -> "Agent":
        """A new agent (its features reused) that learned from ``records`` only: this one as it
        was after them (a lost test step is recomputed with it)."""
        agent = Agent(self.spec, self.labels, (self.X_train, self.X_test))
        agent.replay(records)
        return agent

    def act(self, step: int) -> str:
        """The label played at training step ``step`` (its input: the stream's item ``step``)."""
        return self.labels[self.learner.act(self.X_train[step], step)]

    def metrics(self) -> dict:
        """What the last ``act`` did (epsilon-greedy: whether it explored), for the record."""
        return dict(self.learner.last_metrics)

    def learn(self, step: int, prediction: str, reward, answer: str) -> None:
        self.learner.learn(self.X_train[step], self.index[prediction], float(reward), self.index[answer])

    def replay(self, records: Sequence[dict]) -> None:
        """Learn from training records in order (resuming)."""
        for r in records:
            self.learn(r["step"], r["prediction"], r.get("reward", r["accuracy"]), r["answer"])  # graded or exact

    def predict_test(self) -> list[str]:
        return [self.labels[i] for i in self.learner.greedy(self.X_test)]
