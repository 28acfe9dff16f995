"""Figures and a summary table from the records of many runs (run_draw_plots.py); no model.

Every run under ``--data_dir`` is read through :class:`icrl.results.Results`. Figures are
written as PNG and PDF (matplotlib, Agg, mathtext only: no LaTeX needed) to ``--out_dir``
with ``summary.csv`` (one row per run). A figure is drawn when the runs it needs exist and
skipped with a one-line note otherwise.

- ``main_results``: test accuracy vs. step, a column per task and a row per model, a line per
  method (naive, naive+, explorative, approximate; see :func:`icrl.results.method_of`), with
  zero-shot and supervised ICL (the upper bound) as dashed lines of the same model and task.
  As in the paper, the zero-shot line is the step-0 test of the naive ICRL run (ICRL system
  prompt, empty context); a separate zero-shot run (``--max_context_examples 0``, standard
  system prompt) is drawn as a line of its own, labelled "zero-shot (separate run)".
- ``regret``: cumulative wrong training predictions vs. step, same grid.
- ``train_accuracy``: training accuracy, mean of the last ``--smooth`` steps (curves start
  at step ``smooth - 1``, where the first full window ends), same grid, no test-set lines.
- ``ablation_*``: runs that differ in exactly one argument (seeds aside) side by side: a panel
  per group of otherwise equal runs, a line per value of the argument.

Several seeds of one configuration are averaged; the shaded band spans their minimum and
maximum (the legend says so). A panel never mixes runs of different lengths or test sets:
of the ICRL runs of a model and task it keeps those of one length and test set (the one
covering the most methods, then the longest), and the baselines on that test set; the panel
title says which, and a console note names what was left out (``--filter`` to choose).
Accuracy panels draw chance (1 / number of labels, dotted); ``main_results`` also states,
per method, whether its final test accuracy beat zero-shot (Wilson 95% intervals that do
not overlap, see :mod:`icrl.verdict`), and run_draw_plots.py prints the same verdicts.
``summary_by_config.csv`` is :meth:`icrl.results.Results.aggregate` (mean, std, n over seeds).
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np
import pandas as pd

from .diskfull import atomic_output
from .errors import ArgumentParser, UsageError
from .results import CONFIG_COLUMNS, DEFAULT_EXPLORATIVE_P_KEEP, METHODS, Results, model_size
from .verdict import Verdict, panel_note

COLORS = {  # Okabe-Ito, colour-blind safe; one colour per method in every figure
    "naive": "#E69F00", "naive+": "#56B4E9", "explorative": "#009E73", "approximate": "#D55E00",
    "zero-shot": "#555555", "ICL": "#000000", "zero-shot run": "#999999", "chance": "#BBBBBB",
}
MARKERS = {"naive": "s", "naive+": "v", "explorative": "o", "approximate": "^"}
VALUE_MARKERS = ["o", "s", "^", "D", "v", "P", "X", "<", ">", "h"]
BASELINE_STYLE = {"zero-shot": (0, (4, 3)), "ICL": (0, (1.5, 2)), "zero-shot run": (0, (1, 1)),
                  "chance": (0, (0.8, 1.6))}
BAND_NOTE = "shaded: min–max over seeds"
METHOD_NOTES = {"naive": "naive", "naive+": "naive+", "explorative": "explorative",
                "approximate": "approximate", "zero-shot": "zero-shot (naive ICRL, step 0)",
                "zero-shot run": "zero-shot (separate run)", "ICL": "ICL (supervised)",
                "chance": "chance (1 / number of labels)"}
STYLE = {
    "font.family": "serif", "font.serif": ["DejaVu Serif"], "mathtext.fontset": "dejavuserif",
    "font.size": 8.5, "axes.titlesize": 9, "axes.labelsize": 8.5, "legend.fontsize": 8,
    "xtick.labelsize": 7.5, "ytick.labelsize": 7.5, "axes.spines.top": False, "axes.spines.right": False,
    "axes.grid": True, "grid.alpha": 0.25, "grid.linewidth": 0.6, "lines.linewidth": 1.6,
    "legend.frameon": False, "savefig.dpi": 200, "pdf.fonttype": 42, "ps.fonttype": 42,
    "text.usetex": False,
}
MAX_PANELS = 12


# -- data helpers ------------------------------------------------------------------------------
def _mean_curve(frame: pd.DataFrame, run_ids: Sequence[str], value: str) -> pd.DataFrame:
    """step -> mean/min/max of ``value`` over runs (seeds); steps that not every run has are
    averaged over the runs that have them."""
    part = frame[frame["run_id"].isin(list(run_ids))]
    if part.empty:
        return pd.DataFrame(columns=["mean", "min", "max"])
    return part.groupby("step")[value].agg(["mean", "min", "max"]).sort_index()


def _regret_frame(train: pd.DataFrame) -> pd.DataFrame:
    """Per run: cumulative number of wrong training predictions after each step."""
    frame = train.dropna(subset=["accuracy"]).sort_values(["run_id", "step"]).copy()
    frame["regret"] = (1 - frame["accuracy"]).groupby(frame["run_id"]).cumsum()
    return frame


def _smoothed_frame(train: pd.DataFrame, window: int) -> pd.DataFrame:
    """Per run: mean training accuracy of the last ``window`` steps, from the first full window
    on (no growing window at the start, whose first points are single steps)."""
    frame = train.dropna(subset=["accuracy"]).sort_values(["run_id", "step"]).copy()
    frame["smoothed"] = frame.groupby("run_id")["accuracy"].transform(
        lambda s: s.rolling(window, min_periods=window).mean())
    return frame.dropna(subset=["smoothed"])


def _comparable(ctx: "Context", here: pd.DataFrame, model: str, task: str) -> tuple[pd.DataFrame, str]:
    """The runs of one panel that can be compared: ICRL runs of one length (total steps) and
    test set, and the baselines on that test set. Of several, the one covering the most
    methods, then the longest, then the most runs. Returns them and a short description."""
    icrl = here[here["method"].isin(METHODS)]
    if icrl.empty:
        return here, ""
    steps = icrl["total_steps"].fillna(-1).astype(int)
    groups = list(icrl.groupby([steps, icrl["test_set"]], sort=True))
    (length, test_set), best = max(groups, key=lambda kv: (kv[1]["method"].nunique(), kv[0][0], len(kv[1])))
    same_test = here["test_set"] == test_set
    keep = same_test & (~here["method"].isin(METHODS) | (here["total_steps"].fillna(-1).astype(int) == length))
    num_test = best["num_test"].dropna()
    items = f"{int(num_test.iloc[0])} test items" if len(num_test) else f"test set {test_set}"
    description = f"{length} steps, {items}"
    left_out = here[~keep]
    if len(left_out):
        note = (f"{_short_model(model)} / {task}: figures show runs of {length} steps on test set {test_set}; "
                f"left out {len(left_out)} run(s) of other lengths or test sets "
                f"({', '.join(sorted(set(left_out['label'])))}); --filter train_k=... test_k=... to choose")
        if note not in ctx.notes:
            ctx.notes.append(note)
    return here[keep], description


def _chance(ax, runs: pd.DataFrame):
    labels = runs["num_labels"].dropna().unique() if "num_labels" in runs else []
    if len(labels) == 1 and labels[0] > 0:
        _baseline(ax, 1.0 / labels[0], "chance")


def _pick_config(runs: pd.DataFrame, m_ref=None) -> tuple[pd.DataFrame, int]:
    """Of several configurations (seeds aside), the one with the most completed steps; on a
    tie the panel's usual context length ``m_ref``, temperature 1 (the paper's), the longest
    context, the most seeds, the most approximate contexts. Returns its runs and how many
    configurations there were."""
    groups = list(runs.groupby("config_key", sort=True))
    if len(groups) == 1:
        return groups[0][1], 1

    def rank(kv):
        first = kv[1].iloc[0]
        k = first["max_contexts"]
        return (kv[1]["steps"].fillna(0).max(), first["max_context_examples"] == m_ref, first["temperature"] == 1.0,
                first["max_context_examples"] or 0, len(kv[1]), 0 if pd.isna(k) else k)

    return max(groups, key=rank)[1], len(groups)


def _usual_context_length(runs: pd.DataFrame):
    """The most common max_context_examples among these runs (the largest on a tie)."""
    counts = runs["max_context_examples"].dropna().value_counts()
    if counts.empty:
        return None
    return max(counts.index, key=lambda m: (counts[m], m))


def _grid(runs: pd.DataFrame) -> tuple[list[str], list[str]]:
    models = sorted(runs["model"].unique(), key=lambda m: (model_size(m), m))
    tasks = sorted(runs["task"].unique())
    return models, tasks


def _short_model(name: str) -> str:
    return name.rsplit("/", 1)[-1]


# -- drawing helpers ---------------------------------------------------------------------------
def _figure(nrows: int, ncols: int, panel_w: float = 2.7, panel_h: float = 2.05, legend_h: float = 0.45):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(panel_w * ncols + 0.5, panel_h * nrows + legend_h), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, sharex=False)
    return fig, axes


def _plot_curve(ax, curve: pd.DataFrame, color, label, marker="o", markersize=3.6, zorder=2, layer=None):
    """Mean over seeds, with a band from their minimum to their maximum; markers only on
    curves with few points (test accuracy). ``layer`` j = 0, 1, ...: later layers are drawn
    on top, thinner and with smaller markers, so that equal curves all stay visible."""
    if curve.empty:
        return
    linewidth = STYLE["lines.linewidth"]
    if layer is not None:
        zorder, linewidth, markersize = 2 + layer, max(1.0, 1.9 - 0.2 * layer), max(2.6, 4.8 - 0.45 * layer)
    x = curve.index.to_numpy()
    ax.plot(x, curve["mean"].to_numpy(), color=color, label=label, zorder=zorder, linewidth=linewidth,
            marker=marker if len(x) <= 30 else None, markersize=markersize, markeredgewidth=0.6,
            markeredgecolor="white")
    if (curve["max"] - curve["min"]).abs().max() > 0:
        ax.fill_between(x, curve["min"].to_numpy(), curve["max"].to_numpy(), color=color, alpha=0.15, linewidth=0)


def _baseline(ax, value: Optional[float], method: str, label: Optional[str] = None):
    if value is None or not np.isfinite(value):
        return
    ax.axhline(value, color=COLORS[method], linestyle=BASELINE_STYLE[method],
               linewidth=1.0 if method == "chance" else 1.2, label=label or METHOD_NOTES[method], zorder=1)


def _legend_below(fig, axes, title=None):
    handles, labels = {}, []
    for ax in np.ravel(axes):
        for h, label in zip(*ax.get_legend_handles_labels()):
            if label not in handles:
                handles[label] = h
                labels.append(label)
    if any(ax.collections for ax in np.ravel(axes)):  # a seed band was drawn: say what it is
        from matplotlib.patches import Patch

        handles[BAND_NOTE] = Patch(facecolor="#777777", alpha=0.25, linewidth=0)
        labels.append(BAND_NOTE)
    if handles:
        # as many columns as fit the figure's width (an entry: handle + about 0.07 in per character)
        width, widest = fig.get_size_inches()[0] - 0.3, max(0.55 + 0.075 * len(label) for label in labels)
        ncol = max(1, min(len(labels), int(width // widest)))
        if ncol < len(labels) and np.shape(axes)[1] == 1:  # one narrow column: legend on the right
            w, h = fig.get_size_inches()
            fig.set_size_inches(w + widest + 0.2, h - 0.3)
            fig.legend([handles[label] for label in labels], labels, loc="outside right upper",
                       handlelength=2.4, title=title)
            return
        fig.legend([handles[label] for label in labels], labels, loc="outside lower center",
                   ncol=ncol, handlelength=2.4, columnspacing=1.4, title=title)


def _hide_unused(axes, used: int):
    for ax in np.ravel(axes)[used:]:
        ax.set_visible(False)


def _save(fig, out_dir: Path, name: str) -> list[Path]:
    paths = []
    for ext in ("png", "pdf"):
        path = out_dir / f"{name}.{ext}"
        with atomic_output(path) as tmp:  # whole or not at all (a full disk)
            fig.savefig(tmp)
        paths.append(path)
    return paths


# -- the figures -------------------------------------------------------------------------------
@dataclass
class Context:
    results: Results
    smooth: int
    explorative_p_keep: float
    notes: list
    verdicts: list = None  # Verdict per model, task and method of main_results
    captions: dict = None  # id(panel) -> text under its x axis

    def __post_init__(self):
        self.verdicts = [] if self.verdicts is None else self.verdicts
        self.captions = {} if self.captions is None else self.captions

    @property
    def runs(self) -> pd.DataFrame:
        return self.results.runs


def _main_runs(ctx: Context) -> pd.DataFrame:
    runs = ctx.runs
    default = (~runs["omit_feedback"].astype(bool)) & (~runs["flip_feedback"].astype(bool)) & \
        (runs["exemplars_per_label"].fillna(0) == 0)
    return runs[default]


def _method_grid(ctx: Context, name: str, draw_panel: Callable, ylabel: str, baselines: bool,
                 unit_range: bool, verdicts: bool = False) -> Optional[object]:
    """A grid (rows: models, columns: tasks) with one line per paper method; ``baselines``:
    zero-shot and ICL lines (test accuracy only); ``unit_range``: an accuracy axis, with chance;
    ``verdicts``: say in each panel whether each method beat zero-shot."""
    runs = _main_runs(ctx)
    icrl = runs[runs["method"].isin(METHODS)]
    if icrl.empty:
        return (f"no naive, naive+, explorative (random_unbiased_only_positive at p_keep "
                f"{ctx.explorative_p_keep:g}) or approximate ICRL run")
    models, tasks = _grid(icrl)
    fig, axes = _figure(len(models), len(tasks))
    for r, model in enumerate(models):
        for c, task in enumerate(tasks):
            ax = axes[r][c]
            here = runs[(runs["model"] == model) & (runs["task"] == task)]
            here, description = _comparable(ctx, here, model, task)
            m_ref = _usual_context_length(here[here["method"].isin(METHODS)])
            drawn = {}
            for method in METHODS:
                chosen = here[here["method"] == method]
                if chosen.empty:
                    continue
                chosen, n_configs = _pick_config(chosen, m_ref)
                if n_configs > 1:
                    note = (f"{n_configs} configurations of {method} for {model} / {task}; main_results, "
                            f"regret and train_accuracy show {chosen['label'].iloc[0]} (--filter to choose)")
                    if note not in ctx.notes:
                        ctx.notes.append(note)
                draw_panel(ax, chosen, method)
                drawn[method] = chosen
            if baselines:
                zero_ref = _zero_shot_reference(ctx, here, m_ref)
                _baseline(ax, zero_ref[0] if zero_ref else None, "zero-shot")
                zero = here[here["method"] == "zero-shot"]
                zero_acc = zero["final_test_accuracy"].dropna()
                _baseline(ax, zero_acc.mean() if len(zero_acc) else None, "zero-shot run")
                icl = here[here["method"] == "ICL"]
                if len(icl):  # the ICL run with the ICRL runs' context length, else the longest
                    same = icl[icl["max_context_examples"] == m_ref]
                    icl = same if len(same) else icl[icl["max_context_examples"] == icl["max_context_examples"].max()]
                    _baseline(ax, icl["final_test_accuracy"].dropna().mean(), "ICL")
                if verdicts:
                    reference = (_pooled(zero), "zero-shot run") if len(zero_acc) else (zero_ref, "naive ICRL at step 0")
                    _verdicts(ctx, ax, model, task, drawn, *reference)
            if unit_range:
                _chance(ax, here)
                ax.set_ylim(-0.02, 1.02)
            else:
                ax.set_ylim(bottom=0)
            if r == 0:
                ax.set_title(f"{task}\n{description}" if description else task)
            elif description:
                ax.set_title(description, fontsize=7.5)
            caption = ctx.captions.get(id(ax))
            if caption:
                ax.set_xlabel(f"Step\n{caption}", fontsize=6.5, linespacing=1.4)
            elif r == len(models) - 1:
                ax.set_xlabel("Step")
            if c == 0:
                ax.set_ylabel(f"{_short_model(model)}\n{ylabel}")
    # Room for the captions, so that they do not squeeze the panels: per row, its longest one
    # (6.5-point lines at spacing 1.4 are 0.13 inch each).
    lines = [max((ctx.captions.get(id(ax), "").count("\n") + 1 if id(ax) in ctx.captions else 0)
                 for ax in row) for row in axes]
    if any(lines):
        width, height = fig.get_size_inches()
        fig.set_size_inches(width, height + 0.13 * sum(lines))
    _legend_below(fig, axes)
    return fig


def _zero_shot_reference(ctx: Context, here: pd.DataFrame, m_ref) -> Optional[tuple[float, int]]:
    """The paper's zero-shot point: the step-0 test accuracy of the naive ICRL run (ICRL system
    prompt, no episode yet), averaged over seeds, and its test items pooled over seeds; None
    without a naive run tested at step 0."""
    naive = here[here["method"] == "naive"]
    if naive.empty:
        return None
    naive, _ = _pick_config(naive, m_ref)
    test = ctx.results.test()
    first = test[test["run_id"].isin(list(naive["run_id"])) & (test["step"] == 0)]
    first = first.dropna(subset=["accuracy"])
    if first.empty:
        return None
    sizes = naive.set_index("run_id").loc[first["run_id"], "num_test"].fillna(0).astype(int)
    return float(first["accuracy"].mean()), int(sizes.sum())


def _pooled(runs: pd.DataFrame) -> Optional[tuple[float, int]]:
    """(mean final test accuracy over seeds, test items pooled over them)."""
    runs = runs.dropna(subset=["final_test_accuracy", "num_test"])
    if runs.empty:
        return None
    return float(runs["final_test_accuracy"].mean()), int(runs["num_test"].sum())


# Characters of a caption line under a 2.7-inch panel at font size 6.5 (neighbouring panels'
# captions must not run into each other).
CAPTION_CHARS = 54


def _verdicts(ctx: Context, ax, model: str, task: str, drawn: dict, reference, reference_name: str):
    """Whether each drawn method's final test accuracy beat zero-shot: in the panel and in
    ``ctx.verdicts`` (printed at the end)."""
    if reference is None:
        return
    lines, here = [], []
    for method, chosen in drawn.items():
        finished = chosen[chosen["finished"].astype(bool)]
        pooled = _pooled(finished)
        if pooled is None:
            continue
        verdict = Verdict(model=_short_model(model), task=task, method=method,
                          steps=int(finished["total_steps"].max()), accuracy=pooled[0], n=pooled[1],
                          reference=reference[0], n_reference=reference[1], reference_name=reference_name,
                          model_params=model_size(model))
        ctx.verdicts.append(verdict)
        here.append(verdict)
        lines.append(verdict.short())
    if lines:  # under the panel, where it hides no curve; wrapped to the panel's width
        # (a no-break space keeps an interval "[0.184, 0.354]" on one line)
        ctx.captions[id(ax)] = "\n".join(
            textwrap.fill(re.sub(r"(\d), (\d)", "\\1,\u00a0\\2", line), CAPTION_CHARS, break_on_hyphens=False)
            for line in lines + [f"({panel_note(here)})"])


def fig_main_results(ctx: Context):
    test = ctx.results.test()

    def panel(ax, chosen, method):
        _plot_curve(ax, _mean_curve(test, chosen["run_id"], "accuracy"), COLORS[method], METHOD_NOTES[method],
                    marker=MARKERS[method], layer=METHODS.index(method))

    return _method_grid(ctx, "main_results", panel, "Test accuracy", baselines=True, unit_range=True,
                        verdicts=True)


def fig_regret(ctx: Context):
    regret = _regret_frame(ctx.results.train())

    def panel(ax, chosen, method):
        _plot_curve(ax, _mean_curve(regret, chosen["run_id"], "regret"), COLORS[method], METHOD_NOTES[method],
                    marker=MARKERS[method], layer=METHODS.index(method))

    return _method_grid(ctx, "regret", panel, "Regret (wrong predictions)", baselines=False, unit_range=False)


def fig_train_accuracy(ctx: Context):
    smoothed = _smoothed_frame(ctx.results.train(), ctx.smooth)

    def panel(ax, chosen, method):
        _plot_curve(ax, _mean_curve(smoothed, chosen["run_id"], "smoothed"), COLORS[method], METHOD_NOTES[method],
                    marker=MARKERS[method], layer=METHODS.index(method))

    train = ctx.results.train()
    if len(train) and not smoothed.empty:
        short = sorted(set(train["run_id"]) - set(smoothed["run_id"]))
    else:
        short = sorted(set(train["run_id"]))
    short = [r for r in short if ctx.runs.loc[r, "mode"] == "icrl"] if len(ctx.runs) else []
    if short:
        ctx.notes.append(f"train_accuracy: {len(short)} ICRL run(s) shorter than the {ctx.smooth}-step window "
                         f"are not drawn (--smooth N for a shorter window)")
    label = "Training accuracy" + (f"\n(mean of the last {ctx.smooth} steps)" if ctx.smooth > 1 else "")
    return _method_grid(ctx, "train_accuracy", panel, label, baselines=False, unit_range=True)


@dataclass
class Ablation:
    name: str
    title: str            # legend title (mathtext allowed)
    column: str           # the ablated column of Results.runs
    what: str             # for the skip note
    keep: Callable[[pd.DataFrame], pd.Series] = lambda runs: runs["mode"] == "icrl"
    fmt: Callable = lambda v: str(v)
    order: Callable = lambda v: v


def _fmt_num(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "none"
    return f"{v:g}" if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) else str(v)


STRATEGY_NAMES = {"random_biased_start": "oldest (start)", "random_biased_end": "most recent (end)",
                  "random_unbiased": "random (unbiased)"}
FILTER_NAMES = {"": "all episodes", "_only_positive": "positive only", "_only_negative": "negative only"}

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
             keep=lambda r: (r["mode"] == "icrl") & (r["strategy_base"] == "approximate"), fmt=_fmt_num),
    Ablation("ablation_sampling_method", "context sampling", "sampling_method",
             "approximate_context_sampling_method",
             keep=lambda r: (r["mode"] == "icrl") & (r["strategy_base"] == "approximate")),
    Ablation("ablation_semantic_labels", "labels", "unsemantic", "semantic vs. _unsemantic labels",
             fmt=lambda v: "abstract" if v else "semantic", order=lambda v: bool(v)),
    Ablation("ablation_temperature", "temperature", "temperature", "temperature", fmt=_fmt_num),
    Ablation("ablation_model_scale", "model", "model", "model_name",
             fmt=_short_model, order=lambda v: (model_size(v), v)),
]


def _ablation_groups(runs: pd.DataFrame, column: str) -> list[tuple[tuple, pd.DataFrame]]:
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
    if column != "p_keep" and not (group["method"].nunique() == 1 and row["method"] in ("naive", "naive+", "explorative")):
        parts.append(f"$p_\\mathrm{{keep}}$={_fmt_num(row['p_keep'])}")
    if row["strategy_base"] == "approximate":
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


def fig_ablation(ctx: Context, ab: Ablation):
    runs = ctx.runs[ab.keep(ctx.runs)] if len(ctx.runs) else ctx.runs
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


FIGURES: list[tuple[str, Callable]] = [
    ("main_results", fig_main_results),
    ("regret", fig_regret),
    ("train_accuracy", fig_train_accuracy),
    *[(ab.name, (lambda ab: lambda ctx: fig_ablation(ctx, ab))(ab)) for ab in ABLATIONS],
]


# -- the command line ---------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="run_draw_plots.py",
                description="Draw the paper's figures and a summary CSV from the records under --data_dir "
                            "(no model is loaded).",
                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--data_dir", default="data", help="results root (as run_experiment.py --output_dir)")
    p.add_argument("--out_dir", default="plots", help="where the PNG/PDF figures and summary.csv go")
    p.add_argument("--filter", action="append", default=[], metavar="KEY=VALUE",
                   help="only runs with this value (e.g. task=banking77, model=smollm2-135m, method=explorative, "
                        "context_p_keep=0.1); repeat a key for either value")
    p.add_argument("--smooth", type=int, default=50, help="rolling window (steps) for training accuracy")
    p.add_argument("--explorative_p_keep", type=float, default=DEFAULT_EXPLORATIVE_P_KEEP,
                   help="p_keep of random_unbiased_only_positive drawn as explorative ICRL")
    p.add_argument("--only", action="append", default=[], metavar="FIGURE",
                   help=f"draw only this figure (repeatable): {', '.join(n for n, _ in FIGURES)}")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = build_parser().parse_args(argv)
        return draw(args)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def draw(args) -> int:
    import matplotlib

    if args.smooth < 1:
        raise UsageError(f"--smooth must be a window of at least 1 step, got {args.smooth}")
    if not 0 < args.explorative_p_keep <= 1:
        raise UsageError(f"--explorative_p_keep must be in (0, 1], got {args.explorative_p_keep}")
    names = [n for n, _ in FIGURES]
    unknown = [n for n in args.only if n not in names]
    if unknown:
        raise UsageError(f"unknown --only {unknown[0]!r}; choose from: {', '.join(names)}")
    out_dir = Path(args.out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out_dir {args.out_dir!r} cannot be a folder of figures: {exc.strerror or exc}") from None
    results = Results(args.data_dir, args.filter, args.explorative_p_keep)
    for note in results.notes:
        print(f"note: {note}")
    if results.all_runs.empty:
        raise UsageError(f"no runs under {args.data_dir!r} (run_experiment.py writes them there with --output_dir)")
    if results.runs.empty:
        raise UsageError(f"no run under {args.data_dir!r} matches --filter {' '.join(args.filter)}")
    summary = results.summary()
    with atomic_output(out_dir / "summary.csv") as tmp:
        summary.to_csv(tmp, index=False)
    with atomic_output(out_dir / "summary_by_config.csv") as tmp:
        results.aggregate().to_csv(tmp, index=False)
    print(f"read {len(results.runs)} runs from {args.data_dir}; wrote {out_dir / 'summary.csv'} and "
          f"{out_dir / 'summary_by_config.csv'} (mean, std, n over seeds of finished runs)")
    ctx = Context(results, args.smooth, args.explorative_p_keep, [])
    drawn = 0
    with matplotlib.rc_context(STYLE):
        for name, make in FIGURES:
            if args.only and name not in args.only:
                continue
            fig = make(ctx)
            if isinstance(fig, str):
                print(f"skipped {name}: {fig}")
                continue
            paths = _save(fig, out_dir, name)
            drawn += 1
            print(f"wrote {paths[0]} (+ .pdf)")
    for note in ctx.notes:
        print(f"note: {note}")
    print(f"{drawn} figures in {out_dir}")
    for verdict in ctx.verdicts:
        print(f"verdict: {verdict.line()}")
    return 0
