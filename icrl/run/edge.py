"""The edge of a plugin's parts: what a plugin's code returns is checked where it returns.

icrl calls a plugin's strategy, reward and figures as it calls its own parts, and what they
return goes into prompts, records and figures. Each return is checked here against the contract
of its base class (``icrl.plugin``):

    part       method        must return
    strategy   select()      a list of episodes of the history it was given, each once; at most
                             --max_context_examples of them when the strategy ``reads`` it
               metrics()     a dict of JSON values: text keys, finite numbers, nested at most 32 deep
               prepare()     a dict from the record fields of its declared calls to text or None
               preamble()    a string
               build()       a Strategy
    reward     the reward    a finite number (an int or a float), shown as feedback 1, 0 or 0.5
               score()       a finite number
               fields()      as prepare()
               bind()        the reward itself
    figure     draw(ctx)     a matplotlib figure, or a string saying why it is skipped

``strategy(make, owner, max_examples)``, ``reward(make, owner)`` and ``figure(name, draw,
owner)`` put a part of the plugin ``owner`` behind its checks (a proxy: every other attribute is
the part's own); a part of icrl's (``owner`` None) is returned as it is, so no call of a built-in
part changes. What a plugin's method raises is the plugin's, a SystemExit and a
KeyboardInterrupt it raised itself included, unless it is a UsageError (its own one-line
refusal), a stop a signal asked for, or raised by icrl's code that the plugin called (a model it
asks, the records check): those pass on as they are (``icrl.infra.plugins``).

A breach, and what a plugin raised, is a :class:`PluginBreach`: a UsageError whose one line
names the plugin, its file, the method and what it returned or raised; ``line(steps)`` says at
which step and that the steps before it are kept (``icrl.run.plugins.failure``).
"""

from __future__ import annotations

import copy
import inspect
import math
import reprlib
from typing import Any, Callable, Optional, ParamSpec, Self, Sequence, TypeVar

from ..errors import UsageError
from ..infra import plugins, signals
from ..method.episode import Episode
from ..method.rewards import Reward
from ..method.strategies.base import Strategy
from ..tasks import Task

P = ParamSpec("P")
R = TypeVar("R")
C = TypeVar("C")

FEEDBACK = (1, 0, 0.5)  # what a prompt can say of an episode (icrl.method.prompts.feedback_message)
DEPTH = 32  # the deepest nesting of a metric's value
_SHORT = reprlib.Repr()
_SHORT.maxstring, _SHORT.maxother, _SHORT.maxlist, _SHORT.maxtuple, _SHORT.maxdict, _SHORT.maxlevel = 40, 40, 4, 4, 4, 2


class PluginBreach(UsageError):
    """A plugin's method returned what its contract refuses (``what``: e.g. "select() returned
    'abc'"; ``expected``), or raised (``function``: the method; ``what``: what it raised)."""

    def __init__(self, plugin: plugins.Plugin, what: str, expected: str = "", function: str = ""):
        self.plugin, self.what, self.expected, self.function = plugin, what, expected, function
        super().__init__(self.line())

    def line(self, steps: Optional[int] = None) -> str:
        """The one line; ``steps``: the steps done (the run's), said with the resume hint."""
        at = "" if steps is None else f" at step {steps}"
        if self.function:
            head = f"{self.plugin.label} failed in {self.function}{at}: {self.what}"
            remedy = "once the plugin works, rerun the same command"
        else:
            head = f"{self.plugin.label}: {self.what}{at}, expected {self.expected}"
            remedy = "fix the plugin and rerun the same command"
        if not steps:  # None: no run (a figure); 0: no step done yet
            return f"{head}; {remedy}"
        kept = "the step before it is kept" if steps == 1 else f"the {steps} steps before it are kept"
        return f"{head}; {kept}: {remedy} to resume"


def short(value: Any) -> str:
    """``value`` as a line shows it: its repr, cut short."""
    try:
        text = _SHORT.repr(value)
    except Exception:  # noqa: BLE001 - a plugin's object whose repr fails
        text = f"a {type(value).__name__}"
    return " ".join(text.split())


