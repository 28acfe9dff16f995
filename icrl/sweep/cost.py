"""The dollars of a sweep's runs on hosted models, beside ``run_sweep.py --estimate``'s tokens.

A run is priced when its backend reports its API's usage (``icrl.backends.usage.ReportsUsage``:
a hosted API bills it), at its model's price in the price file (``icrl.backends.prices``:
``--api_model``, else ``--model_name``). Its tokens are the estimate's, and what the cache
serves is assumed, and said with the total:

- prompt tokens: the training and test prompts' tokens (``icrl.sweep.estimate``);
- cached: at each test step, the context its prompts share (the prefix its first two prompts
  share, in tokens), served from the provider's prompt cache for every test prompt after the
  step's first; nothing of the training prompts (each step's context is drawn anew);
- output: each label call the tokens of its task's longest label, and the tokens generated at
  their budget (--reasoning, written guides).

The calls of a model other than the acting one (a judge, a reflection model) are not priced:
their prompts are not in the estimate's tokens either. A model without a price in the default
file is said, not guessed; in the user's own file (``--prices``) it is an error before anything
is estimated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Optional, Protocol, Sequence

from ..backends import backend_class, resolve_backend_name
from ..backends.prices import Prices, load_prices, money
from ..backends.usage import ReportsUsage
from ..errors import UsageError
from ..records.configfile import ConfigFile
from ..records.schema import TestLine, TrainLine

if TYPE_CHECKING:
    from .execution import Run

ASSUMED = ("cache assumed: a test step's shared context served from the cache for every test prompt after its "
           "first (the cached-input price), every other prompt token at the input price")


def cached_and_output(record: ConfigFile, train: Sequence[TrainLine], test: Sequence[TestLine],
                      chat: Any) -> dict[str, Any]:
    """The estimate's ``cached_prompt_tokens`` and ``output_tokens`` of a played run (module
    docstring): per test step, its first two prompts' shared prefix once for every prompt after
    the first; the longest label's tokens once per label call."""
    from ..analysis.counting import CountedCall, Replay
    from ..analysis.prefixes import FakeEncoder, SegmentEncoder
    from ..backends.fake import FakeChat

    replay = Replay(record, train, test, chat)
    encoder = FakeEncoder(chat) if isinstance(chat, FakeChat) else SegmentEncoder(chat)
    by_step: dict[int, list[CountedCall]] = {}
    for call in replay.calls():
        if call.kind == "test":
            by_step.setdefault(call.step, []).append(call)
    cached = 0
    for calls in by_step.values():
        if len(calls) > 1:
            a, b = encoder.encode([replay.render_call(calls[0]), replay.render_call(calls[1])])
            n = min(len(a), len(b))
            differ = (a[:n] != b[:n]).nonzero()[0]
            cached += (int(differ[0]) if len(differ) else n) * (len(calls) - 1)
    label = max((chat.count_tokens(f" {x}") for x in record.labels), default=1)
    label_calls = sum(1 for c in replay.calls() if c.kind in ("train", "test"))
    return {"cached_prompt_tokens": cached, "output_tokens": label_calls * label}


class Estimated(Protocol):
    """What a run's price is made of: its estimate's tokens (``icrl.sweep.estimate.Estimate``)."""

    error: Optional[str]
    cached_prompt_tokens: int
    output_tokens: int
    generated_tokens: int

    @property
    def prompt_tokens(self) -> int: ...


@dataclass
class Pricing:
    """The prices of a sweep's runs: ``model`` (run index -> the model it is priced as, for the
    runs a hosted API bills) and the price file."""

    prices: Prices
    model: dict[int, str] = field(default_factory=dict)

    @classmethod
    def of_runs(cls, runs: Sequence[Run], path: Optional[str]) -> "Pricing":
        """The price file ``path`` (None: the default) for the valid ``runs``; UsageError for a
        bad file, or for a billed run whose model the user's own file does not price."""
        prices = load_prices(path)
        pricing = cls(prices)
        for run in runs:
            if run.error is not None:
                continue
            s = run.valid_args().spec
            if not billed(s.backend):
                continue
            pricing.model[run.index] = s.api_model or s.model_name
            if prices.own and prices.of(pricing.model[run.index]) is None:
                raise UsageError(f"{prices.missing(pricing.model[run.index])} (run #{run.index} needs it)")
        return pricing

    def dollars(self, index: int, e: Estimated) -> Optional[float]:
        """Run ``index``'s estimated dollars (None: not billed, not estimated or no price)."""
        price = self.prices.of(self.model[index]) if index in self.model else None
        if price is None or e.error is not None:
            return None
        return price.dollars(e.prompt_tokens, e.cached_prompt_tokens, e.output_tokens + e.generated_tokens)

    def beside(self, index: int, e: Estimated) -> str:
        """What a run's row says of its dollars and the date of its price ("" for a run no API bills)."""
        if index not in self.model or e.error is not None:
            return ""
        value = self.dollars(index, e)
        price = self.prices.of(self.model[index])
        return f"  {money(value)} ({price.dated()})" if value is not None and price is not None else \
            f"  (no price for {self.model[index]!r})"

    def footer(self, estimates: Mapping[int, Estimated]) -> list[str]:
        """The total in dollars, what it assumes, and the runs without a price."""
        if not self.model:
            return []
        priced = {i: self.dollars(i, estimates[i]) for i in self.model if i in estimates}
        lines = [f"dollars: {money(sum(v for v in priced.values() if v is not None))} for "
                 f"{sum(v is not None for v in priced.values())} runs on hosted models, at {self.prices.describe()}"
                 + (" (a dated default: check it, or give --prices FILE)" if not self.prices.own else ""),
                 f"  {ASSUMED}; with no cache at all: {money(self._uncached(estimates))}",
                 *(f"  price of {line}" for line in self.prices.said(self.model[i] for i in sorted(priced)
                                                                     if priced[i] is not None))]
        for model in sorted({self.model[i] for i, v in priced.items() if v is None and estimates[i].error is None}):
            runs = [i for i, v in priced.items() if v is None and self.model[i] == model]
            lines.append(f"  not priced: run(s) #{', #'.join(map(str, runs))}: {self.prices.missing(model)}")
        return lines

    def _uncached(self, estimates: Mapping[int, Estimated]) -> float:
        total = 0.0
        for i, model in self.model.items():
            price, e = self.prices.of(model), estimates.get(i)
            if price is not None and e is not None and e.error is None:
                total += price.dollars(e.prompt_tokens, 0, e.output_tokens + e.generated_tokens)
        return total


def billed(backend: str) -> bool:
    """Whether runs on ``backend`` are billed by a hosted API (its class reports usage)."""
    try:
        return issubclass(backend_class(resolve_backend_name(backend)), ReportsUsage)
    except (UsageError, ImportError, KeyError):
        return False
