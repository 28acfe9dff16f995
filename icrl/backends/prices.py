"""What hosted models cost: the price file (``prices.toml``, shipped here with a dated default;
the user's own with ``--prices FILE``) and the dollars of a usage.

    prices = load_prices(None)                      # the default; load_prices("my.toml"): the user's
    price = prices.of("claude-3-5-haiku-20241022")  # Price(input=0.8, cached_input=0.08, output=4.0, ...)
    price.dollars(prompt_tokens=..., cached_prompt_tokens=..., output_tokens=...)
    price.dated()                                   # "price of 2026-12-02" (what a report prints beside it)

The file (TOML): ``[models."NAME"]`` tables, each with ``input``, ``cached_input`` and
``output``, US dollars per million tokens (from 0 to ``MAX_PRICE``, finite), and optionally
``source`` (the provider's page), ``date`` (a TOML date, ``2026-12-02``, not a string or a
number: when the price was read there) and ``unconfirmed`` (why it could not be checked against
that page); a ``date`` at the top dates the prices without one. ``of(name)`` finds a model by
its name (a prefix such as ``models/`` or ``openai/`` left out) or by the longest name in the
file that it starts with followed by ``-`` (a dated version of a model); None where the file
has no price for it: said by the caller, never guessed. A file that is not TOML, a price out of
range or not a number, a date that is not a TOML date, a table without its three prices or with
another key is one line (UsageError) naming the file and what to fix.
"""

from __future__ import annotations

import datetime
import math
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Optional

from ..errors import UsageError

FIELDS = ("input", "cached_input", "output")
NOTES = ("source", "date", "unconfirmed")  # optional: where a price was read, when, and why it is not confirmed
MAX_PRICE = 1_000_000.0  # US dollars per million tokens: a dollar a token; more is a slip (1e308 printed $inf)
DEFAULT = "the default price file"


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens: a prompt token no cache served, one the cache served, a
    generated token."""

    input: float
    cached_input: float
    output: float
    source: str = ""
    date: Optional[datetime.date] = None
    unconfirmed: str = ""

    def dated(self) -> str:
        """What a report prints beside the dollars: ``price of 2026-12-02`` (``, unconfirmed``)."""
        when = f"price of {self.date.isoformat()}" if self.date else "undated price"
        return f"{when}, unconfirmed" if self.unconfirmed else when

    def said(self, model: str) -> str:
        """The price in a line: its three figures, and when and where it was read, or why it is not
        confirmed."""
        when = self.date.isoformat() if self.date else "no date"
        if self.unconfirmed:
            how = f"as of {when}, not confirmed against {self.source or 'the provider'}: {self.unconfirmed}"
        else:
            how = f"read {when} from {self.source}" if self.source else when
        return (f"{model}: ${self.input:g} / ${self.cached_input:g} / ${self.output:g} per million input / cached "
                f"input / output tokens, {how}")

    def dollars(self, prompt_tokens: float, cached_prompt_tokens: float, output_tokens: float) -> float:
        """What these tokens cost (``cached_prompt_tokens`` is part of ``prompt_tokens``)."""
        uncached = prompt_tokens - cached_prompt_tokens
        return (uncached * self.input + cached_prompt_tokens * self.cached_input + output_tokens * self.output) / 1e6


@dataclass(frozen=True)
class Prices:
    """A price file read: ``models`` (name -> Price), ``where`` (the file, or the default's
    words), ``date`` (the file's own, None when none) and ``own`` (the user's --prices)."""

    models: dict[str, Price]
    where: str
    date: Optional[datetime.date] = None
    own: bool = False

    def of(self, model: str) -> Optional[Price]:
        name = model.rsplit("/", 1)[-1]
        if name in self.models:
            return self.models[name]
        stems = [k for k in self.models if name.startswith(k + "-")]
        return self.models[max(stems, key=len)] if stems else None

    def describe(self) -> str:
        """How a report names the file: "the default price file (2026-12-02)" or the user's path."""
        return f"{self.where} ({self.date.isoformat()})" if self.date else self.where

    def said(self, models: Iterable[str]) -> list[str]:
        """One line per model of ``models`` the file prices (``Price.said``), in order."""
        return [price.said(name) for name, price in ((m, self.of(m)) for m in dict.fromkeys(models)) if price]

    def missing(self, model: str) -> str:
        """The words for a model without a price (said, not guessed)."""
        table = f"[models.{_key(model.rsplit('/', 1)[-1])}]"
        fix = f"add {table} to it" if self.own else f"give --prices FILE with {table}"
        return f"no price for {model!r} in {self.describe()}: {fix}"


def money(value: float) -> str:
    """Dollars as a report shows them: cents, four decimals below a cent, "<$0.0001" below that."""
    if not math.isfinite(value):  # prices are at most MAX_PRICE: only tokens past counting get here
        return "(too large to show)"
    if value == 0 or value >= 0.01:
        return f"${value:,.2f}"
    return f"${value:.4f}" if value >= 0.0001 else "<$0.0001"


def load_prices(path: Optional[str] = None) -> Prices:
    """The user's price file ``path`` (None: the default shipped with icrl), checked."""
    if path is None:
        text = resources.files(__package__).joinpath("prices.toml").read_text(encoding="utf-8")
        where = DEFAULT
    else:
        where = f"--prices {path}"
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"{where}: cannot read it ({exc.__class__.__name__}: {exc}); give a TOML price "
                             f"file (docs/backends.md, 'Prices')") from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{where} is not TOML ({exc}); see docs/backends.md, 'Prices', for the format") from None
    return Prices(_models(doc, where), where, _date(doc.get("date"), where, "date"), own=path is not None)


def _models(doc: dict[str, Any], where: str) -> dict[str, Price]:
    models = doc.get("models")
    if not isinstance(models, dict) or not models:
        raise UsageError(f"{where} has no [models.NAME] table; give each model's {', '.join(FIELDS)} "
                         f"(US dollars per million tokens)")
    out = {}
    for name, table in models.items():
        key = f"[models.{_key(name)}]"
        if not isinstance(table, dict) or not set(FIELDS) <= set(table) <= {*FIELDS, *NOTES}:
            given = ", ".join(table) if isinstance(table, dict) else repr(table)
            raise UsageError(f"{where}: {key} must give exactly {', '.join(FIELDS)} (US dollars per million tokens), "
                             f"and may give {', '.join(NOTES)}; it gives {given or 'nothing'}")
        for field in FIELDS:
            value = table[field]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_PRICE:
                raise UsageError(f"{where}: {key} {field} = {value!r}; a price is a number of US dollars per million "
                                 f"tokens, from 0 to {MAX_PRICE:,.0f}")
        for field in ("source", "unconfirmed"):
            if not isinstance(table.get(field, "x"), str) or not table.get(field, "x").strip():
                raise UsageError(f"{where}: {key} {field} = {table[field]!r}; give it as text")
        out[name] = Price(float(table["input"]), float(table["cached_input"]), float(table["output"]),
                          table.get("source", ""), _date(table.get("date"), where, f"{key} date"),
                          table.get("unconfirmed", ""))
    return out


def _date(value: object, where: str, what: str) -> Optional[datetime.date]:
    """A TOML date (``2026-12-02``, no quotes), or None when not given."""
    if value is None or type(value) is datetime.date:
        return value
    raise UsageError(f"{where}: {what} = {value!r}; give the date the price was read as a TOML date, e.g. "
                     f"{what.rsplit(' ', 1)[-1]} = 2026-12-02 (no quotes)")


def _key(name: str) -> str:
    return f'"{name}"' if not name.replace("_", "").replace("-", "").isalnum() else name
