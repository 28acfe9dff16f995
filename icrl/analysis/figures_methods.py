"""The method figures: main_results (test accuracy), regret and train_accuracy, a panel per model
and task, a line per paper method, with the zero-shot and ICL lines and the verdicts."""

from __future__ import annotations

import math
import re
import textwrap
from typing import TYPE_CHECKING, Optional, Protocol, Union

import pandas as pd

from .figures_base import (COLORS, MARKERS, METHOD_NOTES, Context, _baseline, _chance, _figure, _grid, _legend_below,
                           _mean_curve, _pick_config, _plot_curve, _regret_frame, _short_model, _smoothed_frame,
                           _usual_context_length)
from .runs import METHODS, model_params
from .paired import PairedVerdict, paired_verdict
from .paired import paired_panel_note
from .verdict import Verdict, panel_note

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


class DrawPanel(Protocol):
    """Draws one method's runs (``chosen``) in a panel: a figure's curve of them."""

    def __call__(self, ax: Axes, chosen: pd.DataFrame, method: str, label: Optional[str] = None,
                 other: bool = False) -> None: ...


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
        ctx.note(note)
    return here[keep], description



PAPER_RULES = ("the published figures count a run as naive only at temperature 1.0, naive+ only at 2.0, "
               "explorative only with the automatic context size and temperature 1.0, approximate only with "
               "8 contexts sampled uniformly")


def _main_runs(ctx: Context) -> pd.DataFrame:
    """The runs of the method figures: the paper's methods as the published figures select them
    (``paper_method``, see icrl.analysis.runs.paper_method_of) and the baselines; the same methods
    at other settings only with ``ctx.other_runs``. Runs with omitted or flipped feedback or with
    exemplars are ablations, never here (the published figures would count them twice and stop)."""
    runs = ctx.runs
    default = (~runs["omit_feedback"].astype(bool)) & (~runs["flip_feedback"].astype(bool)) & \
        (runs["exemplars_per_label"].fillna(0) == 0)
    runs = runs[default]
    other = runs["method"].isin(METHODS) & (runs["method"] != runs["paper_method"])
    if other.any() and not ctx.other_runs:
        note = (f"method figures: {int(other.sum())} run(s) of the paper's methods at other settings not drawn "
                f"({', '.join(sorted(set(_other_label(row) for _, row in runs[other].iterrows())))}): "
                f"{PAPER_RULES}; --other_runs draws them as dashed lines")
        ctx.note(note)
        return runs[~other]
    return runs


def _other_label(row: pd.Series) -> str:
    """What a run of a paper method at other settings is: its label, with its temperature."""
    label = str(row["label"])
    if "T=" not in label:
        temperature = f"{float(row['temperature']):g}"
        label = label[:-1] + f", T={temperature})" if label.endswith(")") else f"{label} (T={temperature})"
    return label


def _method_grid(ctx: Context, name: str, draw_panel: DrawPanel, ylabel: str, baselines: bool,
                 unit_range: bool, verdicts: bool = False) -> Union[Figure, str]:
    """A grid (rows: models, columns: tasks) with one line per paper method; ``baselines``:
    zero-shot and ICL lines (test accuracy only); ``unit_range``: an accuracy axis, with chance;
    ``verdicts``: say in each panel whether each method beat zero-shot."""
    runs = _main_runs(ctx)
    icrl = runs[runs["method"].isin(METHODS)]
    if icrl.empty:
        return (f"no naive, naive+, explorative (random_unbiased_only_positive at p_keep "
                f"{ctx.explorative_p_keep:g}) or approximate ICRL run at the paper's settings ({PAPER_RULES}; "
                f"--other_runs also draws other settings)")
    models, tasks = _grid(icrl)
    fig, axes = _figure(len(models), len(tasks))
    for r, model in enumerate(models):
        for c, task in enumerate(tasks):
            ax = axes[r][c]
            here = runs[(runs["model"] == model) & (runs["task"] == task)]
            here, description = _comparable(ctx, here, model, task)
            m_ref = _usual_context_length(here[here["method"].isin(METHODS)])
            drawn = _draw_methods(ctx, ax, runs, here, model, task, m_ref, draw_panel)
            if baselines:
                _draw_baselines(ctx, ax, here, model, task, m_ref, drawn, verdicts)
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


