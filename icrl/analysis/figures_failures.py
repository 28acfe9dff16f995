"""failures: how the ICRL runs fail (icrl.analysis.failures), per model and task.

A panel per model and task; per configuration (mean over its seeds) four bars: the share of
labels never predicted in training (greediness), the history frequency bias, the
knowing-doing gap (runs with --reasoning only) and the share of seeds whose reward collapses
early. The configurations are the runs' labels, as in the other figures.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Union

import numpy as np
import pandas as pd

from .figures_base import Context, _figure, _legend_below, _short_model

if TYPE_CHECKING:
    from matplotlib.figure import Figure

BARS = (("greediness", "labels never predicted", "#882255"),
        ("history_frequency_bias", "history frequency bias", "#44AA99"),
        ("knowing_doing_gap", "knowing-doing gap (reasoning)", "#DDCC77"),
        ("early_collapse", "seeds collapsing early", "#332288"))


def failure_rows(ctx: Context) -> pd.DataFrame:
    """One row per ICRL configuration: model, task, label, n and the mean failure metrics."""
    runs = ctx.runs
    if runs.empty:
        return pd.DataFrame()
    runs = runs[runs["mode"] == "icrl"]
    if "learner" in runs.columns:
        runs = runs[runs["learner"].isna()]
    if runs.empty:
        return pd.DataFrame()
    failures = ctx.results.failures().loc[runs["run_id"]].set_index(runs.index)
    frame = pd.concat([runs[["model", "task", "label", "config_key"]], failures], axis=1)
    rows = []
    for (model, task, _), group in frame.groupby(["model", "task", "config_key"], sort=True):
        row = {"model": model, "task": task, "label": group["label"].iloc[0], "n": len(group)}
        for metric, _, _ in BARS:
            row[metric] = pd.to_numeric(group[metric], errors="coerce").mean()
        rows.append(row)
    return pd.DataFrame(rows)


def fig_failures(ctx: Context) -> Union[Figure, str]:
    rows = failure_rows(ctx)
    if rows.empty:
        return "no ICRL run of a model"
    panels = list(rows.groupby(["model", "task"], sort=True))
    widest = max(len(group) for _, group in panels)
    fig, axes = _figure(1, len(panels), panel_w=max(2.7, 0.75 * widest + 1.0), panel_h=2.9)
    for c, ((model, task), group) in enumerate(panels):
        ax = axes[0][c]
        x = np.arange(len(group))
        width = 0.8 / len(BARS)
        for j, (metric, name, color) in enumerate(BARS):
            values = group[metric].to_numpy(dtype=float)
            ax.bar(x + (j - (len(BARS) - 1) / 2) * width, np.nan_to_num(values, nan=0.0), width, color=color,
                   label=name)
            for xi, v in zip(x, values):
                if np.isnan(v):  # not measured (no reasoning recorded): say so rather than draw a 0
                    ax.text(xi + (j - (len(BARS) - 1) / 2) * width, 0.01, "–", ha="center", fontsize=6)
        ax.set_xticks(x, [f"{label} (n={n})" for label, n in zip(group["label"], group["n"])], rotation=35,
                      ha="right", fontsize=6.5)
        ax.set_ylim(0, 1.02)
        ax.set_title(f"{_short_model(model)} / {task}", fontsize=8)
        if c == 0:
            ax.set_ylabel("share")
    _legend_below(fig, axes)
    return fig
