"""The study report's data: every configuration of a data folder with its seeds, accuracies,
paired verdicts, curves and diagnostics, as one JSON object for the page (no model, records only).

A *configuration* is what ``Results.aggregate`` groups (a run's settings less its seeds). For
each one:

- its runs (seed, final and best test accuracy, finished, the link to the run's episode viewer);
- final and best test accuracy over its finished runs: mean with a 95% interval over seeds
  inside [0, 1] (:func:`icrl.analysis.stats.accuracy_summary`, as ``summary_by_config.csv``);
- the paired verdict against the zero-shot runs of its model and task on the items they share,
  pooled over seeds (McNemar's exact test and a paired bootstrap interval, the numbers
  run_draw_plots.py prints), and the same against each of the paper's methods (naive, naive+,
  explorative, approximate; of several settings of one, the one with the most runs);
- its test-accuracy curve (mean, min and max over seeds per test step) and its diagnostic
  curves (:mod:`icrl.analysis.diagnostics`, the windows of diagnostics.png), averaged over seeds.

Panels group the configurations by model and task, with the zero-shot runs' mean final test
accuracy as the reference line and chance (1 / labels). ``leaderboard``: the benchmark score of
each model that has the ``icrl_bench`` suite's runs (:mod:`icrl.analysis.benchmark`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Optional, SupportsFloat, TypedDict

import numpy as np
import pandas as pd

from ..analysis.benchmark import bench_scores
from ..analysis.paired import pair_runs
from ..analysis.runs import BASELINES, METHODS, model_params
from ..analysis.stats import accuracy_summary, compare_paired, format_p
from ..viewer.data import curves as diagnostic_curves

if TYPE_CHECKING:
    from ..analysis.benchmark import BenchScore
    from ..analysis.results import Results

DIAGNOSTICS = ("accuracy", "reward_rate", "entropy_norm", "frequency_bias", "history_frequency_bias")
ORDER = {m: i for i, m in enumerate(METHODS + ("",) + BASELINES)}
Curves = Callable[[str], dict[str, Any]]  # run id -> its viewer's diagnostic curves ({} without any)


class References(TypedDict):
    """A panel's references among the finished runs (``_references``)."""

    zero: pd.DataFrame                            # the zero-shot runs
    paper: dict[str, tuple[str, pd.DataFrame]]    # paper method -> (config_key, its runs)


def _number(value: Optional[SupportsFloat], digits: int = 4) -> Optional[float]:
    if value is None:
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) or math.isinf(value) else round(value, digits)


def _summary(values: Iterable[float], items: Optional[float]) -> dict[str, Optional[float]]:
    s = accuracy_summary(list(values), items)  # accuracies: an interval inside [0, 1]
    return {"mean": _number(s.mean), "low": _number(s.low), "high": _number(s.high), "n": s.n}


class Outcomes:
    """Each run's per-item outcomes at its last test step, read once: {example id: 1 / 0}."""

    def __init__(self, results: Results) -> None:
        self.by_run: defaultdict[str, dict[str, int]] = defaultdict(dict)
        last = results.predictions(step="last")
        for run_id, example_id, correct in zip(last["run_id"], last["example_id"], last["correct"]):
            self.by_run[run_id][str(example_id)] = int(bool(correct))

    def compare(self, runs_a: pd.DataFrame, runs_b: pd.DataFrame) -> Optional[dict[str, Any]]:
        """A against B on the items each pair of runs on one test set shares, pooled over the pairs
        (``icrl.analysis.paired.pair_runs``: same seeds preferred); None when no run pairs up."""
        a_all, b_all, pairs = [], [], 0
        for dir_a, dir_b in pair_runs(runs_a, runs_b):
            a = self.by_run.get(runs_a.index[runs_a["run_dir"] == dir_a][0], {})
            b = self.by_run.get(runs_b.index[runs_b["run_dir"] == dir_b][0], {})
            shared = [i for i in a if i in b]
            if shared:
                a_all += [a[i] for i in shared]
                b_all += [b[i] for i in shared]
                pairs += 1
        if not pairs:
            return None
        c = compare_paired(np.array(a_all), np.array(b_all))
        return {"a": _number(c.accuracy_a), "b": _number(c.accuracy_b), "n": c.n, "pairs": pairs,
                "diff": _number(c.difference.estimate), "low": _number(c.difference.low),
                "high": _number(c.difference.high), "p": c.mcnemar.pvalue, "p_text": format_p(c.mcnemar.pvalue),
                "outcome": c.outcome}


