"""A task's training stream as a Gymnasium environment: the online protocol of a run, for any agent.

    from icrl.run.gym_env import ClassificationEnv
    env = ClassificationEnv("trec_coarse", training_seed=100, train_k=300)
    # or gymnasium.make("icrl/Classification-v0", task_name="trec_coarse", ...) once icrl.run.gym_env is imported
    text, info = env.reset()
    while True:
        text, reward, terminated, truncated, info = env.step(action)   # action: a label index
        if terminated:
            break

- Observation: the input text of the stream's next item, as a run shows it to the model
  (``task.prompt``, e.g. ``Question: ...``); ``gymnasium.spaces.Text`` over the characters of the
  task's inputs. The gold label is never in the observation.
- Action: a label index, ``Discrete(len(env.labels))``; ``env.labels[a]`` is its label string.
- Reward: the run's reward function (``icrl.method.rewards``: exact match by default, ``reward=`` another
  ``Reward`` object) of ``labels[action]`` against the gold label, seeded as a run seeds it.
- Order: the training stream of a run with the same ``--training_seed`` and ``--train_k``
  (``icrl.run.data.load_data``, the runner's own loading); ``reset(seed=s)`` switches to the
  stream of ``--training_seed s``, ``reset()`` replays the current one from its start.
- Episode: the whole stream, one step per item; ``terminated`` after the last (never truncated).
- ``info``: from ``reset``, ``step`` 0 and the ``example_id`` of the observed item; from ``step``,
  of the item just answered: its ``step`` and ``example_id``, ``feedback`` (the reward as the
  prompt would show it, flipped with ``flip_prob``) and ``answer``, its gold label. The gold
  label is there for the online supervised learner (the bandits' upper bound) and for analysis
  only: a bandit agent must not read it. After the last step the observation is "".
"""

from __future__ import annotations

from typing import Any, Optional, SupportsInt

import gymnasium as gym
import numpy as np

from ..config import RunConfig
from ..method.rewards import Reward, make_reward
from .data import load_data


class ClassificationEnv(gym.Env):
    """One run's training stream (see the module docstring)."""

    metadata: dict[str, list[str]] = {"render_modes": []}

    def __init__(self, task_name: str, training_seed: int = 100, train_k: int = -1,
                 data_dir: Optional[str] = None, reward: Optional[Reward] = None, seed: int = 100,
                 flip_prob: Optional[float] = None):
        self.task_name, self.data_dir, self.train_k = task_name, data_dir, train_k
        self.reward = reward or make_reward(flip=flip_prob is not None, flip_prob=flip_prob)
        self.run_seed = seed  # the run's --seed: seeds the shown feedback's flipping, as in a run
        self._load(training_seed)
        task = self.task
        texts = [task.prompt(e) for e in task.train + task.test]
        self.labels = list(task.labels)
        self.action_space = gym.spaces.Discrete(len(self.labels))
        self.observation_space = gym.spaces.Text(max_length=max(map(len, texts)), min_length=0,
                                                 charset=frozenset("".join(texts)) | {" "})
        self.t = 0

    def _load(self, training_seed: int) -> None:
        config = RunConfig.from_values({
            "task_name": self.task_name, "train_k": self.train_k, "training_seed": training_seed,
            "seed": self.run_seed, "test_seed": 0, "test_k": 1, "icrl": True, "data_dir": self.data_dir})
        data = load_data(config)
        self.task, self.stream, self.training_seed = data.task, data.train, training_seed

    def reset(self, *, seed: Optional[int] = None,
              options: Optional[dict[str, Any]] = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        if seed is not None and seed != self.training_seed:
            self._load(seed)
        self.t = 0
        return self._observation(), self._info()

    def step(self, action: SupportsInt) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if not 0 <= self.t < len(self.stream):
            raise RuntimeError("the stream is over: call reset()")
        if not self.action_space.contains(np.int64(action)):
            raise ValueError(f"action {action!r} is not a label index in 0..{len(self.labels) - 1}")
        example = self.stream[self.t]
        answer = self.task.answer(example)
        reward, feedback = self.reward(self.labels[int(action)], answer, seed=self.run_seed, step=self.t)
        info = {**self._info(), "feedback": feedback, "answer": answer}
        self.t += 1
        terminated = self.t == len(self.stream)
        observation = "" if terminated else self._observation()
        return observation, float(reward), terminated, False, info

    def _observation(self) -> str:
        return self.task.prompt(self.stream[self.t])

    def _info(self) -> dict[str, Any]:
        if self.t >= len(self.stream):
            return {"step": self.t}
        return {"step": self.t, "example_id": self.stream[self.t].id}


ENV_ID = "icrl/Classification-v0"
if ENV_ID not in gym.registry:  # gymnasium.make("icrl/Classification-v0", task_name=..., ...)
    gym.register(id=ENV_ID, entry_point="icrl.run.gym_env:ClassificationEnv")
