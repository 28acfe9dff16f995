"""The composition root: the one place a run's configuration becomes its parts.

    parts = assemble(config, data, plan, models, records)
    parts.loop.run(start)

From the run's settings (``config.spec``, read here and nowhere else on the way to a run) it
builds the strategy (None for zero-shot and for a learner), the reward (bound to the task),
the policy and the loop, and hands every part that asks a model the model of each call it
declares (``icrl.method.calls``), and the loop the meter of those models' usage (where their
APIs report it: ``icrl.backends.usage.Meter``). Four callers put a run together through it, and
differ only in what they plug in:

    caller                           models (``models(call)``)              records
    the experiment (experiment.py)   the real backend, other models by name  the run's files
    the records check (rebuild.py)   a model that answers from the records   memory
    the cost estimate (estimate.py)  a stand-in answering at a reward share  memory
    the token counter (counting.py)  no model: the strategy, the Prompter     (reads the files)

``plan_of`` gives the plan from a context size (each caller resolves that size its own way:
from the window, config.json or the size cache), ``build_strategy`` the strategy alone,
``build_reward`` the reward alone (a plugin's strategy and reward are checked at their edge:
``icrl.run.edge``), ``strategy_of_record`` and ``prompter_of_record`` a finished run's strategy
and wording from its config.json (the token counter), ``calls_of`` the calls a run will make
before anything is built (to load their models first),
``all_calls`` every call a registered part declares (what a record can hold; the counter and
the estimate count each as ``<field>_calls``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from ..backends.usage import Meter
from ..config import RunConfig, given
from ..method.agents import is_learner, make_policy
from ..method.calls import ANSWER, TEST_ANSWER, ModelCall, Models, declared_calls
from ..method.declared import registered_calls
from ..method.exploration import strategy_of_run
from ..method.prompts import Prompter
from ..method.rewards import REWARDS, Reward, reward_of_run
from ..method.strategies.base import STRATEGIES, Strategy
from ..records.configfile import ConfigFile
from ..records.schema import TestLine, TrainLine
from . import edge
from .data import RunData
from .loop import Loop, LoopRecords
from .observers import Observer
from ..records.plan import Plan


@dataclass
class Parts:
    """A run's parts, ready to run: ``loop.run(loop.restore(...))`` or ``loop.run(0)``."""

    plan: Plan
    strategy: object
    reward: object
    policy: object
    loop: Loop


class MemoryRecords:
    """Where the records go when they stay in memory (the records check, the estimate): the
    lines the loop would write."""

    def __init__(self) -> None:
        self.train: list[TrainLine] = []
        self.test: list[TestLine] = []

    def append_train(self, line: TrainLine) -> TrainLine:
        self.train.append(line)
        return line

    def append_test(self, line: TestLine) -> TestLine:
        self.test.append(line)
        return line

    def rewrite_train(self, lines: Sequence[TrainLine]) -> None:
        self.train = list(lines)

    def rewrite_test(self, lines: Sequence[TestLine]) -> None:
        self.test = sorted(lines, key=lambda r: r.step)

    def refresh_results(self, *args: object, **kwargs: object) -> None:
        return None


def plan_of(config: RunConfig, data: RunData, size: Optional[int]) -> Plan:
    """The run's plan with ``size`` context episodes (None: a learner's)."""
    s = config.spec
    return Plan.of(bool(s.icrl), size, len(data.train), s.test_every)


def build_strategy(config: RunConfig, plan: Plan) -> Optional[Strategy]:
    """The run's context strategy for ``plan`` (None for zero-shot and for a learner)."""
    size, choice = plan.max_examples, config.strategy_choice
    if plan.mode == "zero_shot" or is_learner(config.shape.agent) or size is None or choice is None:
        return None  # a learner's plan has no size
    built: Strategy = edge.strategy(lambda: strategy_of_run(choice, size, config.exploration),
                                    STRATEGIES.owner(choice.name), size)
    return built


