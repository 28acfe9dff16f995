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
loaded (a reward that needs the task checks it there); a reward that asks a model declares the
call (``calls``, ``icrl.method.calls.ModelCall``) and is given its model with ``attach(call, model)``
by the composition root (``icrl.run.assemble``).

    exact_match    1 for the gold label, else 0 (the paper's; the default)
    coarse_credit  ours: 1 for the gold label, 0.5 for another label of the gold label's parent
                   class (the task's [hierarchy]: trec_fine's coarse classes), else 0
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, TypeVar

from ..errors import UsageError
from .calls import Model, ModelCall
from .feedback import shown_feedback
from .registry import Param, Registry
from .shape import RunShape
from .task import TaskView

REWARDS: Registry[type[Reward]] = Registry("reward", "--reward")
DEFAULT_REWARD = "exact_match"
R = TypeVar("R", bound="Reward")


def register_reward(cls: type[R]) -> type[R]:
    """Make ``cls`` (a Reward subclass) the reward ``cls.name``: ``make_reward(name)`` builds
    ``cls(flip=..., flip_prob=...)`` (a class decorator)."""
    REWARDS.register(cls.name, cls)
    return cls


class Reward:
    """Scores a prediction against the gold label; ``flip``/``flip_prob``: the feedback ablation."""

    name = "reward"
    summary = ""
    params: tuple[Param, ...] = ()  # its own parameters (flags), beyond --reward itself
    same_as_accuracy = False  # True: the reward is the exact-match accuracy, not recorded again
    calls: tuple[ModelCall, ...] = ()  # the model calls it makes (icrl.method.calls): a judge's verdict
    scores_tests = True  # False: test steps record no mean reward (it would cost a model call per item)

    def __init__(self, flip: bool = False, flip_prob: Optional[float] = None, **params: Any) -> None:
        self.flip, self.flip_prob = flip, flip_prob
        self.values = params  # its own parameters' values (the class's ``params`` declares them), by name

    def bind(self, task: TaskView) -> "Reward":
        """Called with the run's task once it is loaded; raise UsageError if the reward cannot
        apply to it."""
        return self

    def attach(self, call: ModelCall, model: Model) -> "Reward":
        """The model that answers its declared ``call`` (one of ``calls``), before the run starts."""
        return self

    def score(self, prediction: str, answer: str) -> float:
        """The reward of ``prediction`` when the gold label is ``answer`` (a rule on the gold label;
        test steps are scored with it)."""
        raise NotImplementedError

    def reward_of(self, prediction: str, answer: str, prompt: str, seed: int) -> float:
        """The reward of one training step on the input ``prompt`` (a judge reads it; a rule
        scores the gold label)."""
        return self.score(prediction, answer)

    def fields(self) -> dict[str, Optional[str]]:
        """Record fields of the last ``__call__`` beside the reward (a judge's raw answer)."""
        return {}

    def shown(self, reward: float) -> float:
        """The feedback a reward shows in context, 1 (right) or 0 (wrong), before any flipping."""
        return reward

    def __call__(self, prediction: str, answer: str, *, seed: int, step: int,
                 prompt: str = "") -> tuple[float, float]:
        """(reward, shown feedback) of one training step on input ``prompt``."""
        reward = self.reward_of(prediction, answer, prompt, seed + step)
        return reward, shown_feedback(self.shown(reward), seed, step, self.flip, self.flip_prob)


@register_reward
class ExactMatch(Reward):
    """1 when the predicted label is the gold label, else 0 (the paper's reward)."""

    name = "exact_match"
    summary = "1 for the right label, else 0 (the paper's)"
    same_as_accuracy = True

    def score(self, prediction: str, answer: str) -> int:
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

    def __init__(self, flip: bool = False, flip_prob: Optional[float] = None, **params: Any) -> None:
        super().__init__(flip, flip_prob, **params)
        self.parent: dict[str, str] = {}

    def bind(self, task: TaskView) -> Reward:
        if not task.hierarchy:
            raise UsageError(f"--reward coarse_credit needs a task whose labels have parent classes (a [hierarchy] "
                             f"table, e.g. trec_fine); {task.name} has none")
        self.parent = dict(task.hierarchy)
        return self

    def score(self, prediction: str, answer: str) -> float:
        if prediction == answer:
            return 1
        parent = self.parent.get(answer)
        return self.PARTIAL if parent is not None and self.parent.get(prediction) == parent else 0


JUDGE_MODEL = Param("judge_model", None, "--reward judge: the model that judges (default: the acting model, which "
                    "then rewards itself), loaded with the same backend", type=str, folder="judge",
                    column="judge_model", label="judged by {}")
JUDGE_PREFIX = "Verdict:"
VERDICTS = ("yes", "no")
JUDGE_FIELD = "judge"  # the training line's field of the raw verdict
VERDICT = ModelCall("verdict", field=JUDGE_FIELD, option="judge_model", summary="judge calls")


@register_reward
class Judge(Reward):
    """Ours (after "Reward Is Enough" and FastICRL's reward agent): a model judges whether the
    prediction is right for the input, given the task's description and labels but never the
    gold label; the reward is 1 for "yes", 0 for "no". The acting model judges itself unless
    --judge_model names another. One constrained call a training step (``judge_messages``, the
    answer after ``Verdict:``, greedy); the raw answer is recorded (``judge``) beside the
    reward (``reward``) and the gold accuracy (``accuracy``), so the reward's noise is measurable.
    Test steps record no mean reward."""

    name = "judge"
    summary = ("a model judges the prediction from the input and the labels, never the gold label (the acting "
               "model by default: a self-reward; --judge_model another)")
    params = (JUDGE_MODEL,)
    calls = (VERDICT,)
    scores_tests = False

    def __init__(self, flip: bool = False, flip_prob: Optional[float] = None, **params: Any) -> None:
        super().__init__(flip, flip_prob, **params)
        self.backend: Optional[Model] = None  # the model that judges (its declared call's: ``attach``)
        self.task: Optional[TaskView] = None
        self.last: Optional[str] = None

    def attach(self, call: ModelCall, model: Model) -> Reward:
        self.backend = model
        return self

    def bind(self, task: TaskView) -> Reward:
        self.task = task
        return self

    def reward_of(self, prediction: str, answer: str, prompt: str, seed: int) -> int:
        backend, task = self.backend, self.task
        if backend is None:
            raise RuntimeError(f"{self.name}: no model is attached for its {VERDICT.kind} call (attach)")
        if task is None:
            raise RuntimeError(f"{self.name}: no task is bound (bind)")
        text = backend.render(judge_messages(task, prompt, prediction), JUDGE_PREFIX)
        (self.last,) = backend.predict([text], list(VERDICTS), 0.0, seed)
        return int(self.last == "yes")

    def fields(self) -> dict[str, Optional[str]]:
        return {JUDGE_FIELD: self.last}

    @classmethod
    def call_prompt(cls, call: ModelCall, task: TaskView, prompt: str,
                    label: str) -> tuple[list[dict[str, str]], str, tuple[str, ...]]:
        """The smallest prompt of its ``call`` on the input ``prompt`` (proposed ``label``): its
        messages, the prefix, the answers it may give (a budget check, ``icrl.run.budgets``)."""
        return judge_messages(task, prompt, label), JUDGE_PREFIX, VERDICTS


def judge_messages(task: TaskView, prompt: str, prediction: str) -> list[dict[str, str]]:
    """What the judge is asked: the input, the proposed label, the labels; never the gold label."""
    return [{"role": "system", "content": "You check the answers of a classifier. Reply yes or no."},
            {"role": "user", "content": f"{task.description}\nLabels: {', '.join(task.labels)}.\n\n{prompt}\n"
                                        f"Proposed answer: {prediction}\nIs the proposed answer right?"}]


def reward_names() -> tuple[str, ...]:
    """The registered rewards' names (the choices of --reward)."""
    return REWARDS.names()


def make_reward(name: str = DEFAULT_REWARD, flip: bool = False, flip_prob: Optional[float] = None,
                **params: Any) -> Reward:
    """The reward registered as ``name`` (``params``: its own parameters), with the feedback flipping."""
    return REWARDS.get(name)(flip=flip, flip_prob=flip_prob, **params)


@dataclass(frozen=True)
class RewardSetting:
    """What a run's reward is built from: ``name`` (--reward), the feedback flipping
    (--icrl_flip_feedback, --icrl_flip_feedback_prob) and ``values``: the registered rewards' own
    parameters, by name (those of other rewards at their defaults)."""

    name: str = DEFAULT_REWARD
    flip: bool = False
    flip_prob: Optional[float] = None
    values: Mapping[str, Any] = field(default_factory=dict)


def reward_of_run(setting: RewardSetting) -> Reward:
    """The reward of a run: --reward with its parameters and the flipping."""
    cls = REWARDS.get(setting.name)
    return make_reward(setting.name, setting.flip, setting.flip_prob,
                       **{param.name: setting.values.get(param.name, param.default) for param in cls.params})


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


def check_reward(setting: RewardSetting, run: RunShape) -> None:
    """One-line errors for the reward of a run (icrl.cli.validate): a registered reward, ICRL for
    any but exact match, its own parameters valid, no other reward's parameter set."""
    chosen = REWARDS.get(setting.name)
    if setting.name != DEFAULT_REWARD and not run.icrl:
        raise UsageError(f"--reward {setting.name} only applies to ICRL; drop it or use --icrl")
    options = [call.option for call in chosen.calls if call.option]
    if chosen.calls and run.agent != "llm" and not any(setting.values.get(option) for option in options):
        raise UsageError(f"--reward {setting.name} needs a model to judge; --agent {run.agent} has none: give "
                         f"{' or '.join(f'--{option}' for option in options)}")
    for cls in REWARDS:
        for param in cls.params:
            value = setting.values.get(param.name, param.default)
            if value != param.default and not any(p.name == param.name for p in chosen.params):
                raise UsageError(f"{param.flag} only applies to --reward {cls.name}")
            problem = param.problem(value)
            if problem:
                raise UsageError(problem)
