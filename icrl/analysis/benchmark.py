"""The benchmark score of a model: one number for how much it learns from rewards in context.

The ``icrl_bench`` preset (icrl/cli/presets.py, docs/tools.md "The benchmark score") runs, per
model, a fixed suite: every task of ``BENCH_TASKS`` with zero-shot, supervised ICL (gold labels
in context: the paper's upper bound) and explorative ICRL (the paper's best method), on the
same test items, for each seed. Per task the three final test accuracies (mean over seeds) give

    gain = explorative ICRL - zero-shot      (what learning from rewards adds)
    gap  = supervised ICL - zero-shot        (what gold labels add: the room there is)

and the score is the mean gain over the tasks divided by their mean gap: 0 is no better than
zero-shot, 1 closes the whole supervised-ICL gap, above 1 beats supervised ICL. A ratio of means,
not a mean of ratios, so a task where gold labels add almost nothing does not blow it up. Its
95% interval is a percentile bootstrap over seeds and items: each replicate resamples, per
task, the test items (the same draw for the three methods, which answered the same items) and
each method's seeds. Where the gap's own interval reaches 0, supervised ICL does not beat
zero-shot beyond noise and the ratio can take any value: there is no score then (``stable`` is
False; ``no_score`` says why, and the line and the leaderboard show the gain and gap instead),
and such a model sorts after every model with a score.

    from icrl.analysis.results import Results
    from icrl.analysis.benchmark import bench_scores
    for score in bench_scores(Results("data")):
        print(score.line())
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence, TypedDict, Union

import numpy as np

if TYPE_CHECKING:  # frames arrive from icrl.analysis.results; run_sweep.py reads the suite below without pandas
    import pandas as pd

if TYPE_CHECKING:
    from .results import Results

# The suite (the icrl_bench preset runs it): its tasks and seeds.
BENCH_TASKS = ("banking77", "clinic150", "trec_coarse", "trec_fine")  # nlu: its raw file is often unavailable
BENCH_SEEDS = (100, 101, 102)
ROLES = ("zero-shot", "ICL", "explorative")  # method names in Results.runs["method"]
REPLICATES = 2000
CONFIDENCE = 0.95
SEED = 0


@dataclass(frozen=True)
class TaskResult:
    """One task's part of a score: mean final test accuracy per role, seeds and items."""

    task: str
    accuracy: dict[str, float]  # role -> mean over seeds
    seeds: dict[str, int]       # role -> number of runs
    items: int

    @property
    def gain(self) -> float:
        return self.accuracy["explorative"] - self.accuracy["zero-shot"]

    @property
    def gap(self) -> float:
        return self.accuracy["ICL"] - self.accuracy["zero-shot"]


@dataclass(frozen=True)
class BenchScore:
    model: str
    tasks: list[TaskResult]          # per task of the suite that has all three roles
    missing: list[str]               # "task: role" the suite needs and the data lacks
    score: float
    score_ci: tuple[float, float]
    gain: float
    gain_ci: tuple[float, float]
    gap: float
    gap_ci: tuple[float, float]
    notes: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.missing

    @property
    def stable(self) -> bool:
        """The supervised-ICL gap is above 0 beyond noise (its interval excludes 0)."""
        return self.gap_ci[0] > 0

    @property
    def no_score(self) -> str:
        """Why there is no score ("" when there is one): the headline is a number only where the
        supervised-ICL gap's interval is above 0 (a replicate's gap near 0 makes its ratio any
        number, so neither the ratio nor its percentiles mean anything)."""
        if not self.tasks:
            return f"no score: missing {', '.join(self.missing)}"
        if not self.stable:
            return "no score: supervised ICL does not beat zero-shot beyond noise (the gap's interval reaches 0)"
        return ""

    @property
    def score_text(self) -> str:
        """The score and its interval as printed ("0.57 [0.31, 0.80]"), or why there is none."""
        return self.no_score or f"{self.score:.2f} [{self.score_ci[0]:.2f}, {self.score_ci[1]:.2f}]"

    def line(self) -> str:
        """The headline: score, interval, and what it rests on; without a score, why not and the
        gain and gap it would rest on."""
        if not self.tasks:
            return f"{self.model}: no benchmark score (missing {', '.join(self.missing)})"
        seeds = sorted({n for t in self.tasks for n in t.seeds.values()})
        parts = (f"ICRL gain over zero-shot {_signed(self.gain, self.gain_ci)} / supervised-ICL gap "
                 f"{_signed(self.gap, self.gap_ci)}, mean over {len(self.tasks)} tasks "
                 f"({', '.join(t.task for t in self.tasks)}), {'-'.join(map(str, seeds))} seeds each")
        if self.stable:
            text = (f"{self.model}: ICRL benchmark score {self.score_text} (95% bootstrap over seeds and items) "
                    f"= {parts}")
        else:
            text = (f"{self.model}: no ICRL benchmark score: supervised ICL does not beat zero-shot beyond noise "
                    f"here, so the ratio can take any value; read the gain: {parts}")
        if self.missing:
            text += f"; incomplete suite, missing {', '.join(self.missing)}"
        return text