def _draw_methods(ctx: Context, ax: Axes, runs: pd.DataFrame, here: pd.DataFrame, model: str, task: str,
                  m_ref: Optional[float], draw_panel: DrawPanel) -> dict[str, pd.DataFrame]:
    """Draw each paper method's chosen configuration on ``ax`` (and, with --other_runs, the other
    settings and the learners); label -> the runs drawn."""
    drawn: dict[str, pd.DataFrame] = {}
    for method in METHODS:
        chosen = here[(here["method"] == method) & (here["paper_method"] == method)]
        if chosen.empty:
            continue
        chosen, n_configs = _pick_config(chosen, m_ref)
        if n_configs > 1:
            note = (f"{n_configs} configurations of {method} for {model} / {task}; main_results, "
                    f"regret and train_accuracy show {chosen['label'].iloc[0]} (--filter to choose)")
            ctx.note(note)
        draw_panel(ax, chosen, method)
        drawn[method] = chosen
    others = here[here["method"].isin(METHODS) & (here["method"] != here["paper_method"])]
    for _, group in others.groupby("config_key", sort=True):  # only with --other_runs
        label = _other_label(group.iloc[0])
        draw_panel(ax, group, group["method"].iloc[0], label=label, other=True)
        drawn[label] = group
    for label, group in _learners(ctx, runs, here, task):  # only with --other_runs
        draw_panel(ax, group, group["learner"].iloc[0], label=label, other=True)
    return drawn


def _draw_baselines(ctx: Context, ax: Axes, here: pd.DataFrame, model: str, task: str, m_ref: Optional[float],
                    drawn: dict[str, pd.DataFrame], verdicts: bool) -> None:
    """The zero-shot and ICL lines of a panel; ``verdicts``: whether each drawn method beat zero-shot."""
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
        reference = ((_pooled(zero), "zero-shot run") if len(zero_acc)
                     else (zero_ref, "naive ICRL at step 0"))
        _verdicts(ctx, ax, model, task, drawn, *reference,
                  *_reference_runs(here, zero, len(zero_acc) > 0, m_ref))


def _learners(ctx: Context, runs: pd.DataFrame, here: pd.DataFrame, task: str) -> list[tuple[str, pd.DataFrame]]:
    """(label, runs) of the learners that are not LLMs (icrl.method.agents) on ``task``, drawn in every
    model's panel of that task (they use no model) when ``ctx.other_runs``, on the panel's test set
    and length; without it, a note says they were left out."""
    if "learner" not in runs.columns:
        return []
    learners = runs[runs["learner"].notna() & (runs["task"] == task)]
    icrl = here[here["method"].isin(METHODS)]
    if len(icrl):
        learners = learners[learners["test_set"].isin(set(icrl["test_set"])) &
                            learners["total_steps"].isin(set(icrl["total_steps"]))]
    if learners.empty:
        return []
    if not ctx.other_runs:
        note = (f"method figures: {len(learners)} run(s) of learners that are not LLMs on {task} not drawn "
                f"({', '.join(sorted(set(learners['model'])))}); --other_runs draws them as dashed lines")
        ctx.note(note)
        return []
    return list(learners.groupby("model", sort=True))


def _zero_shot_reference(ctx: Context, here: pd.DataFrame, m_ref: Optional[float]) -> Optional[tuple[float, int]]:
    """The paper's zero-shot point: the step-0 test accuracy of the naive ICRL run (ICRL system
    prompt, no episode yet), averaged over seeds, and its test items pooled over seeds; None
    without a naive run tested at step 0."""
    naive = here[(here["method"] == "naive") & (here["paper_method"] == "naive")]
    if naive.empty and ctx.other_runs:
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
CAPTION_CHARS = 50


def _reference_runs(here: pd.DataFrame, zero: pd.DataFrame, has_zero: bool,
                    m_ref: Optional[float]) -> tuple[pd.DataFrame, Union[int, str]]:
    """The runs and step of the verdicts' reference, for the paired test: the zero-shot runs'
    last test, else the naive runs' step 0 (before any episode)."""
    if has_zero:
        return zero, "last"
    naive = here[(here["method"] == "naive") & (here["paper_method"] == "naive")]
    return (_pick_config(naive, m_ref)[0] if len(naive) else naive), 0