def _curve(test: pd.DataFrame, run_ids: Iterable[str]) -> dict[str, list[Optional[float]]]:
    """Test accuracy per step: mean, min and max over the runs."""
    mine = test[test["run_id"].isin(list(run_ids))].dropna(subset=["accuracy"])
    if mine.empty:
        return {"step": [], "mean": [], "min": [], "max": []}
    by_step = mine.groupby("step")["accuracy"]
    return {"step": [int(s) for s in by_step.mean().index], "mean": [_number(v) for v in by_step.mean()],
            "min": [_number(v) for v in by_step.min()], "max": [_number(v) for v in by_step.max()]}


def _diagnostics(curves_of: Curves, run_ids: Iterable[str]) -> dict[str, Any]:
    """The diagnostic curves of the runs (the viewer's: diagnostics.png's windows), mean over the
    runs per window; empty for runs without training predictions (zero-shot, supervised ICL)."""
    by_step: defaultdict[int, defaultdict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    window, note = 0, ""
    for run_id in run_ids:
        curve = curves_of(run_id)
        if not curve:
            continue
        if curve["window"] >= window:  # the title says the widest run's windows
            window, note = curve["window"], curve["window_note"]
        for i, step in enumerate(curve["step"]):
            for name in DIAGNOSTICS:
                if curve[name][i] is not None:
                    by_step[step][name].append(curve[name][i])
    if not by_step:
        return {}
    steps = sorted(by_step)
    out: dict[str, Any] = {"step": steps, "window": window, "window_note": note}
    for name in DIAGNOSTICS:
        out[name] = [_number(np.mean(by_step[s][name])) if by_step[s][name] else None for s in steps]
    return out


def report_data(results: Results, viewer_links: Optional[dict[str, str]] = None,
                curves: Optional[dict[str, dict[str, Any]]] = None) -> dict[str, Any]:
    """Everything the report page shows for ``results`` (an icrl.analysis.results.Results);
    ``viewer_links``: run id -> the href of its episode viewer page (relative to the report);
    ``curves``: run id -> its viewer's diagnostic curves, where already computed."""
    runs = results.runs
    viewer_links = viewer_links or {}
    curves = dict(curves or {})

    def curves_of(run_id: str) -> dict[str, Any]:
        if run_id not in curves:
            curves[run_id] = diagnostic_curves(results.state(run_id))
        return curves[run_id]

    data: dict[str, Any] = {"source": str(results.root), "notes": list(results.notes), "configs": [], "panels": [],
                            "leaderboard": [], "counts": {"runs": int(len(runs))}}
    if runs.empty:
        data["counts"].update(configs=0, models=0, tasks=0)
        return data
    test = results.test()
    outcomes = Outcomes(results)
    finished = runs[runs["finished"].astype(bool)]
    groups = sorted(runs.groupby("config_key", sort=False),
                    key=lambda kv: (str(kv[1]["model"].iloc[0]), str(kv[1]["task"].iloc[0]),
                                    ORDER.get(kv[1]["method"].iloc[0], len(ORDER)), str(kv[1]["label"].iloc[0])))
    reference = _references(finished)
    for index, (key, group) in enumerate(groups):
        first = group.iloc[0]
        refs = reference.get((str(first["model"]), str(first["task"])), {"zero": finished.iloc[:0], "paper": {}})
        data["configs"].append(_config(index, key, group, refs, test, outcomes, viewer_links, curves_of))
    for (model, task), configs in _by_panel(data["configs"]).items():
        panel_refs = reference.get((model, task))
        zero = panel_refs["zero"] if panel_refs is not None else None
        zero_acc = zero["final_test_accuracy"].dropna() if zero is not None and len(zero) else pd.Series(dtype=float)
        chance = next((c["chance"] for c in configs if c["chance"] is not None), None)
        data["panels"].append({"model": model, "task": task, "configs": [c["id"] for c in configs],
                               "zero_shot": _number(zero_acc.mean()) if len(zero_acc) else None,
                               "zero_shot_runs": int(len(zero_acc)), "chance": chance})
    scores = [s for s in bench_scores(results) if s.tasks]  # those with a score first, best first
    data["leaderboard"] = [_score_row(s, rank) for rank, s in enumerate(scores, 1)]
    data["counts"].update(configs=len(data["configs"]), models=int(runs["model"].nunique()),
                          tasks=int(runs["task"].nunique()), finished=int(len(finished)))
    return data


def _references(finished: pd.DataFrame) -> dict[tuple[str, str], References]:
    """(model, task) -> its references among the finished runs: the zero-shot runs, and per
    paper method the configuration with the most runs (then the longest)."""
    reference: dict[tuple[str, str], References] = {}
    for (model, task), here in finished.groupby(["model", "task"], sort=False):
        paper: dict[str, tuple[str, pd.DataFrame]] = {}
        for method in METHODS:
            mine = here[here["method"] == method]
            if len(mine):
                sizes = mine.groupby("config_key").agg(n=("run_id", "size"), steps=("total_steps", "max"))
                key = sizes.sort_values(["n", "steps"], ascending=False, kind="stable").index[0]
                paper[method] = (key, mine[mine["config_key"] == key])
        reference[(model, task)] = {"zero": here[here["method"] == "zero-shot"], "paper": paper}
    return reference


def _config(index: int, key: str, group: pd.DataFrame, refs: References, test: pd.DataFrame, outcomes: Outcomes,
            viewer_links: Mapping[str, str], curves_of: Curves) -> dict[str, Any]:
    """One configuration's entry: its runs, curve, diagnostics and verdicts against ``refs``."""
    first = group.iloc[0]
    model, task = str(first["model"]), str(first["task"])
    done = group[group["finished"].astype(bool)]
    config: dict[str, Any] = {
        "id": index, "model": model, "task": task, "method": str(first["method"] or first["strategy"]),
        "label": str(first["label"]), "mode": str(first["mode"]),
        "steps": _number(first["total_steps"], 0), "test_items": _number(first["num_test"], 0),
        "chance": _number(1 / first["num_labels"]) if _number(first["num_labels"]) else None,
        "small_model": bool(model_params(model) < 1e9),  # a fake backend's: no size, no advice
        "finished": int(len(done)), "n": int(len(group)),
        "final": _summary(done["final_test_accuracy"], first["num_test"]),
        "best": _summary(done["best_test_accuracy"], first["num_test"]),
        "runs": [{"run_id": str(r.run_id), "seed": _number(r.seed, 0), "training_seed": _number(r.training_seed, 0),
                  "test_seed": _number(r.test_seed, 0), "final": _number(r.final_test_accuracy),
                  "best": _number(r.best_test_accuracy), "finished": bool(r.finished),
                  "damage": r.damage if isinstance(r.damage, str) else None,
                  "viewer": viewer_links.get(r.run_id)} for r in group.sort_values("seed").itertuples()],
        "curve": _curve(test, done["run_id"] if len(done) else group["run_id"]),
        "diagnostics": _diagnostics(curves_of, group["run_id"]),
        "vs_zero": None, "vs_paper": [],
    }
    if len(done) and first["method"] != "zero-shot" and len(refs["zero"]):
        config["vs_zero"] = outcomes.compare(done, refs["zero"])
    for method, (paper_key, paper_runs) in refs["paper"].items():
        if paper_key == key or not len(done) or first["method"] == "zero-shot":
            continue
        verdict = outcomes.compare(done, paper_runs)
        if verdict is not None:
            config["vs_paper"].append({"method": method, "label": str(paper_runs["label"].iloc[0]), **verdict})
    return config


def _by_panel(configs: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    panels: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for config in configs:
        panels.setdefault((config["model"], config["task"]), []).append(config)
    return panels


def _score_row(score: BenchScore, rank: int) -> dict[str, Any]:
    """One leaderboard row: a model without a score (``no_score``) has no rank and no score, only
    why not, with its gain and gap."""
    scored = not score.no_score
    return {"model": score.model, "rank": rank if scored else None, "no_score": score.no_score,
            "score": _number(score.score) if scored else None, "score_text": score.score_text,
            "gain": _number(score.gain), "gain_low": _number(score.gain_ci[0]),
            "gain_high": _number(score.gain_ci[1]), "gap": _number(score.gap), "gap_low": _number(score.gap_ci[0]),
            "gap_high": _number(score.gap_ci[1]), "stable": score.stable, "missing": score.missing,
            "tasks": [{"task": t.task, "zero": _number(t.accuracy["zero-shot"]), "icl": _number(t.accuracy["ICL"]),
                       "icrl": _number(t.accuracy["explorative"]), "seeds": t.seeds["explorative"], "items": t.items}
                      for t in score.tasks],
            "line": score.line()}
