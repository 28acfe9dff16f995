"""Paired comparisons of runs for ``Results``, the summary CSVs, the figures and the verdict.

Runs on the same test items are compared item by item (``icrl.analysis.stats``: McNemar's
exact test and a paired bootstrap interval of the accuracy difference); across seeds, the
item pairs of each matched pair of runs are pooled. Where no items are shared, callers fall
back to the unpaired Wilson intervals of ``verdict.py``.

    from icrl.analysis.paired import compare_runs
    res = Results("data")
    print(compare_runs(res, "smollm2-135m/.../naive/...", "smollm2-135m/.../none/...").line())
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Optional, Protocol, Sequence

import numpy as np
import pandas as pd

from ..errors import UsageError
from .stats import (PAIRED_TEST, PairedComparison, accuracy_summary, compare_paired, format_p,
                    minimum_detectable_difference, paired_outcomes, seed_summary)

from .verdict import SMALL_MODEL, Worded


class RunTable(Protocol):
    """What ``compare_runs`` reads of its results (``icrl.analysis.results.Results``, which
    imports this module): the table of runs, one row per run id."""

    runs: pd.DataFrame


def compare_runs(results: RunTable, run_a: str, run_b: str, step: int | str = "last") -> PairedComparison:
    """Paired comparison of two runs of ``results`` (run ids, as in ``results.runs.index``)
    on the test items they share, at ``step`` (an int or "last"); a zero-shot run is compared
    at its only test step, whatever ``step`` says."""
    missing = [r for r in (run_a, run_b) if r not in results.runs.index]
    if missing:
        raise UsageError(f"no run {missing[0]!r} in these results; run ids are paths under the data folder, "
                         f"e.g. {results.runs.index[0] if len(results.runs) else 'none found'!r}")
    runs = results.runs
    step_a, step_b = ("last" if runs.loc[r, "mode"] == "zero_shot" else step for r in (run_a, run_b))
    a, b, _ = paired_outcomes(runs.loc[run_a, "run_dir"], runs.loc[run_b, "run_dir"], step_a, step_b)
    return compare_paired(a, b)


def pair_runs(runs_a: pd.DataFrame, runs_b: pd.DataFrame) -> list[tuple[str, str]]:
    """Pairs (run_dir of A, run_dir of B) on the same test set: each run of A with one run of B
    of its ``test_set`` (the same seeds preferred), each B run used once."""
    pairs: list[tuple[str, str]] = []
    used: set[str] = set()
    for _, a in runs_a.iterrows():
        same = runs_b[(runs_b["test_set"] == a["test_set"]) & ~runs_b["run_dir"].isin(used)]
        if same.empty:
            continue
        score = sum((same[c] == a[c]).astype(int) for c in ("test_seed", "seed", "training_seed"))
        b = same.loc[score.sort_values(ascending=False, kind="stable").index[0]]
        used.add(b["run_dir"])
        pairs.append((a["run_dir"], b["run_dir"]))
    return pairs


def pooled_comparison(runs_a: pd.DataFrame, runs_b: pd.DataFrame, step: int | str = "last",
                      step_b: int | str | None = None) -> Optional[tuple[PairedComparison, int]]:
    """(comparison of the pooled item pairs, number of run pairs), or None when no run of A
    shares its test set with a run of B. B's outcomes are at ``step_b`` when given."""
    outcomes_a, outcomes_b = [], []
    pairs = pair_runs(runs_a, runs_b)
    for dir_a, dir_b in pairs:
        a, b, _ = paired_outcomes(dir_a, dir_b, step, step_b)
        outcomes_a.append(a)
        outcomes_b.append(b)
    if not pairs:
        return None
    return compare_paired(np.concatenate(outcomes_a), np.concatenate(outcomes_b)), len(pairs)


