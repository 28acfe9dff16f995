"""What hosted models cost: the price file (``prices.toml``, shipped here with a dated default;
the user's own with ``--prices FILE``) and the dollars of a usage.

    prices = load_prices(None)                      # the default; load_prices("my.toml"): the user's
    price = prices.of("claude-3-5-haiku-20241022")  # Price(input=0.8, cached_input=0.08, output=4.0)
    price.dollars(prompt_tokens=..., cached_prompt_tokens=..., output_tokens=...)

The file (TOML): ``[models."NAME"]`` tables, each with ``input``, ``cached_input`` and
``output``, US dollars per million tokens (0 or more), and an optional ``date``. ``of(name)``
finds a model by its name (a prefix such as ``models/`` or ``openai/`` left out) or by the
longest name in the file that it starts with followed by ``-`` (a dated version of a model);
None where the file has no price for it: said by the caller, never guessed. A file that is not
TOML, a price that is negative or not a number, or a table without its three prices is one
line (UsageError) naming the file and what to fix.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Optional

from ..errors import UsageError

FIELDS = ("input", "cached_input", "output")
DEFAULT = "the default price file"


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens: a prompt token no cache served, one the cache served, a
    generated token."""

    input: float
    cached_input: float
    output: float

    def dollars(self, prompt_tokens: float, cached_prompt_tokens: float, output_tokens: float) -> float:
        """What these tokens cost (``cached_prompt_tokens`` is part of ``prompt_tokens``)."""
        uncached = prompt_tokens - cached_prompt_tokens
        return (uncached * self.input + cached_prompt_tokens * self.cached_input + output_tokens * self.output) / 1e6


@dataclass(frozen=True)
class Prices:
    """A price file read: ``models`` (name -> Price), ``where`` (the file, or the default's
    words), ``date`` (as the file gives it, "" when none) and ``own`` (the user's --prices)."""

    models: dict
    where: str
    date: str = ""
    own: bool = False

    def of(self, model: str) -> Optional[Price]:
        name = model.rsplit("/", 1)[-1]
        if name in self.models:
            return self.models[name]
        stems = [k for k in self.models if name.startswith(k + "-")]
        return self.models[max(stems, key=len)] if stems else None

    def describe(self) -> str:
        """How a report names the file: "the default price file (2025-06-30)" or the user's path."""
        return f"{self.where} ({self.date})" if self.date else self.where

    def missing(self, model: str) -> str:
        """The words for a model without a price (said, not guessed)."""
        table = f"[models.{_key(model.rsplit('/', 1)[-1])}]"
        fix = f"add {table} to it" if self.own else f"give --prices FILE with {table}"
        return f"no price for {model!r} in {self.describe()}: {fix}"


def money(value: float) -> str:
    """Dollars as a report shows them: cents, four decimals below a cent, "<$0.0001" below that."""
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
    return Prices(_models(doc, where), where, str(doc.get("date", "")), own=path is not None)


def _models(doc: dict, where: str) -> dict:
    models = doc.get("models")
    if not isinstance(models, dict) or not models:
        raise UsageError(f"{where} has no [models.NAME] table; give each model's {', '.join(FIELDS)} "
                         f"(US dollars per million tokens)")
    out = {}
    for name, table in models.items():
        if not isinstance(table, dict) or set(table) != set(FIELDS):
            given = ", ".join(table) if isinstance(table, dict) else repr(table)
            raise UsageError(f"{where}: [models.{_key(name)}] must give exactly {', '.join(FIELDS)} (US dollars "
                             f"per million tokens); it gives {given or 'nothing'}")
        for field in FIELDS:
            value = table[field]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise UsageError(f"{where}: [models.{_key(name)}] {field} = {value!r}; a price is a number of US "
                                 f"dollars per million tokens, 0 or more")
        out[name] = Price(*(float(table[f]) for f in FIELDS))
    return out


def _key(name: str) -> str:
    return f'"{name}"' if not name.replace("_", "").replace("-", "").isalnum() else name
