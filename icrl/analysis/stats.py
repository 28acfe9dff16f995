"""Statistics for comparing runs (scipy; no hand-written distributions).

Two runs tested on the same items at a step are compared *paired*, item by item:

    from icrl.analysis.stats import paired_outcomes, compare_paired
    a, b, ids = paired_outcomes("data/.../naive/...", "data/.../explorative/...", step="last")
    result = compare_paired(a, b)           # McNemar's exact test + paired bootstrap interval
    print(result.line())   # e.g. "0.320 vs 0.370 on 200 shared items: difference -0.050 [-0.135, +0.040]
                           #  (paired bootstrap 95%), McNemar exact p=0.31 (34 vs 44 discordant)"

- ``mcnemar_exact``: McNemar's exact test: of the discordant items (one run right, the other
  wrong), is the split b : c compatible with 1 : 1? Two-sided binomial test (scipy.stats.binomtest).
- ``paired_bootstrap``: percentile interval of the accuracy difference, resampling items
  (scipy.stats.bootstrap with ``paired=True``, seeded).
- ``seed_summary``: across seeds of one configuration, mean, 95% interval and n; for accuracies
  (``items`` given) the interval is ``proportion_interval``'s, a Student-t interval on the
  empirical-logit scale, inside [0, 1].
- ``minimum_detectable_difference``: the smallest accuracy difference two runs on ``test_k``
  items each can detect (two-sided two-proportion z-test at ``alpha``, with ``power``), to
  size a study before running it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence, Union

import numpy as np
from numpy.typing import ArrayLike
from scipy import optimize, special, stats

from ..errors import UsageError
from ..run.readback import read_run

CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 9999
BOOTSTRAP_SEED = 0
PAIRED_TEST = "McNemar exact"


@dataclass(frozen=True)
class McNemar:
    only_a: int      # items run A got right and run B wrong (b in the textbook table)
    only_b: int      # items run B got right and run A wrong (c)
    pvalue: float    # two-sided exact p-value

    @property
    def discordant(self) -> int:
        return self.only_a + self.only_b


def _binary(values: ArrayLike, name: str) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError(f"{name} must be one outcome per item (1-D), got shape {array.shape}")
    if array.size and not np.isin(array, (0, 1, True, False)).all():
        raise ValueError(f"{name} must hold 0/1 (wrong/right) per item")
    return array.astype(float)


def _pair(correct_a: ArrayLike, correct_b: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    a, b = _binary(correct_a, "correct_a"), _binary(correct_b, "correct_b")
    if a.shape != b.shape:
        raise ValueError(f"paired outcomes need the same items: {a.size} and {b.size} outcomes")
    if not a.size:
        raise ValueError("paired outcomes need at least one item")
    return a, b


def mcnemar_exact(correct_a: ArrayLike, correct_b: ArrayLike) -> McNemar:
    """McNemar's exact test on per-item outcomes (1 right, 0 wrong) of two runs on the same items.

    The p-value is the two-sided binomial test of ``only_a`` successes in ``only_a + only_b``
    trials at 1/2; 1.0 when no item is discordant.
    """
    a, b = _pair(correct_a, correct_b)
    only_a, only_b = int(((a == 1) & (b == 0)).sum()), int(((a == 0) & (b == 1)).sum())
    if only_a + only_b == 0:
        return McNemar(0, 0, 1.0)
    return McNemar(only_a, only_b, float(stats.binomtest(only_a, only_a + only_b, 0.5).pvalue))


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float

    def text(self, signed: bool = False) -> str:
        f = "{:+.3f}" if signed else "{:.3f}"
        return f"{f.format(self.estimate)} [{f.format(self.low)}, {f.format(self.high)}]"


def _difference(a: np.ndarray, b: np.ndarray, axis: int = -1) -> Union[float, np.ndarray]:
    # a number for one set of outcomes (numpy's float64 is a float), an array for scipy's batches of resamples
    return np.mean(a, axis=axis) - np.mean(b, axis=axis)


def paired_bootstrap(correct_a: ArrayLike, correct_b: ArrayLike, confidence: float = CONFIDENCE,
                     n_resamples: int = BOOTSTRAP_RESAMPLES,
                     seed: int = BOOTSTRAP_SEED) -> Interval:
    """Accuracy of A minus accuracy of B with a paired percentile bootstrap interval.

    Items are resampled with both runs' outcomes kept together (scipy.stats.bootstrap,
    ``paired=True``); seeded, so the same records give the same interval. When every item
    has the same difference (e.g. the runs agree everywhere) the interval is that difference.
    """
    a, b = _pair(correct_a, correct_b)
    estimate = float(_difference(a, b))
    if np.all(a - b == (a - b)[0]):
        return Interval(estimate, estimate, estimate)
    result = stats.bootstrap((a, b), _difference, paired=True, vectorized=True, confidence_level=confidence,
                             n_resamples=n_resamples, method="percentile", rng=np.random.default_rng(seed))
    return Interval(estimate, float(result.confidence_interval.low), float(result.confidence_interval.high))


@dataclass(frozen=True)
class PairedComparison:
    accuracy_a: float
    accuracy_b: float
    n: int                    # shared items
    difference: Interval      # accuracy_a - accuracy_b, paired bootstrap
    mcnemar: McNemar
    alpha: float = 0.05

    @property
    def outcome(self) -> str:
        """"above" / "below" (A against B, McNemar p < alpha) or "same"."""
        if self.mcnemar.pvalue >= self.alpha:
            return "same"
        return "above" if self.accuracy_a > self.accuracy_b else "below"

    def line(self) -> str:
        return (f"{self.accuracy_a:.3f} vs {self.accuracy_b:.3f} on {self.n} shared items: difference "
                f"{self.difference.text(signed=True)} (paired bootstrap {CONFIDENCE:.0%}), {PAIRED_TEST} "
                f"{format_p(self.mcnemar.pvalue)} ({self.mcnemar.only_a} vs {self.mcnemar.only_b} discordant)")


def format_p(p: float) -> str:
    """"p=0.021" or "p<0.0001"."""
    return f"p={p:.2g}" if p >= 1e-4 else "p<0.0001"


def compare_paired(correct_a: ArrayLike, correct_b: ArrayLike, alpha: float = 0.05,
                   seed: int = BOOTSTRAP_SEED) -> PairedComparison:
    """Both paired statistics for two runs' per-item outcomes on the same items."""
    a, b = _pair(correct_a, correct_b)
    return PairedComparison(float(a.mean()), float(b.mean()), int(a.size), paired_bootstrap(a, b, seed=seed),
                            mcnemar_exact(a, b), alpha)


