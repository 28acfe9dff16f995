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

from ...errors import UsageError
from ..registry import Param, Registry
from .features import FEATURES, featurize
from .learners import EpsilonGreedy, LinUCB, Supervised


class LLM:
    """The agent of the paper: an LLM with a context strategy (declared like the learners)."""

    name = "llm"
    title = "LLM"
    params: tuple = ()
    summary = "an LLM with a context strategy (the paper)"


AGENTS: Registry[type] = Registry("agent", "--agent")
for _cls in (LLM, LinUCB, EpsilonGreedy, Supervised):
    AGENTS.register(_cls.name, _cls)

AGENT = Param("agent", "llm", "llm: an LLM with a context strategy (the paper); linucb, epsilon_greedy: a "
                              "contextual-bandit learner on text features, one arm per label, learning from the "
                              "reward; supervised: the same ridge learner given the gold label (upper bound)",
              type=str, choices=AGENTS.names())


def is_learner(agent) -> bool:
    return agent not in (None, "llm")


def agent_params() -> list[Param]:
    """--agent, --features, then each learner's own parameters."""
    return [AGENT, FEATURES, *[param for cls in AGENTS for param in cls.params]]


def label_of_args(args: dict) -> str:
    """The name a figure or table gives a learner's run (config.json "args"), e.g. "LinUCB (tfidf)",
    "LinUCB (minilm, alpha=0.5)": its title, its features, its own parameters that are not at
    their defaults."""
    cls = AGENTS.get(args.get("agent"))
    parts = [str(args.get("features", FEATURES.default))]
    for param in cls.params:
        value = args.get(param.name, param.default)
        part = param.label_of(float(value) if isinstance(value, (int, float)) and value is not None else value)
        if part:
            parts.append(part)
    return f"{cls.title} ({', '.join(parts)})"


def agent_folder(args: dict) -> str:
    """The run folder's first part for a learner, in place of the model's: ``agent+<agent>+<features>``
    (a model's folder never holds a '+': icrl.records.safepaths)."""
    return f"agent+{args['agent']}+{args.get('features', FEATURES.default)}"


def validate(spec) -> None:
    """A learner's own parameters go with that learner (one line otherwise)."""
    for cls in AGENTS:
        for param in cls.params:
            value = getattr(spec, param.name)
            if value != param.default and spec.agent != cls.name:
                raise UsageError(f"{param.flag} is {cls.title}'s: use it with --agent {cls.name}")
            problem = param.problem(value)
            if problem:
                raise UsageError(problem)

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
        return AGENTS.get(self.spec.agent).of(len(self.labels), self.X_train.shape[1], self.spec)

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