def _signed(value: float, ci: tuple[float, float]) -> str:
    return f"{value:+.3f} [{ci[0]:+.3f}, {ci[1]:+.3f}]"


def outcome_matrix(predictions: pd.DataFrame, run_ids: Sequence[str]) -> np.ndarray:
    """Runs x items of 1 right / 0 wrong at each run's last test step (rows in ``run_ids`` order);
    ``predictions`` is ``Results.predictions(step="last")``."""
    rows = []
    for run_id in run_ids:
        mine = predictions[predictions["run_id"] == run_id].sort_values("index")
        rows.append(mine["correct"].to_numpy(dtype=float))
    return np.vstack(rows)


class Bootstrapped(TypedDict):
    """``bootstrap``'s point values and 95% intervals."""

    gain: float
    gap: float
    score: float
    gain_ci: tuple[float, float]
    gap_ci: tuple[float, float]
    score_ci: tuple[float, float]


def bootstrap(tasks: Sequence[dict[str, np.ndarray]], replicates: int = REPLICATES, seed: int = SEED) -> Bootstrapped:
    """Point values and percentile intervals of gain, gap and score.

    ``tasks``: per task, role -> a runs x items matrix of outcomes on the same items. Each replicate
    draws the items once per task (shared by the roles) and each role's runs, with replacement.
    """
    rng = np.random.default_rng(seed)
    gains, gaps = np.zeros(replicates), np.zeros(replicates)
    point_gain, point_gap = [], []
    for matrices in tasks:
        n = next(iter(matrices.values())).shape[1]
        # item weights: how often each item is drawn, per replicate (replicates x items)
        weights = rng.multinomial(n, np.full(n, 1 / n), size=replicates) / n
        accuracy = {}
        for role, m in matrices.items():
            per_run = weights @ m.T                       # replicates x runs: each run's accuracy on the draw
            draw = rng.multinomial(len(m), np.full(len(m), 1 / len(m)), size=replicates) / len(m)
            accuracy[role] = (per_run * draw).sum(axis=1)  # the drawn runs' mean
        gains += accuracy["explorative"] - accuracy["zero-shot"]
        gaps += accuracy["ICL"] - accuracy["zero-shot"]
        means = {role: float(m.mean()) for role, m in matrices.items()}
        point_gain.append(means["explorative"] - means["zero-shot"])
        point_gap.append(means["ICL"] - means["zero-shot"])
    gains, gaps = gains / len(tasks), gaps / len(tasks)
    with np.errstate(divide="ignore", invalid="ignore"):
        scores = np.where(gaps != 0, gains / np.where(gaps != 0, gaps, 1), np.nan)  # a zero gap: no ratio
    tail = (1 - CONFIDENCE) / 2 * 100

    def interval(x: np.ndarray) -> tuple[float, float]:
        low, high = np.nanpercentile(x, [tail, 100 - tail])
        return float(low), float(high)

    gain, gap = float(np.mean(point_gain)), float(np.mean(point_gap))
    return {"gain": gain, "gap": gap, "score": gain / gap if gap != 0 else math.nan,
            "gain_ci": interval(gains), "gap_ci": interval(gaps), "score_ci": interval(scores)}


