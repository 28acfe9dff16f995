"""Reward functions: a prediction and the gold label -> the reward and the feedback shown in
context. A step's ``accuracy`` is always exact match; a reward that can differ from it
(``same_as_accuracy = False``) is recorded apart, as the records' ``reward``.

    reward = make_reward()                                  # exact match, the published reward
    accuracy, feedback = reward(prediction, answer, seed=seed, step=t)

``score`` is the reward; ``shown`` turns it into the feedback the prompt shows (1 or 0: the
prompt says right or wrong), which is then flipped with --icrl_flip_feedback exactly as
``icrl.method.feedback.shown_feedback`` does (its own generator, seeded seed + step), so the published
runs keep their random streams (flipping a partial credit of 0.5 leaves 0.5). Omitting the
feedback (--icrl_omit_feedback) is a matter of the prompt (``icrl.method.prompts``), not of the
reward. A new reward subclasses ``Reward`` (its ``name``, ``summary`` and its own ``params``)
and is registered with ``register_reward``: it is then a choice of ``--reward`` and its
parameters are flags (:mod:`icrl.method.registry`); ``bind(task)`` is called once the task is
loaded (a reward that needs the task checks it there).

    exact_match    1 for the gold label, else 0 (the paper's; the default)
    coarse_credit  ours: 1 for the gold label, 0.5 for another label of the gold label's parent
                   class (the task's [hierarchy]: trec_fine's coarse classes), else 0
"""

from __future__ import annotations

from typing import Optional

from ..errors import UsageError
from .feedback import shown_feedback
from .registry import Param, Registry

REWARDS: Registry[type] = Registry("reward", "--reward")
DEFAULT_REWARD = "exact_match"


def register_reward(cls: type) -> type:
    """Make ``cls`` (a Reward subclass) the reward ``cls.name``: ``make_reward(name)`` builds
    ``cls(flip=..., flip_prob=...)`` (a class decorator)."""
    REWARDS.register(cls.name, cls)
    return cls


class Reward:
    """Scores a prediction against the gold label; ``flip``/``flip_prob``: the feedback ablation."""

    name = "reward"
    summary = ""
    params: tuple = ()  # its own parameters (flags), beyond --reward itself
    same_as_accuracy = False  # True: the reward is the exact-match accuracy, not recorded again

    def __init__(self, flip: bool = False, flip_prob: Optional[float] = None, **params):
        self.flip, self.flip_prob = flip, flip_prob
        self.values = params  # its own parameters' values (the class's ``params`` declares them), by name

    def bind(self, task) -> "Reward":
        """Called with the run's task once it is loaded; raise UsageError if the reward cannot
        apply to it."""
        return self

    def score(self, prediction: str, answer: str):
        """The reward of ``prediction`` (recorded as the step's accuracy)."""
        raise NotImplementedError

    def shown(self, reward) -> int:
        """The feedback a reward shows in context, 1 (right) or 0 (wrong), before any flipping."""
        return reward

    def __call__(self, prediction: str, answer: str, *, seed: int, step: int) -> tuple:
        """(reward, shown feedback) of one training step."""
        reward = self.score(prediction, answer)
        return reward, shown_feedback(self.shown(reward), seed, step, self.flip, self.flip_prob)


@register_reward
class ExactMatch(Reward):
    """1 when the predicted label is the gold label, else 0 (the paper's reward)."""

    name = "exact_match"
    summary = "1 for the right label, else 0 (the paper's)"
    same_as_accuracy = True

    def score(self, prediction, answer):
        return int(prediction == answer)


@register_reward
class CoarseCredit(Reward):
    """Ours: 1 for the gold label, 0.5 (``PARTIAL``) for a wrong label with the gold label's
    parent class in the task's ``hierarchy``, else 0. Shown in context as right, partly right
    (``icrl.method.prompts.feedback_message``) or wrong."""

    name = "coarse_credit"
    summary = ("1 for the right label, 0.5 for a wrong label of the right parent class, 0 otherwise; tasks with a "
               "[hierarchy], e.g. trec_fine")
    PARTIAL = 0.5

    def __init__(self, flip: bool = False, flip_prob: Optional[float] = None, **params):
        super().__init__(flip, flip_prob, **params)
        self.parent: dict = {}

    def bind(self, task):
        if not task.hierarchy:
            raise UsageError(f"--reward coarse_credit needs a task whose labels have parent classes (a [hierarchy] "
                             f"table, e.g. trec_fine); {task.name} has none")
        self.parent = dict(task.hierarchy)
        return self

    def score(self, prediction, answer):
        if prediction == answer:
            return 1
        parent = self.parent.get(answer)
        return self.PARTIAL if parent is not None and self.parent.get(prediction) == parent else 0


def reward_names() -> tuple:
    """The registered rewards' names (the choices of --reward)."""
    return REWARDS.names()


def make_reward(name: str = DEFAULT_REWARD, flip: bool = False, flip_prob: Optional[float] = None,
                **params) -> Reward:
    """The reward registered as ``name`` (``params``: its own parameters), with the feedback flipping."""
    return REWARDS.get(name)(flip=flip, flip_prob=flip_prob, **params)


def reward_of_run(spec) -> Reward:
    """The reward of a run (``spec``: its RunSpec): --reward with its parameters and the flipping."""
    cls = REWARDS.get(spec.reward)
    return make_reward(spec.reward, spec.icrl_flip_feedback, spec.icrl_flip_feedback_prob,
                       **{param.name: getattr(spec, param.name) for param in cls.params})


def reward_params() -> list[Param]:
    """--reward (its help lists every registered reward), then the rewards' own parameters (each once)."""
    choice = Param("reward", DEFAULT_REWARD, "reward function: " + "; ".join(f"{cls.name}: {cls.summary}"
                                                                               for cls in REWARDS),
                   type=str, folder="reward", column="reward", label="reward {}")
    seen = {choice.name: choice}
    for cls in REWARDS:
        for param in cls.params:
            seen.setdefault(param.name, param)
    return list(seen.values())


def validate(spec) -> None:
    """One-line errors for the reward of a run (icrl.cli.validate): a registered reward, ICRL for
    any but exact match, its own parameters valid, no other reward's parameter set."""
    chosen = REWARDS.get(spec.reward)
    if spec.reward != DEFAULT_REWARD and not spec.icrl:
        raise UsageError(f"--reward {spec.reward} only applies to ICRL; drop it or use --icrl")
    for cls in REWARDS:
        for param in cls.params:
            value = getattr(spec, param.name)
            if value != param.default and not any(p.name == param.name for p in chosen.params):
                raise UsageError(f"{param.flag} only applies to --reward {cls.name}")
            problem = param.problem(value)
            if problem:
                raise UsageError(problem)