def guarded(plugin: plugins.Plugin, function: str, call: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """``call(*args, **kwargs)``, a method of ``plugin``'s: what it raises of its own is a
    PluginBreach naming ``function``; the rest passes on (module docstring)."""
    arrived = signals.arrivals()
    try:
        return call(*args, **kwargs)
    except BaseException as exc:  # sorted: the plugin's own, or passed on as it is
        if isinstance(exc, UsageError) or plugins.raised_by_icrl(exc) or plugins.asked_to_stop(exc, arrived):
            raise
        breach = PluginBreach(plugin, plugins.said(exc), function=function)
        cause = exc if signals.stop_in(exc) is None else None  # no KeyboardInterrupt in its chain
    raise breach from cause  # outside the handler: the exception it replaces is not its context


# -- what a return must be -------------------------------------------------------------------------
def finite(value: object) -> bool:
    """An int or a finite float (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return isinstance(value, int) or math.isfinite(value)


def json_value(value: object, depth: int = 0) -> bool:
    """A value a record line can hold and read back the same: JSON, numbers finite."""
    if depth > DEPTH:
        return False
    if value is None or isinstance(value, (bool, str)) or finite(value):
        return True
    if isinstance(value, (list, tuple)):
        return all(json_value(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and json_value(v, depth + 1) for k, v in value.items())
    return False


def _position(history: Sequence[Episode], episode: Episode) -> Optional[int]:
    """Where ``episode`` is in ``history`` (the history's episodes are consecutive steps)."""
    first = history[0].step if len(history) else None
    if isinstance(first, int) and isinstance(episode.step, int) and 0 <= episode.step - first < len(history):
        at = history[episode.step - first]
        if at is episode or at == episode:
            return episode.step - first
    return next((i for i, e in enumerate(history) if e is episode or e == episode), None)


def context_breach(context: object, history: Sequence[Episode], limit: Optional[int]) -> Optional[str]:
    """What is wrong with ``context`` as a select() of ``history`` (None: nothing)."""
    if not isinstance(context, (list, tuple)) or not all(isinstance(e, Episode) for e in context):
        return f"returned {short(context)}"
    if limit is not None and len(context) > limit:
        return f"returned {len(context)} episodes"
    seen: set[int] = set()
    for episode in context:
        at = _position(history, episode)
        if at is None:
            return f"returned an episode that is not in the history it was given (step {episode.step!r})"
        if at in seen:
            return f"returned the episode of step {episode.step!r} twice"
        seen.add(at)
    return None


def fields_breach(value: object, part: object) -> Optional[str]:
    """What is wrong with ``value`` as the record fields of ``part``'s declared calls."""
    declared = {call.field for call in getattr(part, "calls", ()) if call.field}
    if isinstance(value, dict) and all(k in declared and (v is None or isinstance(v, str)) for k, v in value.items()):
        return None
    return f"returned {short(value)}"


def fields_expected(part: object) -> str:
    declared = [call.field for call in getattr(part, "calls", ()) if call.field]
    return f"a dict from {', '.join(declared)} to text or None" if declared else "{} (it declares no model call)"


# -- the proxies ---------------------------------------------------------------------------------
class _Edge:
    """A plugin's part behind its checks: the methods below are checked, every other method
    guarded, every other attribute the part's own (read and set)."""

    _part: object  # set on the instance (object.__setattr__: its own __setattr__ sets the part's)
    _plugin: plugins.Plugin

    def __init__(self, part: object, plugin: plugins.Plugin) -> None:
        object.__setattr__(self, "_part", part)
        object.__setattr__(self, "_plugin", plugin)

    def __getattr__(self, name: str) -> Any:
        if name in ("_part", "_plugin"):  # not set yet (a copy being made)
            raise AttributeError(name)
        value = getattr(self._part, name)
        if inspect.ismethod(value) and value.__self__ is self._part:
            return lambda *args, **kwargs: self._call(name, *args, **kwargs)
        return value

    def __setattr__(self, name: str, value: object) -> None:
        setattr(self._part, name, value)

    def __copy__(self) -> Self:
        """The same checks in front of a copy of the part (a policy recalls a step with one)."""
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)
        object.__setattr__(clone, "_part", copy.copy(self._part))
        return clone

    def __repr__(self) -> str:
        return f"{self._part!r} (checked: {self._plugin.label})"

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        result = guarded(self._plugin, name, getattr(self._part, name), *args, **kwargs)
        return self if result is self._part else result

    def _breach(self, what: str, expected: str) -> PluginBreach:
        return PluginBreach(self._plugin, what, expected)


class CheckedStrategy(_Edge):
    """A plugin's strategy (module docstring)."""

    _limit: Optional[int]  # --max_context_examples where the strategy reads it (set as _part is)

    def __init__(self, part: Strategy, plugin: plugins.Plugin, max_examples: int) -> None:
        super().__init__(part, plugin)
        reads = "max_context_examples" in getattr(part, "reads", ())
        object.__setattr__(self, "_limit", max_examples if reads else None)

    def select(self, history: Sequence[Episode], *args: Any, **kwargs: Any) -> Sequence[Episode]:
        context = self._call("select", history, *args, **kwargs)
        wrong = context_breach(context, history, self._limit)
        if wrong is not None:
            most = "" if self._limit is None else f"at most {self._limit} "
            raise self._breach(f"select() {wrong}", f"a list of {most}episodes from the history, each once")
        return context

    def metrics(self) -> dict[str, Any]:
        value = self._call("metrics")
        if not isinstance(value, dict) or not json_value(value):
            raise self._breach(f"metrics() returned {short(value)}",
                               "a dict of JSON values (text keys, finite numbers)")
        return value

    def prepare(self, *args: Any, **kwargs: Any) -> dict[str, Optional[str]]:
        value = self._call("prepare", *args, **kwargs)
        wrong = fields_breach(value, self._part)
        if wrong is not None:
            raise self._breach(f"prepare() {wrong}", fields_expected(self._part))
        return value

    def preamble(self, *args: Any, **kwargs: Any) -> str:
        value = self._call("preamble", *args, **kwargs)
        if not isinstance(value, str):
            raise self._breach(f"preamble() returned {short(value)}", "a string ('' for none)")
        return value


class CheckedReward(_Edge):
    """A plugin's reward (module docstring)."""

    def __call__(self, *args: Any, **kwargs: Any) -> tuple[float, float]:
        value = self._call("__call__", *args, **kwargs)
        if not (isinstance(value, tuple) and len(value) == 2):
            raise self._breach(f"__call__() returned {short(value)}", "(reward, shown feedback)")
        reward, feedback = value
        if not finite(reward):
            raise self._breach(f"its reward (score or reward_of) returned {short(reward)}", "a finite number")
        if not finite(feedback) or feedback not in FEEDBACK:
            raise self._breach(f"its feedback (shown) is {short(feedback)} for the reward {short(reward)}",
                               "1, 0 or 0.5 (what the prompt says of the episode)")
        return value

    def score(self, *args: Any, **kwargs: Any) -> float:
        value = self._call("score", *args, **kwargs)
        if not finite(value):
            raise self._breach(f"score() returned {short(value)}", "a finite number")
        return value

    def fields(self) -> dict[str, Optional[str]]:
        value = self._call("fields")
        wrong = fields_breach(value, self._part)
        if wrong is not None:
            raise self._breach(f"fields() {wrong}", fields_expected(self._part))
        return value

    def bind(self, task: Task) -> CheckedReward:
        bound = self._call("bind", task)
        if bound is self:
            return self
        if isinstance(bound, Reward):
            return CheckedReward(bound, self._plugin)
        raise self._breach(f"bind() returned {short(bound)}", "the reward itself (return self)")


# -- where a run's parts and the figures are made ------------------------------------------------
def strategy(make: Callable[[], Any], owner: Optional[plugins.Plugin], max_examples: int) -> Any:
    """The run's strategy, ``make()``, checked at its edge when ``owner`` is a plugin (its
    ``build`` guarded too); as it is otherwise. Any: a CheckedStrategy acts as the Strategy it
    checks without being one."""
    if owner is None:
        return make()
    part = guarded(owner, "build", make)
    if isinstance(part, CheckedStrategy):
        return part
    if not isinstance(part, Strategy):
        raise PluginBreach(owner, f"build() returned {short(part)}", "a Strategy (e.g. cls(setting.max_examples, ...))")
    return CheckedStrategy(part, owner, max_examples)


def reward(make: Callable[[], Any], owner: Optional[plugins.Plugin]) -> Any:
    """The run's reward, ``make()``, checked at its edge when ``owner`` is a plugin (its
    ``__init__`` guarded too); as it is otherwise. Any: a CheckedReward acts as the Reward it
    checks without being one."""
    if owner is None:
        return make()
    part = guarded(owner, "__init__", make)
    return part if isinstance(part, CheckedReward) else CheckedReward(part, owner)


def figure(name: str, draw: Callable[[C], R], owner: Optional[plugins.Plugin]) -> Callable[[C], R]:
    """The figure ``name`` (``draw(ctx)``), checked at its edge when ``owner`` is a plugin: what
    it raises of its own, and a return that is neither a figure nor a string, is a PluginBreach."""
    if owner is None:
        return draw

    def checked(ctx: C) -> R:
        from matplotlib.figure import Figure

        drawn = guarded(owner, f"figure {name!r}", draw, ctx)
        if not isinstance(drawn, (str, Figure)):
            raise PluginBreach(owner, f"figure {name!r} returned {short(drawn)}",
                               "a matplotlib figure, or a string saying why it is skipped")
        return drawn

    return checked
