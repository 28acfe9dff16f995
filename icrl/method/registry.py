"""Declarations: each part of the method says once what it is and what it takes.

A part (a context strategy, an exploration, a reward, an agent) is registered under its name in
a :class:`Registry` of its kind, and declares its typed parameters as :class:`Param` objects.
Everything else reads these declarations, nothing restates them: the run configuration makes
each parameter a field (``icrl.config``), the command line a flag with its type, default and
help (``icrl.cli.run``), validation checks it (``icrl.cli.validate``), the run folder names it
when it is set (``icrl.records.layout``), the results loader gives it a column and the figures
a part of a run's label (``icrl.analysis.runs``).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any, Callable, Generic, ItemsView, Iterator, Mapping, Optional, TypeVar

from ..errors import UsageError
from ..infra import plugins

T = TypeVar("T")


@dataclass(frozen=True)
class Param:
    """One typed parameter: a configuration field and the run_experiment.py flag ``--<name>``.

    ``type``: the flag's type (float, int, str or bool); ``choices``: its allowed values (empty:
    any); ``check(value)``: what is wrong with a value that is not valid, in words to follow
    "must be" (e.g. "a probability in [0, 1]"), or None; ``folder``: its short name in the run
    folder, where it is named when it differs from its default (None: never); ``column``: its
    column in the results table (None: none); ``label``: its part of a run's label in figures
    and tables while it differs from its default, ``{}`` standing for the value (None: not
    shown); ``only``: "llm" or "learner" when it means something to that kind of agent alone;
    ``folder_value`` False: the run folder names the parameter without its value, so another
    value is the same run's (refused on resume) rather than a run beside it."""

    name: str
    default: Any
    help: str
    type: type = float
    choices: tuple[Any, ...] = ()
    check: Optional[Callable[[Any], Optional[str]]] = None
    folder: Optional[str] = None
    column: Optional[str] = None
    label: Optional[str] = None
    only: str = ""
    folder_value: bool = True  # False: the folder part is the short name alone (the value is in config.json)

    @property
    def flag(self) -> str:
        return f"--{self.name}"

    def label_of(self, value: object) -> Optional[str]:
        """Its part of a run's label for ``value`` (None while at the default, or without a label)."""
        if self.label is None or value is None or value == self.default or value != value:  # NaN: unset
            return None
        return self.label.format(f"{value:g}" if isinstance(value, float) else value)

    def problem(self, value: object) -> Optional[str]:
        """A one-line refusal of ``value`` (None when it is valid or the default)."""
        if value is None or value == self.default:
            return None
        if self.choices and value not in self.choices:
            return f"unknown {self.flag} {value!r}; choose one of: {', '.join(map(str, self.choices))}"
        wrong = self.check(value) if self.check else None
        return f"{self.flag} must be {wrong}, got {value}" if wrong else None


def probability(value: float) -> Optional[str]:
    """``Param.check``: a probability in [0, 1] (NaN is not one)."""
    return None if 0 <= value <= 1 else "a probability in [0, 1]"


def finite_non_negative(value: float) -> Optional[str]:
    """``Param.check``: a finite number >= 0."""
    return None if 0 <= value < float("inf") else "a finite number >= 0"


class Registry(Generic[T]):
    """The registered parts of one kind, by name, in registration order. ``flag``: the option
    that names one (its unknown-name error says which names there are). Each name has an owner:
    the plugin that registered it (``icrl.infra.plugins``), or None for icrl's own; a name
    registered twice is a one-line UsageError naming both owners."""

    def __init__(self, kind: str, flag: str):
        self.kind, self.flag = kind, flag
        self._items: dict[str, T] = {}
        self._owners: dict[str, Optional[plugins.Plugin]] = {}
        _REGISTRIES.add(self)

    def register(self, name: str, item: T) -> T:
        what = f"the {self.kind} {name!r}"
        if name in self._items:
            raise plugins.collision(what, self._owners.get(name), plugins.current())
        self._items[name] = item
        self._owners[name] = plugins.registered(what, lambda: self.unregister(name))
        return item

    def unregister(self, name: str) -> None:
        """Take a part out again (a plugin that failed to load; tests that register one of their own)."""
        self._items.pop(name, None)
        self._owners.pop(name, None)

    def owner(self, name: str) -> Optional[plugins.Plugin]:
        """The plugin that registered ``name`` (None: icrl's own, or not registered)."""
        return self._owners.get(name)

    def get(self, name: str) -> T:
        """The part registered as ``name``; an unknown name is a one-line UsageError."""
        try:
            return self._items[name]
        except (KeyError, TypeError):
            raise UsageError(f"unknown {self.flag} {name!r}; choose one of: {', '.join(self._items)}") from None

    def names(self) -> tuple[str, ...]:
        return tuple(self._items)

    def items(self) -> ItemsView[str, T]:
        return self._items.items()

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[T]:
        return iter(self._items.values())

    def __len__(self) -> int:
        return len(self._items)


_REGISTRIES: "weakref.WeakSet[Registry[Any]]" = weakref.WeakSet()


def chosen_owners(values: Mapping[str, Any]) -> list[Optional[plugins.Plugin]]:
    """The owners of the parts a run's configuration ``values`` chooses by name (each registry's
    flag, e.g. --reward): the plugins the run uses (None: icrl's own)."""
    return [registry.owner(values[registry.flag[2:]]) for registry in list(_REGISTRIES)
            if registry.flag.startswith("--") and isinstance(values.get(registry.flag[2:]), str)]
