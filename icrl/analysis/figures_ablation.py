"""The ablation figures: runs that differ in exactly one argument (seeds aside) side by side."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Union

import numpy as np
import pandas as pd

from .figures_base import (MAX_PANELS, VALUE_MARKERS, Context, _baseline, _chance, _figure, _hide_unused,
                           _legend_below, _mean_curve, _plot_curve, _short_model)
from ..method.strategies import FILTER_NAMES, STRATEGIES
from .runs import CONFIG_COLUMNS, METHODS, model_size

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@dataclass
class Ablation:
    name: str
    title: str            # legend title (mathtext allowed)
    column: str           # the ablated column of Results.runs
    what: str             # for the skip note
    keep: Callable[[pd.DataFrame], pd.Series] = lambda runs: runs["mode"] == "icrl"
    fmt: Callable[[Any], str] = lambda v: str(v)  # a value of the column -> its legend entry
    order: Callable[[Any], Any] = lambda v: v      # a value -> its sort key


def _fmt_num(v: object) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "none"
    return f"{v:g}" if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) else str(v)


# The random family's strategies (the paper's context ablation), by the titles they declare.
STRATEGY_NAMES = {entry.base: entry.cls.title or entry.base for entry in STRATEGIES if entry.family == "random"}

ABLATIONS = [
    Ablation("ablation_p_keep", r"$p_\mathrm{keep}$", "p_keep", "context_p_keep", fmt=_fmt_num),
    Ablation("ablation_context_strategy", "context", "strategy_base", "context strategy (start/end/unbiased)",
             keep=lambda r: (r["mode"] == "icrl") & r["strategy_base"].isin(list(STRATEGY_NAMES)),
             fmt=lambda v: STRATEGY_NAMES.get(v, v), order=lambda v: list(STRATEGY_NAMES).index(v)),
    Ablation("ablation_reward_filter", "episodes kept", "strategy_filter", "reward filter (_only_positive ...)",
             fmt=lambda v: FILTER_NAMES.get(v, v), order=lambda v: list(FILTER_NAMES).index(v)),
    Ablation("ablation_context_length", "max. episodes", "max_context_examples", "max_context_examples",
             fmt=_fmt_num),
    Ablation("ablation_omit_feedback", "feedback", "omit_feedback", "icrl_omit_feedback",
             fmt=lambda v: "omitted" if v else "shown"),
    Ablation("ablation_flip_feedback", "flipped w.p.", "flip", "icrl_flip_feedback(_prob)", fmt=_fmt_num),
    Ablation("ablation_beam_size", "contexts $K$", "max_contexts", "max_contexts (approximate)",
             keep=lambda r: (r["mode"] == "icrl") & (r["family"] == "approximate"), fmt=_fmt_num),
    Ablation("ablation_sampling_method", "context sampling", "sampling_method",
             "approximate_context_sampling_method",
             keep=lambda r: (r["mode"] == "icrl") & (r["family"] == "approximate")),
    Ablation("ablation_semantic_labels", "labels", "unsemantic", "semantic vs. _unsemantic labels",
             fmt=lambda v: "abstract" if v else "semantic", order=lambda v: bool(v)),
    Ablation("ablation_temperature", "temperature", "temperature", "temperature", fmt=_fmt_num),
    Ablation("ablation_model_scale", "model", "model", "model_name",
             fmt=_short_model, order=lambda v: (model_size(v), v)),
]


def _ablation_groups(runs: pd.DataFrame, column: str) -> list[tuple[str, pd.DataFrame]]:
    """Groups of runs equal in every configuration column but ``column`` (seeds aside) that
    hold at least two values of it."""
    others = [c for c in CONFIG_COLUMNS if c != column]
    if column == "model":
        others = [c for c in others if c != "model"]
    key = runs[others].astype(object).where(runs[others].notna(), "∅").astype(str).agg("|".join, axis=1) \
        if len(runs) else pd.Series(dtype=str)
    out = []
    for k, group in runs.groupby(key, sort=True):
        if group[column].astype(object).where(group[column].notna(), "∅").nunique() >= 2:
            out.append((k, group))
    first = lambda kv: kv[1].iloc[0]  # noqa: E731
    return sorted(out, key=lambda kv: (model_size(first(kv)["model"]), first(kv)["model"], first(kv)["task"], kv[0]))


def _describe(group: pd.DataFrame, column: str) -> str:
    """The settings an ablation panel holds fixed, in a few words."""
    row = group.iloc[0]
    parts = []
    if column not in ("strategy_base", "strategy_filter"):
        same_method = group["method"].nunique() == 1 and row["method"] in METHODS
        parts.append(row["method"] if same_method else row["strategy"])
    elif column == "strategy_base":
        parts.append(f"{FILTER_NAMES[row['strategy_filter']]}")
    else:
        parts.append(row["strategy_base"])
    one_published = group["method"].nunique() == 1 and row["method"] in ("naive", "naive+", "explorative")
    if column != "p_keep" and not one_published:
        parts.append(f"$p_\\mathrm{{keep}}$={_fmt_num(row['p_keep'])}")
    if row["family"] == "approximate":
        if column != "max_contexts":
            parts.append(f"K={_fmt_num(row['max_contexts'])}")
        if column != "sampling_method":
            parts.append(f"{row['sampling_method']} sampling")
    if column != "max_context_examples":
        parts.append(f"m={_fmt_num(row['max_context_examples'])}")
    text = ", ".join(parts)
    if len(text) > 44 and len(parts) > 1:  # the strategy on one line, the numbers on the next
        text = parts[0] + "\n" + ", ".join(parts[1:])
    return text


def fig_ablation(ctx: Context, ab: Ablation) -> Union[Figure, str]:
    runs = ctx.runs
    if len(runs) and "learner" in runs:  # a learner (icrl.method.agents) has none of the ablated settings
        runs = runs[runs["learner"].isna()]
    runs = runs[ab.keep(runs)] if len(runs) else runs
    groups = _ablation_groups(runs, ab.column) if len(runs) else []
    if not groups:
        return f"no ICRL runs that differ only in {ab.what}"
    if len(groups) > MAX_PANELS:
        ctx.notes.append(f"{ab.name}: {len(groups)} groups of runs; drawing the first {MAX_PANELS}")
        groups = groups[:MAX_PANELS]
    test = ctx.results.test()
    from matplotlib import colormaps

    # one colour and marker per value of the argument, the same in every panel
    values = sorted({v for _, group in groups for v in group[ab.column].unique()}, key=ab.order)
    numeric = all(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) for v in values)
    if numeric and len(values) > 2:
        palette = [colormaps["viridis"](x) for x in np.linspace(0.0, 0.85, len(values))]
    else:
        palette = [colormaps["tab10"](j % 10) for j in range(len(values))]
    style = {v: (palette[j], VALUE_MARKERS[j % len(VALUE_MARKERS)], j) for j, v in enumerate(values)}
    ncols = min(len(groups), 3)
    nrows = math.ceil(len(groups) / ncols)
    fig, axes = _figure(nrows, ncols, panel_w=2.9, panel_h=2.35)
    for i, (_, group) in enumerate(groups):
        ax = np.ravel(axes)[i]
        for value in sorted(group[ab.column].unique(), key=ab.order):
            color, marker, j = style[value]
            members = group[group[ab.column] == value]
            _plot_curve(ax, _mean_curve(test, members["run_id"], "accuracy"), color, ab.fmt(value),
                        marker=marker, layer=j)
        row = group.iloc[0]
        task = row["task_base"] if ab.column == "unsemantic" else row["task"]
        head = task if ab.column == "model" else f"{_short_model(row['model'])} · {task}"
        ax.set_title(f"{head}\n{_describe(group, ab.column)}", fontsize=7.5)
        if ab.column not in ("model", "unsemantic"):  # one model and task: its zero-shot run and chance
            runs = ctx.runs
            zero = runs[(runs["method"] == "zero-shot") & (runs["model"] == row["model"]) &
                        (runs["task"] == row["task"]) & (runs["test_set"] == row["test_set"])]
            zero = zero["final_test_accuracy"].dropna()
            _baseline(ax, zero.mean() if len(zero) else None, "zero-shot run")
            _chance(ax, group)
        ax.set_ylim(-0.02, 1.02)
        if i >= len(groups) - ncols:
            ax.set_xlabel("Step")
        if i % ncols == 0:
            ax.set_ylabel("Test accuracy")
    _hide_unused(axes, len(groups))
    _legend_below(fig, axes, title=ab.title)
    return fig