def _verdicts(ctx: Context, ax: Axes, model: str, task: str, drawn: dict[str, pd.DataFrame],
              reference: Optional[tuple[float, int]], reference_name: str,
              reference_runs: Optional[pd.DataFrame] = None, reference_step: Union[int, str] = "last",
              learners: Optional[dict[str, pd.DataFrame]] = None) -> None:
    """Whether each drawn method's final test accuracy beat zero-shot: in the panel and in
    ``ctx.verdicts`` (printed at the end). Paired (McNemar on the shared test items) when the
    reference runs tested the same items, else Wilson intervals. ``learners``: drawn learners
    (no model), judged against the same reference, their verdicts filed under "learner"."""
    if reference is None:
        return
    lines: list[str] = []
    here: list[Union[Verdict, PairedVerdict]] = []
    for method, chosen in (learners or {}).items():
        _judge(ctx, "learner", math.nan, task, method, chosen, reference, reference_name, reference_runs,
               reference_step, lines, here)
    for method, chosen in drawn.items():
        _judge(ctx, _short_model(model), model_params(model), task, method, chosen, reference, reference_name,
               reference_runs, reference_step, lines, here)
    if lines:  # under the panel, where it hides no curve; wrapped to the panel's width
        # (a no-break space keeps an interval "[0.184, 0.354]" on one line)
        ctx.captions[id(ax)] = "\n".join(
            textwrap.fill(re.sub(r"(\d), (\d)", "\\1,\u00a0\\2", line), CAPTION_CHARS, break_on_hyphens=False)
            for line in lines + [f"({_note(here)})"])


def _judge(ctx: Context, model: str, params: float, task: str, method: str, chosen: pd.DataFrame,
           reference: tuple[float, int], reference_name: str, reference_runs: Optional[pd.DataFrame],
           reference_step: Union[int, str], lines: list[str], here: list[Union[Verdict, PairedVerdict]]) -> None:
    """The verdict of one drawn configuration (appended to ``lines`` and ``here``, and to
    ``ctx.verdicts`` unless another figure gave it)."""
    given = {(v.model, v.task, v.method) for v in ctx.verdicts}
    finished = chosen[chosen["finished"].astype(bool)]
    pooled = _pooled(finished)
    if pooled is None:
        return
    paired = None
    if reference_runs is not None and len(reference_runs):
        paired = paired_verdict(model, task, method, finished, reference_runs[reference_runs["finished"].astype(bool)],
                                reference_name, params, reference_step)
    verdict: Union[Verdict, PairedVerdict]
    if paired is not None:
        verdict = paired
    else:
        verdict = Verdict(model=model, task=task, method=method, steps=int(finished["total_steps"].max()),
                          accuracy=pooled[0], n=pooled[1], reference=reference[0], n_reference=reference[1],
                          reference_name=reference_name, model_params=params)
    if (verdict.model, verdict.task, verdict.method) not in given:
        ctx.verdicts.append(verdict)
    here.append(verdict)
    lines.append(verdict.short())


def _note(verdicts: list[Union[Verdict, PairedVerdict]]) -> str:
    paired = all(isinstance(v, PairedVerdict) for v in verdicts)
    return paired_panel_note(verdicts) if paired else panel_note(verdicts)


def _layer(method: str, other: bool) -> int:
    """The drawing layer of a method's curve (a learner's after the paper's methods)."""
    return (METHODS.index(method) if method in METHODS else len(METHODS)) + 4 * other


def fig_main_results(ctx: Context) -> Union[Figure, str]:
    test = ctx.results.test()

    def panel(ax: Axes, chosen: pd.DataFrame, method: str, label: Optional[str] = None, other: bool = False) -> None:
        _plot_curve(ax, _mean_curve(test, chosen["run_id"], "accuracy"), COLORS[method], label or METHOD_NOTES[method],
                    marker=MARKERS[method], layer=_layer(method, other),
                    linestyle="--" if other else "-")

    return _method_grid(ctx, "main_results", panel, "Test accuracy", baselines=True, unit_range=True,
                        verdicts=True)


def fig_regret(ctx: Context) -> Union[Figure, str]:
    regret = _regret_frame(ctx.results.train())

    def panel(ax: Axes, chosen: pd.DataFrame, method: str, label: Optional[str] = None, other: bool = False) -> None:
        _plot_curve(ax, _mean_curve(regret, chosen["run_id"], "regret"), COLORS[method], label or METHOD_NOTES[method],
                    marker=MARKERS[method], layer=_layer(method, other),
                    linestyle="--" if other else "-")

    return _method_grid(ctx, "regret", panel, "Regret (wrong predictions)", baselines=False, unit_range=False)


def fig_train_accuracy(ctx: Context) -> Union[Figure, str]:
    smoothed = _smoothed_frame(ctx.results.train(), ctx.smooth)

    def panel(ax: Axes, chosen: pd.DataFrame, method: str, label: Optional[str] = None, other: bool = False) -> None:
        _plot_curve(ax, _mean_curve(smoothed, chosen["run_id"], "smoothed"), COLORS[method],
                    label or METHOD_NOTES[method],
                    marker=MARKERS[method], layer=_layer(method, other),
                    linestyle="--" if other else "-")

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