def _chosen(runs: pd.DataFrame) -> pd.DataFrame:
    """Of several configurations of one role, the one with the most finished runs, then the longest."""
    if runs["config_key"].nunique() == 1:
        return runs
    sizes = runs.groupby("config_key").agg(n=("run_id", "size"), steps=("total_steps", "max"))
    key = sizes.sort_values(["n", "steps"], ascending=False, kind="stable").index[0]
    return runs[runs["config_key"] == key]


def bench_scores(results: Results, tasks: Sequence[str] = BENCH_TASKS, replicates: int = REPLICATES,
                 seed: int = SEED, run_dirs: Optional[Sequence[Union[str, Path]]] = None) -> list[BenchScore]:
    """The score of every model under ``results`` (only its runs in ``run_dirs`` when given) that
    has, for at least one task of ``tasks``, finished zero-shot, supervised ICL and explorative
    ICRL runs on one shared test set."""
    runs = results.runs
    if runs.empty:
        return []
    if run_dirs is not None:
        wanted = {str(Path(d).resolve()) for d in run_dirs}
        runs = runs[[str(Path(d).resolve()) in wanted for d in runs["run_dir"]]]
    runs = runs[runs["finished"].astype(bool) & runs["method"].isin(ROLES) & runs["task"].isin(tasks)]
    if runs.empty:
        return []
    predictions = results.predictions(step="last")
    predictions = predictions[predictions["run_id"].isin(runs["run_id"])]
    scores = []
    for model, mine in runs.groupby("model", sort=True):
        parts: list[TaskResult] = []
        matrices: list[dict[str, np.ndarray]] = []
        missing: list[str] = []
        notes: list[str] = []
        for task in tasks:
            here = mine[mine["task"] == task]
            shared = _shared_test_set(here)
            if shared is None:
                missing += [f"{task}: {role}" for role in ROLES if not (here["method"] == role).any()] or \
                           [f"{task}: one test set shared by {', '.join(ROLES)}"]
                continue
            here = here[here["test_set"] == shared]
            by_role = {role: _chosen(here[here["method"] == role]) for role in ROLES}
            task_matrices = {role: outcome_matrix(predictions, list(r["run_id"])) for role, r in by_role.items()}
            parts.append(TaskResult(task, {role: float(m.mean()) for role, m in task_matrices.items()},
                                    {role: len(m) for role, m in task_matrices.items()},
                                    next(iter(task_matrices.values())).shape[1]))
            matrices.append(task_matrices)
        if not matrices:
            scores.append(BenchScore(model, [], missing, math.nan, (math.nan, math.nan), math.nan,
                                     (math.nan, math.nan), math.nan, (math.nan, math.nan), notes))
            continue
        b = bootstrap(matrices, replicates, seed)
        scores.append(BenchScore(model, parts, missing, b["score"], b["score_ci"], b["gain"], b["gain_ci"],
                                 b["gap"], b["gap_ci"], notes))
    return ranked(scores)


def ranked(scores: Sequence[BenchScore]) -> list[BenchScore]:
    """Models with a score best first, then those without one (no task, or a gap within noise),
    whatever their ratio, by name."""
    return sorted(scores, key=lambda s: (bool(s.no_score), -s.score if not s.no_score else 0.0, s.model))


def _shared_test_set(runs: pd.DataFrame) -> Optional[str]:
    """The test set every role has a run on (the one with the most runs), or None."""
    sets = [set(runs.loc[runs["method"] == role, "test_set"]) for role in ROLES]
    common = set.intersection(*sets) if all(sets) else set()
    if not common:
        return None
    counts = runs[runs["test_set"].isin(common)]["test_set"].value_counts()
    return counts.index[0]