@dataclass
class PairedVerdict(Worded):
    """Did a method beat a reference on the same test items? (the paired form of verdict.Verdict)"""

    model: str
    task: str
    method: str
    steps: int
    comparison: PairedComparison   # method (A) against the reference (B)
    pairs: int                     # run pairs pooled (seeds)
    reference_name: str            # e.g. "zero-shot run"
    model_params: float = math.inf

    @property
    def outcome(self) -> str:
        return self.comparison.outcome

    def line(self) -> str:
        c = self.comparison
        seeds = f", {self.pairs} run pairs pooled" if self.pairs > 1 else ""
        text = (f"{self.model} / {self.task}: {self.headline}: final test accuracy after {self.steps} steps "
                f"{c.accuracy_a:.3f} vs {self.reference_name} {c.accuracy_b:.3f} on the same {c.n} test items{seeds}: "
                f"difference {c.difference.text(signed=True)} (paired bootstrap 95%), {PAIRED_TEST} "
                f"{format_p(c.mcnemar.pvalue)} ({_items(c.mcnemar.only_a)} only {self.method} got right, "
                f"{c.mcnemar.only_b} only the reference; a difference counts when p < {c.alpha:g})")
        return text + (f"; {self.advice}" if self.advice else "")

    def short(self) -> str:
        c = self.comparison
        verdict = {"above": "beat zero-shot", "below": "below zero-shot",
                   "same": "did not beat zero-shot"}[self.outcome]
        return (f"{self.method} {c.accuracy_a:.3f} vs {c.accuracy_b:.3f}, "
                f"diff {c.difference.text(signed=True)}, {format_p(c.mcnemar.pvalue)}: {verdict}")


def _items(n: int) -> str:
    return f"{n} item" if n == 1 else f"{n} items"


def paired_panel_note(verdicts: Sequence[Worded]) -> str:
    """The line under ``PairedVerdict.short`` lines: which test, and the small-model advice."""
    note = f"final test accuracy vs zero-shot on the same items: {PAIRED_TEST} test, paired bootstrap 95% interval"
    if any(v.outcome != "above" and v.model_params < SMALL_MODEL for v in verdicts):
        note += "; the effect needs a larger model"
    return note


def paired_verdict(model: str, task: str, method: str, runs: pd.DataFrame, reference_runs: pd.DataFrame,
                   reference_name: str = "zero-shot run", model_params: float = math.inf,
                   reference_step: int | str = "last") -> Optional[PairedVerdict]:
    """The paired verdict of ``runs`` (finished runs of one method) at their last test step
    against ``reference_runs`` at ``reference_step`` ("last" for zero-shot runs; 0 for the
    paper's zero-shot point, naive ICRL before any episode); None when they share no test
    set (use the Wilson verdict then)."""
    pooled = pooled_comparison(runs, reference_runs, "last", reference_step)
    if pooled is None:
        return None
    comparison, pairs = pooled
    return PairedVerdict(model, task, method, int(runs["total_steps"].max()), comparison, pairs, reference_name,
                         model_params)


def seed_columns(metric: str, values: Iterable[float], items: Optional[float] = None) -> dict[str, float]:
    """``<metric>_mean``, ``_ci_low``, ``_ci_high`` (95% over seeds) and ``_n`` for one
    configuration's values of ``metric`` (a row of ``Results.aggregate``). An accuracy (a metric
    named ``*accuracy``) over ``items`` test items has ``stats.accuracy_summary``'s interval,
    inside [0, 1]; any other metric the Student-t interval."""
    s = accuracy_summary(list(values), items) if metric.endswith("accuracy") else seed_summary(list(values))
    return {f"{metric}_mean": s.mean, f"{metric}_ci_low": s.low, f"{metric}_ci_high": s.high, f"{metric}_n": s.n}


def detectable_difference(accuracy: Optional[float], test_k: Optional[float]) -> float:
    """The smallest gain over ``accuracy`` that another run on ``test_k`` items detects with
    80% power at the 5% level (NaN when unknown): how fine a comparison a configuration allows."""
    if accuracy is None or test_k is None:
        return math.nan
    try:
        accuracy, test_k = float(accuracy), int(test_k)
    except (TypeError, ValueError):
        return math.nan
    if math.isnan(accuracy) or test_k < 1 or not 0 <= accuracy < 1:
        return math.nan
    return minimum_detectable_difference(test_k, accuracy)
