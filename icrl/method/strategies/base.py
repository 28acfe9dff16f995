"""Context strategies: which past training episodes go into the prompt at each step.

Every step t the runner calls, exactly once::

    context = strategy.select(history, numpy.random.default_rng(seed + t))

where ``history`` is every training episode of steps 0..t-1 in step order. ``select``
returns the chosen episodes in context (chronological) order; ``strategy.metrics()``
then gives the extra per-step metrics of that selection.

A query-aware strategy (class attribute ``query_aware = True``) also sees the input it chooses
a context for: ``select(history, rng, query=prompt)``, once for the step's training input and,
at a test step, once per test input (each with its own generator, ``icrl.run.loop.query_rng``),
so it must be stateless. The published strategies are not query-aware: one context per step.
New strategies are added with ``register_strategy``.

The random stream is used in the same order as the published code (Monea et al. 2024,
arXiv 2410.05362), so a given seed reproduces the published contexts.

Filters: ``_only_positive`` keeps episodes whose shown feedback is 1, ``_only_negative``
those whose feedback is 0. Supervised-ICL episodes have feedback None: the unfiltered
strategies accept them, and neither filter matches them.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import numpy as np

from icrl.method.episode import Episode
from icrl.errors import UsageError

SAMPLING_METHODS = ("uniform", "exact")


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


# --- base ------------------------------------------------------------------------------

class Strategy:
    """Chooses the in-context episodes for one step; see the module docstring."""

    stateful = False
    query_aware = False  # True: select() is given the input the context is for (``query``)

    def __init__(self, max_examples: int, p_keep: float, accept: Callable[[Episode], bool] = _any):
        self.max_examples = max_examples
        self.p_keep = p_keep
        self.accept = accept

    def select(self, history: Sequence[Episode], rng: np.random.Generator,
               query: Optional[str] = None) -> list[Episode]:
        """The context for one input (``query``: given to query-aware strategies only)."""
        raise NotImplementedError

    def metrics(self) -> dict:
        """Extra per-step metrics of the last select (empty for stateless strategies)."""
        return {}

    def reset(self) -> None:
        """Forget all state (a no-op for stateless strategies)."""


# --- random family (stateless) ------------------------------------------------------------

class RandomStrategy(Strategy):
    """Keep each (filtered) episode with probability p_keep, then cut to max_examples.

    Random stream, in order: binomial(1, p_keep, size=n); permutation of the kept positions
    (always drawn, even when nothing or everything is kept); then ``_cut`` picks at most
    max_examples of them. The context is in chronological order.
    """

    def select(self, history, rng, query=None):
        pool = [episode for episode in history if self.accept(episode)]
        keep = rng.binomial(1, self.p_keep, size=len(pool))
        idx = rng.permutation(np.nonzero(keep == 1)[0])
        return [pool[i] for i in self._cut(idx)]

    def _cut(self, idx: np.ndarray) -> np.ndarray:
        raise NotImplementedError


class BiasedStart(RandomStrategy):
    """random_biased_start: of the kept episodes, the max_examples OLDEST ones.

    With p_keep = 1 the context freezes on the first max_examples episodes.
    """

    def _cut(self, idx):
        return np.sort(idx)[: self.max_examples]


class BiasedEnd(RandomStrategy):
    """random_biased_end: of the kept episodes, the max_examples MOST RECENT ones.

    With p_keep = 1 this is the paper's naive ICRL (a sliding window of recent episodes).
    """

    def _cut(self, idx):
        idx = np.sort(idx)
        return idx[max(len(idx) - self.max_examples, 0):]  # not idx[-m:]: m = 0 means none


class Unbiased(RandomStrategy):
    """random_unbiased: of the kept episodes, max_examples chosen uniformly at random.

    With p_keep = 0.1 and the positive filter this is the paper's explorative ICRL.
    """

    def _cut(self, idx):
        return np.sort(idx[: self.max_examples])


RANDOM_BASES: dict[str, type[RandomStrategy]] = {
    "random_biased_start": BiasedStart,
    "random_biased_end": BiasedEnd,
    "random_unbiased": Unbiased,
}


# --- approximate family (stateful) ---------------------------------------------------------

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

    stateful = True

    def __init__(self, max_examples, p_keep, accept=_any, *, max_contexts: int, sampling_method: str):
        super().__init__(max_examples, p_keep, accept)
        self.max_contexts = max_contexts
        self.sampling_method = sampling_method
        self.reoffer = False  # the published re-offer of the last accepted episode (see above)
        self._log_keep = float(np.log(p_keep))
        self._log_drop = float(np.log(1 - p_keep)) if p_keep < 1 else -np.inf  # never drawn at p_keep = 1
        self.reset()

    def reset(self):
        self.contexts: list[list[Episode]] = [[] for _ in range(self.max_contexts)]
        self.log_probs: list[float] = [0.0] * self.max_contexts
        self._last_index: Optional[int] = None

    def select(self, history, rng, query=None):
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

    def _pick(self, rng, early: bool) -> int:
        """The index of the context to show (``early``: no episode has passed the filter yet).
        ``icrl.method.exploration.UCBApproximate`` overrides it."""
        if early or self.sampling_method != "exact":
            return int(rng.choice(range(self.max_contexts)))
        return int(rng.choice(range(self.max_contexts), p=softmax(self.log_probs)))

    def _choose(self, k: int) -> list[Episode]:
        self._last_index = k
        return list(self.contexts[k])

    def metrics(self):
        if self._last_index is None:
            return {}
        return {"context_index": self._last_index,
                "context_lengths": [len(context) for context in self.contexts]}


def softmax(log_probs: Sequence[float]) -> np.ndarray:
    """exp(l - logsumexp(l)) as in the published code; -inf entries get probability 0."""
    log_probs = np.asarray(log_probs, dtype=float)
    if np.all(np.isneginf(log_probs)):  # cannot happen (p_keep > 0), but never return NaN
        return np.full(len(log_probs), 1 / len(log_probs))
    return np.exp(log_probs - np.logaddexp.reduce(log_probs))


APPROXIMATE_FILTERS = ("", "_only_positive")


# --- registry ------------------------------------------------------------------------------

def _random_factory(cls, accept):
    def make(max_examples, p_keep, max_contexts, sampling_method):
        return cls(max_examples, p_keep, accept)
    return make


def _approximate_factory(accept):
    def make(max_examples, p_keep, max_contexts, sampling_method):
        if not _is_int(max_contexts) or max_contexts < 1:
            raise UsageError(f"approximate strategies need max_contexts >= 1 (got {max_contexts!r})")
        if sampling_method not in SAMPLING_METHODS:
            raise UsageError(f"unknown sampling_method {sampling_method!r} for approximate strategies; "
                             f"choose one of: {', '.join(SAMPLING_METHODS)}")
        return Approximate(max_examples, p_keep, accept,
                           max_contexts=max_contexts, sampling_method=sampling_method)
    return make


REGISTRY: dict[str, Callable[..., Strategy]] = {
    **{base + suffix: _random_factory(cls, accept)
       for base, cls in RANDOM_BASES.items() for suffix, accept in FILTERS.items()},
    **{"approximate" + suffix: _approximate_factory(FILTERS[suffix]) for suffix in APPROXIMATE_FILTERS},
}
STRATEGY_NAMES: tuple[str, ...] = tuple(REGISTRY)  # the published ones


def register_strategy(name: str, factory: Callable[..., Strategy]) -> None:
    """Make ``name`` a strategy: ``factory(max_examples, p_keep, max_contexts, sampling_method)``.
    A query-aware strategy must be stateless (its select is called once per test input)."""
    REGISTRY[name] = factory


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def make_strategy(name: str, max_examples: int, p_keep: float = 1.0, max_contexts: int = -1,
                  sampling_method: Optional[str] = None, published_quirks: bool = False) -> Strategy:
    """Build the strategy registered as ``name``; bad names/options raise UsageError.

    max_contexts and sampling_method are used (and required) by the approximate family only.
    ``published_quirks``: an approximate strategy re-offers the last accepted episode when
    the newest one is filtered out, as the published code does (``Approximate``).
    """
    if name not in REGISTRY:
        raise UsageError(f"unknown context strategy {name!r}; choose one of: {', '.join(REGISTRY)}")
    if not _is_int(max_examples) or max_examples < 0:
        raise UsageError(f"max_examples must be an integer >= 0 (got {max_examples!r})")
    if not isinstance(p_keep, (int, float, np.floating)) or isinstance(p_keep, bool) or not 0 < p_keep <= 1:
        raise UsageError(f"p_keep must be in (0, 1] (got {p_keep!r})")
    strategy = REGISTRY[name](max_examples, float(p_keep), max_contexts, sampling_method)
    if published_quirks and isinstance(strategy, Approximate):
        strategy.reoffer = True
    if strategy.query_aware and strategy.stateful:
        raise UsageError(f"{name}: a query-aware strategy must be stateless (it chooses one context per test input)")
    return strategy


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


from icrl.method.strategies import retrieval as _retrieval  # noqa: E402,F401  registers the knn_* strategies (beyond the paper)
