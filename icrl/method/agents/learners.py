"""Classical contextual-bandit learners on feature vectors, one arm per label.

All three keep a ridge regression per arm (``A = lam*I + sum x x^T``, ``b = sum r x``, kept as
the inverse ``A^-1`` with Sherman-Morrison updates, so a step costs O(d^2) per updated arm):

- ``LinUCB`` (Li et al. 2010, disjoint model): plays ``argmax_a theta_a.x + alpha*sqrt(x^T A_a^-1 x)``
  and learns the played arm from its reward (bandit feedback).
- ``EpsilonGreedy``: with probability ``epsilon`` a uniformly random arm, else ``argmax_a
  theta_a.x``; learns the played arm from its reward.
- ``Supervised``: the same ridge model given the gold label (full information): every arm
  learns each step, target 1 for the gold arm and 0 for the others (one-vs-rest ridge). It plays
  greedily; its reward is recorded but not what it learns from. The bandits' upper bound.

Randomness (tie breaks, exploration) comes from ``default_rng((seed, step))`` alone, so a learner
rebuilt by replaying a run's records acts exactly as the one that wrote them. ``greedy`` (test
steps) is ``argmax theta_a.x`` with ties to the lowest label index; it changes nothing.

``LearnerPolicy`` runs one of them through the run's loop (``icrl.method.agents.policy``): it
plays each training step's label, learns from the reward once the step is recorded, and answers
a test step with its greedy labels; nothing is learned from a test item.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import numpy as np

from ..episode import Episode, StepRecord
from ..registry import Param, finite_non_negative
from ..task import Row, RunStream
from .features import featurize
from .policy import AgentSetting, Decision, Policy

BANDIT_ALPHA = Param("bandit_alpha", 1.0, "--agent linucb: the exploration bonus alpha", check=finite_non_negative,
                     folder="alpha", label="alpha={}", only="learner")
BANDIT_EPSILON = Param("bandit_epsilon", 0.1, "--agent epsilon_greedy: the probability of a random arm",
                       check=lambda v: None if 0 <= v <= 1 else "in [0, 1]", folder="eps", label="epsilon={}",
                       only="learner")


class RidgeArms:
    """Ridge regression per arm, inverse covariance kept up to date (Sherman-Morrison)."""

    def __init__(self, n_arms: int, dim: int, lam: float = 1.0):
        self.A_inv = np.repeat(np.eye(dim)[None] / lam, n_arms, axis=0)
        self.b = np.zeros((n_arms, dim))

    def update(self, arm: int, x: np.ndarray, reward: float) -> None:
        Ax = self.A_inv[arm] @ x
        self.A_inv[arm] -= np.outer(Ax, Ax) / (1.0 + x @ Ax)
        self.b[arm] += reward * x

    def means(self, x: np.ndarray) -> np.ndarray:
        theta = np.einsum("kij,kj->ki", self.A_inv, self.b)
        return theta @ x

    def widths(self, x: np.ndarray) -> np.ndarray:
        return np.sqrt(np.maximum(np.einsum("i,kij,j->k", x, self.A_inv, x), 0.0))


def _argmax(scores: np.ndarray, rng: np.random.Generator) -> int:
    """The best arm, ties broken uniformly with ``rng``."""
    best = np.flatnonzero(np.isclose(scores, scores.max(), rtol=0, atol=1e-12))
    return int(best[0] if len(best) == 1 else rng.choice(best))


class Learner:
    """One arm per label. ``act`` (training step), ``learn`` (after the reward), ``greedy`` (test).

    The declaration: ``name`` (the --agent choice), ``title`` (in figures and tables), ``params``
    (its own parameters besides --features), ``summary``."""

    name = "learner"
    title = "learner"
    params: tuple[Param, ...] = ()
    summary = ""
    uses_gold = False  # True: learns from the gold label instead of the reward

    def __init__(self, n_arms: int, dim: int, seed: int, lam: float = 1.0):
        self.n_arms, self.seed = n_arms, seed
        self.model = RidgeArms(n_arms, dim, lam)
        self.last_metrics: dict[str, Any] = {}

    @classmethod
    def of(cls, n_arms: int, dim: int, setting: AgentSetting) -> "Learner":
        """The learner of a run (``setting``: its agent's, whose values of ``params`` it takes)
        with ``n_arms`` arms over ``dim`` features; each learner says how."""
        raise NotImplementedError

    def rng(self, step: int) -> np.random.Generator:
        return np.random.default_rng((self.seed, step))

    def act(self, x: np.ndarray, step: int) -> int:
        raise NotImplementedError

    def learn(self, x: np.ndarray, arm: int, reward: float, gold: int) -> None:
        self.model.update(arm, x, reward)

    def greedy(self, X: np.ndarray) -> np.ndarray:
        theta = np.einsum("kij,kj->ki", self.model.A_inv, self.model.b)
        return np.argmax(X @ theta.T, axis=1)


class LinUCB(Learner):
    name = "linucb"
    title = "LinUCB"
    params = (BANDIT_ALPHA,)
    summary = "LinUCB, exploration bonus --bandit_alpha (bandit: learns from the reward)"

    def __init__(self, n_arms: int, dim: int, seed: int, alpha: float = 1.0, lam: float = 1.0):
        super().__init__(n_arms, dim, seed, lam)
        self.alpha = alpha

    @classmethod
    def of(cls, n_arms: int, dim: int, setting: AgentSetting) -> "LinUCB":
        return cls(n_arms, dim, setting.seed, alpha=float(setting.values.get(BANDIT_ALPHA.name, BANDIT_ALPHA.default)))

    def act(self, x: np.ndarray, step: int) -> int:
        self.last_metrics = {}
        return _argmax(self.model.means(x) + self.alpha * self.model.widths(x), self.rng(step))


class EpsilonGreedy(Learner):
    name = "epsilon_greedy"
    title = "epsilon-greedy"
    params = (BANDIT_EPSILON,)
    summary = "ridge per arm, a random arm with probability --bandit_epsilon (bandit)"

    def __init__(self, n_arms: int, dim: int, seed: int, epsilon: float = 0.1, lam: float = 1.0):
        super().__init__(n_arms, dim, seed, lam)
        self.epsilon = epsilon

    @classmethod
    def of(cls, n_arms: int, dim: int, setting: AgentSetting) -> "EpsilonGreedy":
        epsilon = setting.values.get(BANDIT_EPSILON.name, BANDIT_EPSILON.default)
        return cls(n_arms, dim, setting.seed, epsilon=float(epsilon))

    def act(self, x: np.ndarray, step: int) -> int:
        rng = self.rng(step)
        explored = bool(rng.random() < self.epsilon)
        self.last_metrics = {"explored": explored}
        return int(rng.integers(self.n_arms)) if explored else _argmax(self.model.means(x), rng)


class Supervised(Learner):
    """One-vs-rest ridge on the gold label: every arm shares one covariance, so it is kept once."""

    name = "supervised"
    title = "online supervised"
    summary = "the same ridge model given the gold label (online supervised: the bandits' upper bound)"
    uses_gold = True

    def __init__(self, n_arms: int, dim: int, seed: int, lam: float = 1.0):
        self.n_arms, self.seed = n_arms, seed
        self.A_inv = np.eye(dim) / lam
        self.B = np.zeros((dim, n_arms))
        self.last_metrics = {}

    @classmethod
    def of(cls, n_arms: int, dim: int, setting: AgentSetting) -> "Supervised":
        return cls(n_arms, dim, setting.seed)

    def act(self, x: np.ndarray, step: int) -> int:
        return _argmax(x @ self.A_inv @ self.B, self.rng(step))

    def learn(self, x: np.ndarray, arm: int, reward: float, gold: int) -> None:
        Ax = self.A_inv @ x
        self.A_inv -= np.outer(Ax, Ax) / (1.0 + x @ Ax)
        self.B[:, gold] += x

    def greedy(self, X: np.ndarray) -> np.ndarray:
        return np.argmax(X @ (self.A_inv @ self.B), axis=1)


class LearnerPolicy(Policy):
    """A learner on one run's stream: ``labels`` are its arms, ``learner_class`` one of the above
    (``--agent``), built with ``setting``; the features of the training stream and test items
    (``features``: a pair of matrices) are computed once."""

    def __init__(self, learner_class: type[Learner], setting: AgentSetting, labels: Sequence[str],
                 features: tuple[np.ndarray, np.ndarray]):
        self.learner_class, self.setting, self.labels = learner_class, setting, list(labels)
        self.index = {label: i for i, label in enumerate(self.labels)}
        self.X_train, self.X_test = features
        self.learner = learner_class.of(len(self.labels), self.X_train.shape[1], setting)

    @classmethod
    def of_run(cls, learner_class: type[Learner], setting: AgentSetting, data: RunStream[Row]) -> "LearnerPolicy":
        """The policy of a run (``icrl.run.data.RunData``): features of its training stream and test items,
        fitted on the task's training inputs."""
        task = data.task
        features = featurize(setting.features, [task.prompt(e) for e in task.train],
                             [task.prompt(e) for e in data.train], [task.prompt(e) for e in data.test])
        return cls(learner_class, setting, task.labels, features)

    def replayed(self, records: Sequence[StepRecord]) -> "LearnerPolicy":
        """A new policy (its features reused) that learned from ``records`` only: this one as it
        was after them."""
        policy = LearnerPolicy(self.learner_class, self.setting, self.labels, (self.X_train, self.X_test))
        policy.replay(records, [])
        return policy

    def act(self, step: int, prompt: str, history: Sequence[Episode]) -> Decision:
        label = self.labels[self.learner.act(self.X_train[step], step)]
        return Decision(metrics=dict(self.learner.last_metrics), prediction=label)

    def learn(self, step: int, decision: Decision, reward: float, answer: str) -> None:
        assert decision.prediction is not None, "a learner's step has a prediction"
        self.learner.learn(self.X_train[step], self.index[decision.prediction], float(reward), self.index[answer])

    def test(self, step: int, decision: Decision, prompts: Sequence[str],
             progress: Optional[Callable[[int], None]] = None) -> tuple[list[str], dict[str, Any]]:
        snapshot = decision.snapshot  # the policy as it was at a recalled step
        learner = (snapshot if isinstance(snapshot, LearnerPolicy) else self).learner
        predictions = [self.labels[i] for i in learner.greedy(self.X_test)]
        if progress is not None:
            progress(len(predictions))
        return predictions, {"context_size": 0, "context": []}

    def replay(self, records: Sequence[StepRecord], history: Sequence[Episode]) -> None:
        for r in records:  # the graded reward when recorded, else exact match
            assert r.prediction is not None and r.earned is not None, "a learner's step has a prediction and a reward"
            self.learner.learn(self.X_train[r.step], self.index[r.prediction], float(r.earned), self.index[r.answer])

    def recall(self, step: int, records: Sequence[StepRecord], history: Sequence[Episode]) -> Decision:
        return Decision(metrics=records[step].metrics, prediction=records[step].prediction,
                        snapshot=self.replayed(records[:step]))