def item_outcomes(run_dir: Union[str, Path], step: int | str = "last") -> dict[str, int]:
    """{test example id: 1 right / 0 wrong} of one run at a test step (an int or "last"),
    from its records (test.jsonl predictions against config.json's test answers)."""
    state = read_run(Path(run_dir))  # DamagedRecords (one line) where a resume refuses the run
    ids, answers = state.config.test_set.ids, state.config.test_set.answers
    records = state.test[-1:] if step == "last" else [r for r in state.test if r.step == step]
    if not records:
        have = [r.step for r in state.test]
        raise UsageError(f"{run_dir}: no test record at step {step!r} (test steps on disk: {have})")
    predictions = records[0].predictions
    if len(ids) != len(predictions) or len(answers) != len(predictions):
        raise UsageError(f"{run_dir}: config.json's test set does not match the {len(predictions)} predictions")
    return {str(i): int(p == a) for i, p, a in zip(ids, predictions, answers)}


def paired_outcomes(run_a: Union[str, Path], run_b: Union[str, Path], step: int | str = "last",
                    step_b: int | str | None = None) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(outcomes of A, outcomes of B, item ids) on the test items both runs share, matched by
    id, at ``step`` (of B: ``step_b`` when given, e.g. 0 for the naive run's zero-shot point)."""
    a, b = item_outcomes(run_a, step), item_outcomes(run_b, step if step_b is None else step_b)
    shared = [i for i in a if i in b]
    if not shared:
        raise UsageError(f"{run_a} and {run_b} share no test items: a paired comparison needs the same "
                         f"test set (same --test_seed and --test_k)")
    return np.array([a[i] for i in shared]), np.array([b[i] for i in shared]), shared


@dataclass(frozen=True)
class SeedSummary:
    mean: float
    low: float
    high: float
    n: int

    def text(self) -> str:
        if self.n < 2 or math.isnan(self.low):
            return f"{self.mean:.3f} (n={self.n})"
        return f"{self.mean:.3f} [{self.low:.3f}, {self.high:.3f}] (n={self.n})"


def seed_summary(values: Sequence[float], confidence: float = CONFIDENCE, items: Optional[int] = None) -> SeedSummary:
    """Mean of one metric across seeds with its 95% interval and n.

    With ``items`` the values are accuracies, each the share right of ``items`` test items, and
    the interval is a Student-t interval of the seeds' empirical logits mapped back through the
    logistic function (``proportion_interval``): it lies in [0, 1] however few the seeds and
    however near 0 or 1 the accuracies. Without ``items``: a Student-t interval of the values
    (scipy.stats.t; for metrics that are not proportions, regret). NaN values are dropped; with
    one value the interval is NaN, with none everything is.
    """
    x = np.asarray([v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))], dtype=float)
    n = int(x.size)
    if n == 0:
        return SeedSummary(math.nan, math.nan, math.nan, 0)
    mean = float(x.mean())
    if n == 1:
        return SeedSummary(mean, math.nan, math.nan, 1)
    if items is not None:
        return SeedSummary(mean, *proportion_interval(x, items, confidence), n)
    sem = float(stats.sem(x))
    if sem == 0:
        return SeedSummary(mean, mean, mean, n)
    low, high = stats.t.interval(confidence, n - 1, loc=mean, scale=sem)
    return SeedSummary(mean, float(low), float(high), n)


