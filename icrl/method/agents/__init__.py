"""The agents of a run: the LLM with a context strategy (the paper; ``llm``) and classical
contextual-bandit learners on the run's stream, one arm per label, on text features
(``--features tfidf|minilm``):

    linucb          LinUCB, exploration bonus --bandit_alpha (bandit: learns from the reward)
    epsilon_greedy  ridge per arm, a random arm with probability --bandit_epsilon (bandit)
    supervised      the same ridge model given the gold label (online supervised: upper bound)

Every agent is a policy (``policy.Policy``) that the run's loop calls the same way: it plays each
training step (``act``), the reward function scores it, it learns once the step is recorded
(``learn``), and a test step asks it for a label per test item (``test``), which changes
nothing. Resuming rebuilds it by replaying the training records (``replay``), exactly: the
learners' randomness is seeded per step (``learners``). Each agent is declared in ``AGENTS``
with its title and its own parameters (flags).
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Union

from ...errors import UsageError
from ..registry import Param, Registry
from ..strategies.base import Strategy
from ..task import Row, RunStream
from .features import FEATURES, featurize  # noqa: F401
from .learners import EpsilonGreedy, Learner, LearnerPolicy, LinUCB, Supervised
from .llm import ActingModel, LLMPolicy
from .policy import AgentSetting, Decision, Policy  # noqa: F401

# An agent's class: the LLM's policy, or a learner that LearnerPolicy runs. Both declare name,
# title, params (their own parameters) and summary.
AgentClass = Union[type[LLMPolicy], type[Learner]]
AGENTS: Registry[AgentClass] = Registry("agent", "--agent")
for _cls in (LLMPolicy, LinUCB, EpsilonGreedy, Supervised):
    AGENTS.register(_cls.name, _cls)

AGENT = Param("agent", "llm", "llm: an LLM with a context strategy (the paper); linucb, epsilon_greedy: a "
                              "contextual-bandit learner on text features, one arm per label, learning from the "
                              "reward; supervised: the same ridge learner given the gold label (upper bound)",
              type=str, choices=AGENTS.names())


def is_learner(agent: Optional[str]) -> bool:
    return agent not in (None, "llm")


def make_policy(setting: AgentSetting, data: RunStream[Row], *, backend: Optional[ActingModel] = None,
                strategy: Optional[Strategy] = None, mode: str = "icrl", debug_k: int = 0,
                tester: Optional[ActingModel] = None) -> Policy:
    """The agent of a run: ``setting`` its agent's, ``data`` its RunData; an LLM's ``backend`` (its
    training calls), ``tester`` (its test calls; default: ``backend``), ``strategy`` (None for
    zero-shot) and ``mode``."""
    if is_learner(setting.agent):
        return LearnerPolicy.of_run(learner_class(setting.agent), setting, data)
    if backend is None:
        raise ValueError(f"--agent {setting.agent}: an LLM's policy needs its model (backend)")
    return LLMPolicy(backend, data.task, strategy, mode, setting, data.exemplar_pairs, debug_k, tester)


def learner_class(name: str) -> type[Learner]:
    """The learner registered as ``--agent name`` (one line when the name is unknown or not a learner's)."""
    cls = AGENTS.get(name)
    if not issubclass(cls, Learner):
        raise UsageError(f"--agent {name} is not a learner: choose one of "
                         f"{', '.join(n for n in AGENTS.names() if is_learner(n))}")
    return cls


def agent_params() -> list[Param]:
    """--agent, --features, then each learner's own parameters."""
    return [AGENT, FEATURES, *[param for cls in AGENTS if is_learner(cls.name) for param in cls.params]]


def llm_params() -> list[Param]:
    """The LLM agent's own parameters (--reasoning)."""
    return list(LLMPolicy.params)


def label_of_args(args: Mapping[str, Any]) -> str:
    """The name a figure or table gives a learner's run (config.json "args"), e.g. "LinUCB (tfidf)",
    "LinUCB (minilm, alpha=0.5)": its title, its features, its own parameters that are not at
    their defaults."""
    cls = AGENTS.get(args["agent"])
    parts = [str(args.get("features", FEATURES.default))]
    for param in cls.params:
        value = args.get(param.name, param.default)
        part = param.label_of(float(value) if isinstance(value, (int, float)) and value is not None else value)
        if part:
            parts.append(part)
    return f"{cls.title} ({', '.join(parts)})"


def agent_folder(args: Mapping[str, Any]) -> str:
    """The run folder's first part for a learner, in place of the model's: ``agent+<agent>+<features>``
    (a model's folder never holds a '+': icrl.records.safepaths)."""
    return f"agent+{args['agent']}+{args.get('features', FEATURES.default)}"


def check_agent(setting: AgentSetting) -> None:
    """Each agent's own parameters are valid, and a learner's go with that learner (one line
    otherwise; the LLM's are refused for learners by their role, only="llm")."""
    for param in LLMPolicy.params:
        problem = param.problem(setting.values.get(param.name, param.default))
        if problem:
            raise UsageError(problem)
    for cls in AGENTS:
        if not is_learner(cls.name):
            continue
        for param in cls.params:
            value = setting.values.get(param.name, param.default)
            if value != param.default and setting.agent != cls.name:
                raise UsageError(f"{param.flag} is {cls.title}'s: use it with --agent {cls.name}")
            problem = param.problem(value)
            if problem:
                raise UsageError(problem)
