"""What finished runs on hosted APIs used and cost, from their records: run_count_tokens.py's
last table.

A run is billed when its lines record ``usage`` (its backend reported what its API used:
``icrl.backends.usage``). Its prompt tokens, the cached part of them, its output tokens and
requests are summed over its training and test lines (results.json's ``usage``), and priced at
its model's price (``icrl.backends.prices``: the run's ``api_model``, else its model name). A
model without a price in the default price file is said, not guessed; in the user's own file
(``--prices``) it is an error before anything is counted or written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Mapping, NamedTuple, Optional, Union

from ..backends.prices import Prices, money
from ..backends.usage import Usage
from ..errors import UsageError

if TYPE_CHECKING:
    from ..records.schema import TestLine, TrainLine
    from ..run.readback import CheckedRun
    from .results import Results


class Billed(NamedTuple):
    """One billed run: the model it is priced as and what its records say it used."""

    model: str
    usage: Usage


def recorded_usage(run: CheckedRun) -> Optional[Usage]:
    """The sum of a run's (``icrl.run.readback.CheckedRun``) recorded usage; None: no line records one."""
    lines: list[Union[TrainLine, TestLine]] = [*run.train, *run.test]
    recorded = [line.usage for line in lines if line.usage is not None]
    if not recorded:
        return None
    return sum((Usage(**u) for u in recorded), Usage())


def billed_runs(results: Results, run_ids: Iterable[str], prices: Prices) -> dict[str, Billed]:
    """run_id -> Billed for the runs among ``run_ids`` that record usage; UsageError when the
    user's own price file has no price for one of their models."""
    out: dict[str, Billed] = {}
    for run_id in run_ids:
        state = results.state(run_id)
        usage = recorded_usage(state)
        if usage is None:
            continue
        config = state.config
        model = config.backend.api_model or config.spec.model_name
        if prices.own and prices.of(model) is None:
            raise UsageError(f"{prices.missing(model)} (the run {run_id} needs it)")
        out[run_id] = Billed(model, usage)
    return out


def usage_table(billed: Mapping[str, Billed], labels: Mapping[str, str], prices: Prices) -> str:
    """The table of the billed runs (``labels``: run_id -> its name in the token table)."""
    width = max([12, *(len(labels.get(i, i)) for i in billed)])
    lines = ["usage recorded by the API (prompt tokens include the cached ones; dollars at "
             f"{prices.describe()}{', a dated default: check it, or give --prices FILE' if not prices.own else ''})",
             f"{'run':<{width}}  {'model':<28} {'requests':>9} {'prompt':>13} {'cached':>13} {'output':>11} "
             f"{'dollars':>11}"]
    total, unpriced = 0.0, []
    for run_id, (model, u) in billed.items():
        price = prices.of(model)
        cost = price.dollars(u.prompt_tokens, u.cached_prompt_tokens, u.output_tokens) if price else None
        total += cost or 0.0
        if cost is None:
            unpriced.append(model)
        lines.append(f"{labels.get(run_id, run_id):<{width}}  {model:<28} {u.requests:>9,} {u.prompt_tokens:>13,} "
                     f"{u.cached_prompt_tokens:>13,} {u.output_tokens:>11,} "
                     f"{money(cost) if cost is not None else 'no price':>11}"
                     f"{f' ({price.dated()})' if price is not None else ''}")
    lines.append(f"total {money(total)} for {len(billed) - len(unpriced)} of {len(billed)} runs on hosted APIs")
    lines += [f"price of {line}" for line in prices.said(model for model, _ in billed.values())]
    for model in sorted(set(unpriced)):
        lines.append(f"not priced: {prices.missing(model)}")
    return "\n".join(lines) + "\n"