def accuracy_summary(values: Sequence[float], items: Optional[float]) -> SeedSummary:
    """``seed_summary`` of accuracies over ``items`` test items each (a number, or None/NaN when
    the records do not say: then mean and n with no interval, never one that could leave [0, 1])."""
    try:
        count = int(items) if items is not None else 0
    except (TypeError, ValueError):  # NaN, or a missing value of a table's (pd.NA)
        count = 0
    if count >= 1:
        return seed_summary(values, items=count)
    s = seed_summary(values)
    return SeedSummary(s.mean, math.nan, math.nan, s.n)


def proportion_interval(accuracies: np.ndarray, items: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The interval of a mean accuracy over seeds (two or more), each seed's the share right of
    ``items`` items: Student-t (n - 1 degrees of freedom, scipy.stats.t) on the empirical-logit
    scale, log((k + 1/2) / (items - k + 1/2)) with k = accuracy x items right (the half keeps 0
    and ``items`` right finite), its ends mapped back with the logistic function
    (scipy.special.expit). The spread between seeds sets the width as in the plain t interval,
    but the ends are proportions: strictly inside [0, 1], never below 0 or above 1, and
    asymmetric near the bounds as a proportion's uncertainty is. Equal accuracies give the
    accuracy itself (no spread between seeds)."""
    if items < 1:
        raise ValueError(f"items must be at least 1, got {items}")
    right = np.clip(np.asarray(accuracies, dtype=float) * items, 0, items)
    logits = np.log((right + 0.5) / (items - right + 0.5))
    if np.ptp(logits) == 0:
        value = float(np.mean(accuracies))
        return value, value
    low, high = stats.t.interval(confidence, len(logits) - 1, loc=logits.mean(), scale=stats.sem(logits))
    return float(special.expit(low)), float(special.expit(high))


def two_proportion_power(p1: float, p2: float, n: int, alpha: float = 0.05) -> float:
    """Power of the two-sided two-proportion z-test (pooled variance under the null) with
    ``n`` items per run, when the accuracies are ``p1`` and ``p2``."""
    diff = abs(p2 - p1)
    pooled = (p1 + p2) / 2
    null_sd = math.sqrt(2 * pooled * (1 - pooled) / n)
    alt_sd = math.sqrt((p1 * (1 - p1) + p2 * (1 - p2)) / n)
    if alt_sd == 0:
        return 1.0 if diff > 0 else alpha
    z = stats.norm.isf(alpha / 2)
    return float(stats.norm.cdf((diff - z * null_sd) / alt_sd) + stats.norm.cdf((-diff - z * null_sd) / alt_sd))


def minimum_detectable_difference(test_k: int, accuracy: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest accuracy gain over ``accuracy`` that runs on ``test_k`` test items each
    detect with probability ``power`` (two-sided two-proportion z-test at ``alpha``).

    Independent samples: a paired test on shared items is at least as sensitive when the two
    runs' outcomes are positively correlated, so this is a safe size for a study. NaN when
    no gain up to accuracy 1 reaches the power.
    """
    if test_k < 1:
        raise ValueError(f"test_k must be at least 1, got {test_k}")
    if not 0 <= accuracy < 1:
        raise ValueError(f"accuracy must be in [0, 1), got {accuracy}")
    if two_proportion_power(accuracy, 1.0, test_k, alpha) < power:
        return math.nan
    gap = lambda d: two_proportion_power(accuracy, accuracy + d, test_k, alpha) - power  # noqa: E731
    return float(optimize.brentq(gap, 1e-9, 1.0 - accuracy, xtol=1e-10))