def build_reward(config: RunConfig, given: Optional[Reward] = None) -> Reward:
    """The run's reward: ``given``, or the one --reward names; a plugin's is checked at its edge."""
    setting = config.reward_setting
    built: Reward = edge.reward(lambda: reward_of_run(setting) if given is None else given, REWARDS.owner(setting.name))
    return built


def strategy_of_record(record: ConfigFile, *, published: bool = False) -> tuple[RunConfig, Optional[Strategy]]:
    """(the run's configuration, its context strategy) of a run's config.json ``record`` (the
    strategy None where the run has none): what the token counter rebuilds a finished run's
    preambles with; ``published``: the strategy as the published code runs it
    (``--published_quirks``), whose contexts the published token counter rebuilds."""
    spec = record.spec
    if published:
        spec = dataclasses.replace(spec, published_tokenization=True)
    config = RunConfig(spec)
    if spec.context_strategy_name not in STRATEGIES:
        return config, None
    return config, build_strategy(config, record.plan())


def prompter_of_record(record: ConfigFile) -> Prompter:
    """How the run of config.json ``record`` worded its calls (the token counter replays them)."""
    from types import SimpleNamespace

    from ..tasks import prompt_parts

    agent = RunConfig(record.spec).agent_setting
    exemplars = tuple((e.prompt, e.answer) for e in record.exemplars)
    return Prompter(SimpleNamespace(**prompt_parts(given(record.spec.task_name, "task_name"))), record.resolved.mode,
                    agent.omit_feedback, exemplars, agent.reasoning is not None)


def calls_of(config: RunConfig) -> list[ModelCall]:
    """The calls of the run ``config`` beyond the acting model's own: its strategy's, then its
    reward's (from their declarations, before anything is built)."""
    parts: list[type] = []
    name = config.shape.strategy
    if name and not is_learner(config.shape.agent) and name in STRATEGIES:
        parts.append(STRATEGIES.get(name).cls)
    parts.append(REWARDS.get(config.reward_setting.name))
    return declared_calls(*parts)


def all_calls() -> list[ModelCall]:
    """Every call a registered strategy or reward declares, each once (what a record can hold)."""
    return registered_calls()


def by_option(config: RunConfig, acting: Any, load: Callable[[str], Any]) -> Models:
    """The models of a run: ``load(name)`` for a call whose option names a model, else ``acting``."""

    def models(call: ModelCall) -> Any:
        name = call.model_name(config.call_options)
        return load(name) if name else acting

    return models


def assemble(config: RunConfig, data: RunData, plan: Plan, models: Models, records: LoopRecords, *,
             reward: Optional[Reward] = None, observers: Sequence[Observer] = (),
             check_directory: Callable[[], None] = lambda: None, debug_k: int = 0,
             contexts: Optional[Callable[[Strategy], Any]] = None) -> Parts:
    """The parts of the run ``config`` on ``data`` with ``plan`` (module docstring). ``reward``:
    the reward to bind and give its models (default: the run's own, built here); ``contexts``:
    wraps the strategy (the records check's, for a query-aware strategy: a stand-in that acts as
    the strategy, ``icrl.run.replay.ContextsOnRecord``)."""
    strategy = build_strategy(config, plan)
    for call in declared_calls(strategy):
        if strategy is not None:
            strategy.attach(call, models(call))
    if contexts is not None and strategy is not None:
        strategy = contexts(strategy)
    reward = build_reward(config, reward).bind(data.task)
    for call in declared_calls(reward):
        reward.attach(call, models(call))
    agent = config.agent_setting
    learner = is_learner(agent.agent)
    policy = make_policy(agent, data, backend=None if learner else models(ANSWER), strategy=strategy, mode=plan.mode,
                         debug_k=debug_k, tester=None if learner else models(TEST_ANSWER))
    calls = [] if learner else [ANSWER, TEST_ANSWER]
    meter = Meter(models(call) for call in [*calls, *declared_calls(strategy, reward)])  # the APIs' usage, if any
    loop = Loop(given(config.spec.seed, "seed"), data, plan, policy, reward, records, observers,
                check_directory=check_directory, meter=meter)
    return Parts(plan, strategy, reward, policy, loop)
