"""beyond_paper: every run the paper's figures leave out, against zero-shot and the paper's methods.

main_results keeps the published figures' selection. This figure draws the rest: strategies
beyond the paper (retrieval, ...), runs with our exploration flags or rewards, the paper's
methods at other settings, and the learners that are not LLMs. A panel per model and task,
on one test set (the one most of these runs share; a note names the others): a test-accuracy
curve per configuration (mean over seeds, band min-max), with the zero-shot run, the paper's
zero-shot point (naive ICRL at step 0), supervised ICL and chance as lines, and the paper's
methods present on the same test set as thin curves. Under each panel, and printed by
run_draw_plots.py, a verdict per configuration: its final test accuracy against the zero-shot
run on the same test items (paired: McNemar and a paired bootstrap interval), else against the
paper's zero-shot point.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Union

import pandas as pd

from .figures_base import COLORS, MARKERS, METHOD_NOTES, Context, _baseline, _chance, _figure, _grid, _legend_below, \
    _mean_curve, _plot_curve, _short_model, _usual_context_length
from .figures_methods import _main_runs, _pick_config, _pooled, _reference_runs, _verdicts, _zero_shot_reference
from .runs import METHODS

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

# colours of the configurations beyond the paper (the paper's methods and the learners keep theirs)
PALETTE = ["#882255", "#44AA99", "#999933", "#AA4499", "#332288", "#117733", "#DDCC77", "#661100", "#6699CC",
           "#888888"]
SHAPES = ["D", "P", "X", "h", "<", ">", "*", "p", "d", "8"]
LEARNERS = "learners (no model)"


def beyond_runs(ctx: Context) -> pd.DataFrame:
    """The runs main_results does not draw by default: ICRL runs of no paper method at the
    published settings (other strategies, our flags and rewards, the paper's methods at other
    settings) and the learners; zero-shot and ICL runs are baselines, not among them."""
    runs = ctx.runs
    if runs.empty:
        return runs
    published = runs["method"].isin(METHODS) & (runs["method"] == runs["paper_method"])
    baseline = runs["mode"].isin(["zero_shot", "icl"])
    learner = runs["learner"].notna() if "learner" in runs.columns else False
    return runs[(~published & ~baseline) | learner]


def fig_beyond_paper(ctx: Context) -> Union[Figure, str]:
    beyond = beyond_runs(ctx)
    if beyond.empty:
        return "no run beyond the paper's figures (other strategies, exploration flags, rewards, settings, learners)"
    llm = beyond[beyond["learner"].isna()] if "learner" in beyond.columns else beyond
    models = _grid(llm)[0] if len(llm) else [LEARNERS]
    tasks = sorted(beyond["task"].unique())
    fig, axes = _figure(len(models), len(tasks))
    for r, model in enumerate(models):
        for c, task in enumerate(tasks):
            ax = axes[r][c]
            here = ctx.runs[(ctx.runs["task"] == task) & ((ctx.runs["model"] == model) | (model == LEARNERS))]
            mine = beyond[(beyond["task"] == task) & ((beyond["model"] == model) | beyond["learner"].notna())]
            description = _panel(ctx, ax, model, task, here, mine)
            if r == 0:
                ax.set_title(f"{task}\n{description}" if description else task)
            elif description:
                ax.set_title(description, fontsize=7.5)
            caption = ctx.captions.get(id(ax))
            ax.set_xlabel(f"Step\n{caption}" if caption else "Step", fontsize=6.5 if caption else None,
                          linespacing=1.4)
            if c == 0:
                ax.set_ylabel(f"{_short_model(model)}\nTest accuracy")
    lines = [max((ctx.captions.get(id(ax), "").count("\n") + 1 if id(ax) in ctx.captions else 0) for ax in row)
             for row in axes]
    if any(lines):
        width, height = fig.get_size_inches()
        fig.set_size_inches(width, height + 0.13 * sum(lines))
    _legend_below(fig, axes)
    return fig


def _panel(ctx: Context, ax: Axes, model: str, task: str, here: pd.DataFrame, mine: pd.DataFrame) -> str:
    """Draw one panel; returns its description (steps and test items)."""
    if mine.empty:
        ax.set_visible(False)
        return ""
    counts = mine["test_set"].value_counts()
    test_set = counts.index[0]
    left_out = mine[mine["test_set"] != test_set]
    if len(left_out):
        note = (f"beyond_paper: {_short_model(model)} / {task}: drawn on test set {test_set}; left out "
                f"{len(left_out)} run(s) on other test sets ({', '.join(sorted(set(left_out['label'])))}); "
                f"--filter test_k=... to choose")
        ctx.note(note)
    mine = mine[mine["test_set"] == test_set]
    here = here[here["test_set"] == test_set]
    test = ctx.results.test()
    drawn: dict[str, pd.DataFrame] = {}
    learners: dict[str, pd.DataFrame] = {}
    for i, (_, group) in enumerate(mine.groupby("config_key", sort=True)):
        first = group.iloc[0]
        learner = first["learner"] if "learner" in first and pd.notna(first["learner"]) else None
        label = first["model"] if learner else str(first["label"])
        color = COLORS.get(learner, PALETTE[i % len(PALETTE)]) if learner else PALETTE[i % len(PALETTE)]
        marker = MARKERS.get(learner, SHAPES[i % len(SHAPES)]) if learner else SHAPES[i % len(SHAPES)]
        _plot_curve(ax, _mean_curve(test, group["run_id"], "accuracy"), color, label, marker=marker, layer=min(i, 4))
        (learners if learner else drawn)[label] = group
    paper = _main_runs(ctx)
    paper = paper[paper.index.isin(here.index) & paper["method"].isin(METHODS)
                  & (paper["method"] == paper["paper_method"])]
    m_ref = _usual_context_length(paper) if len(paper) else None
    for j, method in enumerate(METHODS):
        chosen = paper[paper["method"] == method]
        if len(chosen):
            chosen, _ = _pick_config(chosen, m_ref)
            _plot_curve(ax, _mean_curve(test, chosen["run_id"], "accuracy"), COLORS[method], METHOD_NOTES[method],
                        marker=MARKERS[method], layer=j)
    zero = here[here["method"] == "zero-shot"]
    zero_acc = zero["final_test_accuracy"].dropna()
    _baseline(ax, zero_acc.mean() if len(zero_acc) else None, "zero-shot run")
    zero_ref = _zero_shot_reference(ctx, here, m_ref)
    _baseline(ax, zero_ref[0] if zero_ref else None, "zero-shot")
    icl = here[here["method"] == "ICL"]
    if len(icl):
        _baseline(ax, icl["final_test_accuracy"].dropna().mean(), "ICL")
    reference = (_pooled(zero), "zero-shot run") if len(zero_acc) else (zero_ref, "naive ICRL at step 0")
    _verdicts(ctx, ax, model, task, drawn, *reference, *_reference_runs(here, zero, len(zero_acc) > 0, m_ref),
              learners=learners)
    _chance(ax, here if len(here) else mine)
    ax.set_ylim(-0.02, 1.02)
    steps = mine["total_steps"].dropna()
    items = mine["num_test"].dropna()
    return ", ".join(part for part in (f"{int(steps.max())} steps" if len(steps) else "",
                                       f"{int(items.iloc[0])} test items" if len(items) else "") if part)
