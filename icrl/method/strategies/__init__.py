"""Context strategies: which past episodes go into the prompt (:mod:`.base` says how a strategy
is declared and registered). One module per family; every module of this package is imported
here, the published families first, so a new strategy is one new module in this folder."""

import importlib
import pkgutil

from . import random, approximate, retrieval  # noqa: F401  the published families, then ours, in --help order
from .approximate import SAMPLING_METHODS, Approximate, softmax  # noqa: F401
from .base import (FILTER_NAMES, FILTERS, STRATEGIES, Setting, Strategy, StrategyName, make_strategy,  # noqa: F401
                   owners_of, register_strategy, replay, split_name, strategy_of, strategy_params)

for _module in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    importlib.import_module(f"{__name__}.{_module.name}")  # any other family, by name: registers itself

# the published strategies' names (the paper's script accepts these)
PUBLISHED = tuple(name for name, entry in STRATEGIES.items() if entry.cls.published)
