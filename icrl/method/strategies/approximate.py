"""The approximate family (the paper's approximate ICRL): K append-only contexts grown online,
one of them shown each step, so that a prefix cache keeps most of each prompt."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

from ...errors import UsageError
from ..episode import Episode
from .base import Setting, Strategy, _any, _is_int, register_strategy
from .ucb import UCB

SAMPLING_METHODS = ("uniform", "exact")


@register_strategy
class Approximate(Strategy):
    """approximate: K contexts grown online; each step one of them is shown (paper's approximate ICRL).

    The newest episode joins each non-full context with probability p_keep; a context is then
    picked uniformly ("uniform") or in proportion to its probability ("exact").

    State: K append-only contexts of at most max_examples episodes, and each context's
    log-probability (sum of log p_keep / log(1 - p_keep) over its keep/drop draws).
    Each select, with the step's rng:

    * while no episode of the history passes the filter (in particular, at step 0):
      ``rng.choice(range(K))`` and an empty context, as in the published code;
    * else, if the NEWEST episode (history[-1]) passes the filter: for each context k in
      order, full contexts are skipped without a draw, otherwise ``rng.binomial(1, p_keep)``
      appends it (logp += log p_keep) or not (logp += log(1 - p_keep));
      if the newest episode is filtered out, nothing changes and nothing is drawn;
    * then the context index: uniform ``rng.choice(range(K))``, exact
      ``rng.choice(range(K), p=softmax(logp))``; a copy of that context is returned.

    A ``chooser`` (``--ucb_alpha``: :class:`icrl.method.strategies.ucb.UCB`) picks the index
    instead, with no draw.

    Only the newest episode is looked at, so call select exactly once per step, in order;
    ``replay`` rebuilds the state of a resumed run.

    Difference from the published code: there, ``approximate_only_positive`` filters the
    whole history and offers the LAST POSITIVE episode, so when the newest episode is
    negative the most recent positive one is offered again (and can be appended twice, with
    extra log-probability terms). Here a filtered-out newest episode changes nothing, unless
    ``reoffer`` is set (``--published_quirks``; the token counter sets it to rebuild the
    contexts the published ``run_count_tokens.py`` counts): then the newest episode that
    passes the filter is offered, with the draws above, as published.
    """

    name = "approximate"
    family = "approximate"
    filters = ("", "_only_positive")
    stateful = True
    published = True
    uses = ("max_contexts", "approximate_context_sampling_method")
    summary = "K contexts grown online, one shown each step (approximate ICRL; --max_contexts, " \
              "--approximate_context_sampling_method)"

    def __init__(self, max_examples: int, p_keep: float, accept: Callable[[Episode], bool] = _any, *,
                 max_contexts: int, sampling_method: str, reoffer: bool = False, chooser: Optional[UCB] = None):
        super().__init__(max_examples, p_keep, accept)
        self.max_contexts = max_contexts
        self.sampling_method = sampling_method
        self.reoffer = reoffer  # the published re-offer of the last accepted episode (see above)
        self.chooser = chooser  # picks the shown context instead of the sampling method (UCB)
        self._log_keep = float(np.log(p_keep))
        self._log_drop = float(np.log(1 - p_keep)) if p_keep < 1 else -np.inf  # never drawn at p_keep = 1
        self.reset()

    @classmethod
    def build(cls, setting: Setting) -> Approximate:
        v = setting.values
        return cls(setting.max_examples, setting.p_keep, setting.accept, max_contexts=v["max_contexts"],
                   sampling_method=v["approximate_context_sampling_method"], reoffer=setting.published_quirks)

    @classmethod
    def check(cls, name: str, values: Mapping[str, Any]) -> None:
        if not _is_int(values.get("max_contexts")) or values["max_contexts"] < 1:
            raise UsageError(f"{name} needs --max_contexts >= 1 (e.g. 8)")
        if values.get("approximate_context_sampling_method") not in SAMPLING_METHODS:
            raise UsageError(f"{name} needs --approximate_context_sampling_method {' or '.join(SAMPLING_METHODS)}")

    @classmethod
    def folder(cls, name: str, args: Mapping[str, Any]) -> str:
        return f"{name}_{args['approximate_context_sampling_method']}_{args['max_contexts']}"

    @classmethod
    def label_parts(cls, row: Mapping[str, Any]) -> list[str]:
        return [f"K={_fmt(row['max_contexts'])} {row['sampling_method']}"]

    def reset(self) -> None:
        self.forget()
        if self.chooser is not None:
            self.chooser.reset()

    def forget(self) -> None:
        """Empty the contexts; a chooser keeps its statistics (they belong to the K slots)."""
        self.contexts: list[list[Episode]] = [[] for _ in range(self.max_contexts)]
        self.log_probs: list[float] = [0.0] * self.max_contexts
        self._last_index: Optional[int] = None

    def select(self, history: Sequence[Episode], rng: np.random.Generator,
               query: Optional[str] = None) -> list[Episode]:
        if self.reoffer:  # the newest episode that passes the filter, as published
            newest = next((episode for episode in reversed(history) if self.accept(episode)), None)
        else:
            newest = history[-1] if any(self.accept(episode) for episode in history) else None
        if newest is None:
            return self._choose(self._pick(rng, early=True))
        if self.accept(newest):
            for k, context in enumerate(self.contexts):
                if len(context) >= self.max_examples:
                    continue
                if rng.binomial(1, self.p_keep):
                    context.append(newest)
                    self.log_probs[k] += self._log_keep
                else:
                    self.log_probs[k] += self._log_drop
        return self._choose(self._pick(rng, early=False))

    def _pick(self, rng: np.random.Generator, early: bool) -> int:
        """The index of the context to show (``early``: no episode has passed the filter yet)."""
        if self.chooser is not None:
            return self.chooser.pick()
        if early or self.sampling_method != "exact":
            return int(rng.choice(range(self.max_contexts)))
        return int(rng.choice(range(self.max_contexts), p=softmax(self.log_probs)))

    def _choose(self, k: int) -> list[Episode]:
        self._last_index = k
        return list(self.contexts[k])

    def observe_reward(self, reward: float, context: Sequence[Episode] = ()) -> None:
        if self.chooser is not None:  # the context it chose last: the training step's (one select a step)
            self.chooser.observe(self._last_index, reward)

    def metrics(self) -> dict[str, Any]:
        if self._last_index is None:
            return {}
        out = {"context_index": self._last_index, "context_lengths": [len(context) for context in self.contexts]}
        if self.chooser is not None:
            out.update(self.chooser.metrics(self._last_index))
        return out


def softmax(log_probs: Sequence[float]) -> np.ndarray:
    """exp(l - logsumexp(l)) as in the published code; -inf entries get probability 0."""
    values = np.asarray(log_probs, dtype=float)
    if np.all(np.isneginf(values)):  # cannot happen (p_keep > 0), but never return NaN
        return np.full(len(values), 1 / len(values))
    return np.exp(values - np.logaddexp.reduce(values))


def _fmt(value: object) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return "-" if value is None or value != value else str(value)
