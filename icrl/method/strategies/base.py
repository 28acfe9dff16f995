"""Context strategies: which past training episodes go into the prompt at each step.

Every step t the runner calls, exactly once::

    context = strategy.select(history, numpy.random.default_rng(seed + t))

where ``history`` is every training episode of steps 0..t-1 in step order. ``select``
returns the chosen episodes in context (chronological) order; ``strategy.metrics()``
then gives the extra per-step metrics of that selection.

A query-aware strategy (class attribute ``query_aware = True``) also sees the input it chooses
a context for: ``select(history, rng, query=prompt)``, once for the step's training input and,
at a test step, once per test input (each with its own generator, ``icrl.method.agents.llm.query_rng``),
so it must be stateless. The published strategies are not query-aware: one context per step.

A strategy is a subclass of :class:`Strategy` that declares itself in class attributes (its
base ``name``, ``family``, the ``filters`` it takes, ``query_aware``, ``stateful``, its own
``params``, the shared published settings it ``uses``, a one-line ``summary``) and is
registered with :func:`register_strategy`: it is then a choice of ``--context_strategy_name``
under each of its names (the base name with each filter suffix), its parameters are flags, and
every tool reads the declaration (see :mod:`icrl.method.registry`). ``strategy_of(name)`` is the
one place a strategy's name is taken apart.

The random stream is used in the same order as the published code (Monea et al. 2024,
arXiv 2410.05362), so a given seed reproduces the published contexts.

Filters: ``_only_positive`` keeps episodes whose shown feedback is 1, ``_only_negative``
those whose feedback is 0. Supervised-ICL episodes have feedback None: the unfiltered
strategies accept them, and neither filter matches them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, NamedTuple, Optional, Sequence, TypeVar

import numpy as np

from ...errors import UsageError
from ..calls import Model, ModelCall
from ..episode import Episode, StepRecord
from ..registry import Param, Registry
from ..shape import RunShape
from ..task import TaskView


# --- filters ---------------------------------------------------------------------------

def _any(episode: Episode) -> bool:
    return True


def _positive(episode: Episode) -> bool:
    return episode.feedback == 1


def _negative(episode: Episode) -> bool:
    return episode.feedback == 0


FILTERS: dict[str, Callable[[Episode], bool]] = {
    "": _any,
    "_only_positive": _positive,
    "_only_negative": _negative,
}
FILTER_NAMES = {"": "all episodes", "_only_positive": "positive only", "_only_negative": "negative only"}


# --- what a strategy is built from ------------------------------------------------------------

@dataclass(frozen=True)
class Setting:
    """What one run's strategy is built from: its context size, the shared p_keep, its filter,
    the run's configuration values (the strategy's own parameters and the published settings it
    ``uses``), and ``published_quirks`` (--published_quirks: the published code's behaviour where
    it differs from ours)."""

    max_examples: int
    p_keep: float = 1.0
    accept: Callable[[Episode], bool] = _any
    values: Mapping[str, Any] = field(default_factory=dict)
    published_quirks: bool = False


@dataclass(frozen=True)
class StrategyChoice:
    """What a run's settings choose of its strategy (its context size comes from the run's plan):
    ``name`` (--context_strategy_name), ``p_keep`` (--context_p_keep), ``values`` (the published
    settings of the approximate family and the strategies' own parameters, by name) and
    ``published_quirks`` (--published_quirks)."""

    name: str
    p_keep: float = 1.0
    values: Mapping[str, Any] = field(default_factory=dict)
    published_quirks: bool = False

    def build(self, max_examples: int) -> "Strategy":
        """The strategy with ``max_examples`` episodes in context."""
        return make_strategy(self.name, max_examples, self.p_keep, published_quirks=self.published_quirks,
                             **self.values)


# --- base ------------------------------------------------------------------------------

class Strategy:
    """Chooses the in-context episodes for one step; see the module docstring.

    The declaration, in class attributes: ``name`` (the base name; the registered names are it
    with each suffix of ``filters``), ``family`` (strategies alike in what they keep: random,
    approximate, retrieval), ``query_aware``, ``stateful``, ``params`` (its own parameters, each
    a flag and a configuration field), ``uses`` (the published settings it reads besides
    --max_context_examples and --context_p_keep, e.g. --max_contexts), ``reads`` (which of
    --max_context_examples and --context_p_keep act on its context: a summary's neither),
    ``summary`` (one line:
    what it keeps in context), ``title`` (how figures name it among its family), ``published``
    (a strategy of the published code)."""

    name = ""
    family = ""
    filters: tuple[str, ...] = tuple(FILTERS)
    stateful = False
    learns = False  # True: observe_reward changes what later selects choose (replayed on resume)
    calls: tuple[ModelCall, ...] = ()  # its own model calls (icrl.method.calls; the acting model's are the agent's)
    query_aware = False  # True: select() is given the input the context is for (``query``)
    params: tuple[Param, ...] = ()
    uses: tuple[str, ...] = ()
    reads: tuple[str, ...] = ("max_context_examples", "context_p_keep")
    summary = ""
    title = ""  # how figures name it beside others of its family (default: its name)
    published = False  # one of the published code's strategies

    def __init__(self, max_examples: int, p_keep: float, accept: Callable[[Episode], bool] = _any):
        self.max_examples = max_examples
        self.p_keep = p_keep
        self.accept = accept

    @classmethod
    def build(cls, setting: Setting) -> "Strategy":
        """The strategy of a run (subclasses with parameters read them from ``setting.values``)."""
        return cls(setting.max_examples, setting.p_keep, setting.accept)

    @classmethod
    def check(cls, name: str, values: Mapping[str, Any]) -> None:
        """Refuse, in one line, settings this strategy (registered as ``name``) cannot run with
        (``values``: the run's configuration; its own ``params`` are checked one by one before)."""

    @classmethod
    def folder(cls, name: str, args: Mapping[str, Any]) -> str:
        """The run folder's strategy part (the published layout): the strategy's name."""
        return name

    @classmethod
    def label_parts(cls, row: Mapping[str, Any]) -> list[str]:
        """What a run's label in figures and tables says of this strategy's settings (``row``:
        the run's row of the results table); its own params with a ``label`` are added anyway."""
        return []

    def select(self, history: Sequence[Episode], rng: np.random.Generator,
               query: Optional[str] = None) -> list[Episode]:
        """The context for one input (``query``: given to query-aware strategies only)."""
        raise NotImplementedError

    def attach(self, call: ModelCall, model: Model) -> None:
        """The model that answers its declared ``call`` (one of ``calls``), before the run starts."""

    def prepare(self, step: int, history: Sequence[Episode], task: TaskView, seed: int,
                temperature: float) -> dict[str, Optional[str]]:
        """Called before ``select`` at every training step: the model calls the strategy makes
        there (its ``calls``, seeded from ``seed``), and the training line's fields that record
        their answers ({} when it makes none)."""
        return {}

    def restore(self, records: Sequence[StepRecord], upto: int) -> None:
        """Its state at training step ``upto`` read back from the training ``records`` (what its
        own calls answered: never asked again on resume)."""

    def metrics(self) -> dict[str, Any]:
        """Extra per-step metrics of the last select (empty for stateless strategies)."""
        return {}

    def preamble(self, history: Sequence[Episode], labels: Sequence[str]) -> str:
        """Text the prompt shows before the episodes (a summary of ``history``); "" for none."""
        return ""

    def reset(self) -> None:
        """Forget all state (a no-op for stateless strategies)."""

    def forget(self) -> None:
        """Forget the episodes seen so far (``--prob_reset``), keeping what was learned about the
        strategy's own choices (UCB's statistics); by default the same as ``reset``."""
        self.reset()

    def observe_reward(self, reward: float, context: Sequence[Episode] = ()) -> None:
        """The reward of a training step that the model predicted with ``context`` (the episodes
        its select chose; not after an explored step). Only strategies that learn from it use it."""


# --- the registry: one entry per name (base name + filter) ---------------------------------

class StrategyName(NamedTuple):
    """A registered name taken apart: its strategy class and its filter suffix."""

    cls: "type[Strategy]"
    filter: str

    @property
    def base(self) -> str:
        return self.cls.name

    @property
    def family(self) -> str:
        return self.cls.family

    @property
    def accept(self) -> Callable[[Episode], bool]:
        return FILTERS[self.filter]


STRATEGIES: Registry[StrategyName] = Registry("context strategy", "--context_strategy_name")


_S = TypeVar("_S", bound=Strategy)


def register_strategy(cls: type[_S]) -> type[_S]:
    """Register a Strategy subclass under its name with each of its filters (a class decorator).
    A query-aware strategy must be stateless (its select is called once per test input)."""
    if not cls.name or not cls.family:
        raise ValueError(f"{cls.__name__} declares no name or family")
    if cls.query_aware and cls.stateful:
        raise ValueError(f"{cls.name}: a query-aware strategy must be stateless (one context per test input)")
    for suffix in cls.filters:
        STRATEGIES.register(cls.name + suffix, StrategyName(cls, suffix))
    return cls


def unregister_strategy(cls: type[Strategy]) -> None:
    """Take a strategy's names out of the registry again (tests that register one of their own)."""
    for suffix in cls.filters:
        STRATEGIES.unregister(cls.name + suffix)


def strategy_of(name: str) -> StrategyName:
    """The class and filter of a registered strategy name (UsageError for any other name)."""
    return STRATEGIES.get(name)


def split_name(name: str) -> tuple[str, str]:
    """(base name, filter suffix) of a strategy name, registered or not (records of a strategy
    this installation lacks): "random_unbiased_only_positive" -> ("random_unbiased", "_only_positive")."""
    if name in STRATEGIES:
        found = STRATEGIES.get(name)
        return found.base, found.filter
    for suffix in FILTERS:
        if suffix and name.endswith(suffix):
            return name[: -len(suffix)], suffix
    return name, ""


def strategy_params() -> list[Param]:
    """Every registered strategy's own parameters, in registration order (each once)."""
    seen: dict[str, Param] = {}
    for entry in STRATEGIES:
        for param in entry.cls.params:
            seen.setdefault(param.name, param)
    return list(seen.values())


def unread_settings(run: RunShape) -> list[str]:
    """The strategies' published settings (their ``uses``: --max_contexts,
    --approximate_context_sampling_method) that ``run`` does not read: those its strategy does not
    use, all of them for zero-shot and for learners."""
    names = list(dict.fromkeys(name for entry in STRATEGIES for name in entry.cls.uses))
    if run.zero_shot or run.agent != "llm" or run.strategy is None or run.strategy not in STRATEGIES:
        return names
    uses = STRATEGIES.get(run.strategy).cls.uses
    return [name for name in names if name not in uses]


def owners_of(param: str) -> list[str]:
    """The base names of the strategies that declare ``param``."""
    return list(dict.fromkeys(e.base for e in STRATEGIES if any(p.name == param for p in e.cls.params)))


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def make_strategy(name: str, max_examples: int, p_keep: float = 1.0, max_contexts: int = -1,
                  sampling_method: Optional[str] = None, published_quirks: bool = False,
                  **values: Any) -> Strategy:
    """Build the strategy registered as ``name``; bad names/options raise UsageError.

    max_contexts and sampling_method are the published settings of the approximate family;
    ``values``: other configuration values (a strategy's own parameters).
    ``published_quirks``: the published code's behaviour where it differs (``Approximate``).
    """
    entry = strategy_of(name)
    if not _is_int(max_examples) or max_examples < 0:
        raise UsageError(f"max_examples must be an integer >= 0 (got {max_examples!r})")
    if not isinstance(p_keep, (int, float, np.floating)) or isinstance(p_keep, bool) or not 0 < p_keep <= 1:
        raise UsageError(f"p_keep must be in (0, 1] (got {p_keep!r})")
    values = {"max_contexts": max_contexts, "approximate_context_sampling_method": sampling_method,
              **{p.name: p.default for p in entry.cls.params}, **values}
    entry.cls.check(name, values)
    return entry.cls.build(Setting(max_examples, float(p_keep), entry.accept, values, published_quirks))


def replay(strategy: Strategy, history: Sequence[Episode], seed: int) -> Strategy:
    """Reset ``strategy`` and rebuild its state as if steps 0..len(history)-1 had run live.

    Calls ``select(history[:t], default_rng(seed + t))`` for each t (stateful strategies
    only; stateless ones are just reset), so that a resumed run's next step,
    ``select(history, default_rng(seed + len(history)))``, matches an uninterrupted run.
    """
    strategy.reset()
    if strategy.stateful:
        for t in range(len(history)):
            strategy.select(history[:t], np.random.default_rng(seed + t))
    return strategy
