"""What every figure uses: style, colours, per-step curves, panels, legend, the shared context."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Optional, Sequence, Union

import numpy as np
import pandas as pd

from ..records import write_atomic
from .results import Results
from .runs import model_size

if TYPE_CHECKING:
    from matplotlib.artist import Artist
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from .paired import PairedVerdict
    from .verdict import Verdict

Color = Union[str, tuple[float, ...]]  # a name or "#rrggbb", or RGBA from a colormap

COLORS = {  # Okabe-Ito, colour-blind safe; one colour per method in every figure
    "naive": "#E69F00", "naive+": "#56B4E9", "explorative": "#009E73", "approximate": "#D55E00",
    "zero-shot": "#555555", "ICL": "#000000", "zero-shot run": "#999999", "chance": "#BBBBBB",
    # learners that are not LLMs (icrl.method.agents), drawn with --other_runs
    "LinUCB": "#0072B2", "epsilon-greedy": "#CC79A7", "online supervised": "#7F5F00",
}
MARKERS = {"naive": "s", "naive+": "v", "explorative": "o", "approximate": "^",
           "LinUCB": "D", "epsilon-greedy": "P", "online supervised": "X"}
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

def _pick_config(runs: pd.DataFrame, m_ref: Optional[float] = None) -> tuple[pd.DataFrame, int]:
    """Of several configurations (seeds aside), the one with the most completed steps; on a
    tie the panel's usual context length ``m_ref``, temperature 1 (the paper's), the longest
    context, the most seeds, the most approximate contexts. Returns its runs and how many
    configurations there were."""
    groups = list(runs.groupby("config_key", sort=True))
    if len(groups) == 1:
        return groups[0][1], 1

    def rank(kv: tuple[Any, pd.DataFrame]) -> tuple[float, bool, bool, float, int, float]:
        first = kv[1].iloc[0]
        k = first["max_contexts"]
        return (kv[1]["steps"].fillna(0).max(), first["max_context_examples"] == m_ref, first["temperature"] == 1.0,
                first["max_context_examples"] or 0, len(kv[1]), 0 if pd.isna(k) else k)

    return max(groups, key=rank)[1], len(groups)


def _usual_context_length(runs: pd.DataFrame) -> Optional[float]:
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
def _figure(nrows: int, ncols: int, panel_w: float = 2.7, panel_h: float = 2.05,
            legend_h: float = 0.45) -> tuple[Figure, np.ndarray]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(panel_w * ncols + 0.5, panel_h * nrows + legend_h), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, sharex=False)
    return fig, axes


def _plot_curve(ax: Axes, curve: pd.DataFrame, color: Color, label: str, marker: Optional[str] = "o",
                markersize: float = 3.6, zorder: float = 2, layer: Optional[int] = None, linestyle: str = "-") -> None:
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
            linestyle=linestyle,
            marker=marker if len(x) <= 30 else None, markersize=markersize, markeredgewidth=0.6,
            markeredgecolor="white")
    if (curve["max"] - curve["min"]).abs().max() > 0:
        ax.fill_between(x, curve["min"].to_numpy(), curve["max"].to_numpy(), color=color, alpha=0.15, linewidth=0)


def _baseline(ax: Axes, value: Optional[float], method: str, label: Optional[str] = None) -> None:
    if value is None or not np.isfinite(value):
        return
    ax.axhline(value, color=COLORS[method], linestyle=BASELINE_STYLE[method],
               linewidth=1.0 if method == "chance" else 1.2, label=label or METHOD_NOTES[method], zorder=1)


def _legend_below(fig: Figure, axes: np.ndarray, title: Optional[str] = None) -> None:
    handles: dict[str, Artist] = {}
    labels: list[str] = []
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
        rows = -(-len(labels) // ncol)
        extra = 0.21 * rows + (0.25 if title else 0) + 0.15 - 0.45  # _figure's room for a legend: 0.45 in
        if extra > 0:  # long entries, few columns: make room, else the layout gives up and it covers the panels
            w, h = fig.get_size_inches()
            fig.set_size_inches(w, h + extra)
        fig.legend([handles[label] for label in labels], labels, loc="outside lower center",
                   ncol=ncol, handlelength=2.4, columnspacing=1.4, title=title)


def _integer_steps(fig: Figure) -> None:
    """Steps are whole: in a figure whose x axes are steps (one of them labelled so, the bottom
    row's) every x axis gets integer ticks only (a short run's would otherwise read 0.5, 1.5)."""
    from matplotlib.ticker import MaxNLocator

    if any(ax.get_xlabel().lower().startswith(("step", "training step")) for ax in fig.axes):
        for ax in fig.axes:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))


def _hide_unused(axes: np.ndarray, used: int) -> None:
    for ax in np.ravel(axes)[used:]:
        ax.set_visible(False)


def _save(fig: Figure, out_dir: Path, name: str) -> list[Path]:
    _integer_steps(fig)
    paths = []
    for ext in ("png", "pdf"):
        path = out_dir / f"{name}.{ext}"
        write_atomic(path, functools.partial(_savefig, fig, ext), binary=True)  # whole or not at all
        paths.append(path)
    return paths

def _savefig(fig: Figure, ext: str, f: IO[bytes]) -> None:
    fig.savefig(f, format=ext)


# -- the figures -------------------------------------------------------------------------------
@dataclass
class Context:
    results: Results
    smooth: int
    explorative_p_keep: float
    notes: list[str]
    # Verdict (or PairedVerdict) per model, task and method of main_results
    verdicts: list[Union[Verdict, PairedVerdict]] = field(default_factory=list)
    captions: dict[int, str] = field(default_factory=dict)  # id(panel) -> text under its x axis
    other_runs: bool = False  # also draw the paper's methods at settings the published figures leave out

    @property
    def runs(self) -> pd.DataFrame:
        return self.results.runs

    def note(self, text: str) -> None:
        """A console note, said once however many figures meet it."""
        if text not in self.notes:
            self.notes.append(text)




def _chance(ax: Axes, runs: pd.DataFrame) -> None:
    labels = runs["num_labels"].dropna().unique() if "num_labels" in runs else []
    if len(labels) == 1 and labels[0] > 0:
        _baseline(ax, 1.0 / labels[0], "chance")


