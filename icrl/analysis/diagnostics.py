"""Degeneration diagnostics from a run's records alone (no model).

Per training step (``step_table``): the prediction, the reward shown (feedback), whether it
was right, and about the context the step was predicted with: its size, the share of its
episodes with positive reward, whether the prediction equals the most frequent label shown
in it (the *frequency bias* of Schmied et al. 2025: a small model copying that label), and
how many positive episodes the history held (what an only-positive strategy can draw from).
The label an episode shows is its prediction in ICRL and its gold answer in ICL; exemplars
are not counted (they are not episodes).

Per window of steps (``window_table``): reward rate, training accuracy, entropy (bits, and
divided by log2 of the number of labels) and coverage (share of the labels predicted at
least once) of the predicted labels, frequency bias, positive share of context, positives
available and cumulative regret (wrong training predictions so far) at the window's end.
Per test step and gold label (``per_class_table``): accuracy and items.

Per window also the failure metrics of :mod:`icrl.analysis.failures` (``history_frequency_bias``,
``knowing_doing_gap``), and per run all of them (``failures_table``: greediness, early collapse).

``write_diagnostics(data_dir, out_dir)`` writes ``diagnostics.csv`` (windows of every ICRL
run), ``diagnostics_per_class.csv``, ``diagnostics_runs.csv`` (the failure metrics of every ICRL
run) and ``diagnostics.png`` (one row of panels per model and task, one line per run: naive and
explorative side by side show degeneration).
"""

from __future__ import annotations

import math
from collections import Counter
from functools import partial
from pathlib import Path
from typing import IO, Any, Iterable, Optional, Sequence, Union

import numpy as np
import pandas as pd
from scipy import special

from ..errors import UsageError
from ..records import find_runs, write_atomic
from ..run.readback import CheckedRun, read_run

from .failures import FAILURE_COLUMNS, run_failures, step_failures
from .runs import DEFAULT_EXPLORATIVE_P_KEEP, run_label, run_row

DIAGNOSTICS_CSV, PER_CLASS_CSV, DIAGNOSTICS_PNG = "diagnostics.csv", "diagnostics_per_class.csv", "diagnostics.png"
FAILURES_CSV = "diagnostics_runs.csv"
STEP_COLUMNS = ["step", "prediction", "answer", "reward", "correct", "context_size", "context_positive_share",
                "frequency_match", "positives_available", "history_frequency_match", "knowing_doing_mismatch"]
WINDOW_COLUMNS = ["window_start", "window_end", "steps", "reward_rate", "accuracy", "entropy_bits",
                  "entropy_norm", "coverage", "frequency_bias", "context_positive_share", "positives_available",
                  "cumulative_regret", "history_frequency_bias", "knowing_doing_gap"]
PANELS = (("reward_rate", "reward rate"), ("entropy_norm", "prediction entropy / log2(labels)"),
          ("frequency_bias", "frequency bias"), ("history_frequency_bias", "history frequency bias"),
          ("cumulative_regret", "cumulative regret"))


def labels_of(state: CheckedRun) -> list[str]:
    return state.config.labels



def step_table(state: CheckedRun) -> pd.DataFrame:
    """One row per training step of a run (see the module docstring); empty for zero-shot."""
    icl = state.mode == "icl"
    shown: list[Optional[str]] = []
    rewards: list[Optional[float]] = []
    rows: list[dict[str, Any]] = []
    positives = 0
    for record in state.train:
        context = record.context
        labels = [shown[i] for i in context if 0 <= i < len(shown)]
        context_rewards = [r for r in (rewards[i] for i in context if 0 <= i < len(rewards)) if r is not None]
        prediction = record.prediction
        match = math.nan
        if labels and prediction is not None:
            counts = Counter(labels)
            top = max(counts.values())  # ties: a prediction of any of the top labels counts
            match = float(counts.get(prediction, 0) == top)
        reward = record.feedback
        correct = record.accuracy
        rows.append({"step": record.step, "prediction": prediction, "answer": record.answer,
                     "reward": math.nan if reward is None else float(reward),
                     "correct": math.nan if correct is None else float(correct),
                     "context_size": len(context),
                     "context_positive_share": float(np.mean(context_rewards)) if context_rewards else math.nan,
                     "frequency_match": match, "positives_available": positives})
        shown.append(record.answer if icl else prediction)
        rewards.append(reward)
        positives += int(reward == 1)
    for row, failure in zip(rows, step_failures(state.train, labels_of(state))):
        row.update(history_frequency_match=failure["history_frequency_match"],
                   knowing_doing_mismatch=failure["knowing_doing_mismatch"])
    return pd.DataFrame(rows, columns=STEP_COLUMNS)


MIN_WINDOW = 5  # steps: over fewer, entropy and frequency bias jump between a handful of values


def default_window(steps: int) -> int:
    """About 25 windows a run, each of at least ``MIN_WINDOW`` steps (a run shorter than that is
    one window of all its steps)."""
    return max(MIN_WINDOW, int(round(steps / 25)))


def window_note(window: int, steps: int) -> str:
    """What a chart of windows of ``window`` steps says in its title (``steps``: its longest
    run's): "windows of 8 steps", or, where that run is shorter than ``MIN_WINDOW`` steps and so
    one window, that each run is one window and why."""
    if steps <= window and steps < MIN_WINDOW:
        return f"one window a run: runs of under {MIN_WINDOW} steps are too short for windows of {MIN_WINDOW}"
    return f"windows of {window} steps"


def _entropy(predictions: Sequence[Optional[str]], num_labels: int) -> tuple[float, float, float]:
    counts = np.array(list(Counter(p for p in predictions if p is not None).values()), dtype=float)
    if not counts.size:
        return math.nan, math.nan, math.nan
    # scipy.stats.entropy(counts, base=2)'s arithmetic, without its per-call overhead (a study has
    # thousands of windows)
    bits = float(np.sum(special.entr(counts / np.sum(counts))) / np.log(2))
    norm = bits / math.log2(num_labels) if num_labels > 1 else math.nan
    coverage = counts.size / num_labels if num_labels else math.nan
    return bits, norm, coverage


def window_table(state: CheckedRun, window: Optional[int] = None, steps: Optional[pd.DataFrame] = None) -> pd.DataFrame:
    """One row per window of ``window`` training steps (default: ``default_window``)."""
    steps = step_table(state) if steps is None else steps
    if steps.empty:
        return pd.DataFrame(columns=WINDOW_COLUMNS)
    window = window or default_window(len(steps))
    num_labels = len(labels_of(state))
    regret = (1 - steps["correct"]).cumsum()
    rows = []
    for start in range(0, len(steps), window):
        part = steps.iloc[start:start + window]
        bits, norm, coverage = _entropy(part["prediction"].tolist(), num_labels)
        end = start + len(part) - 1
        rows.append({"window_start": int(part["step"].iloc[0]), "window_end": int(part["step"].iloc[-1]),
                     "steps": len(part), "reward_rate": part["reward"].mean(), "accuracy": part["correct"].mean(),
                     "entropy_bits": bits, "entropy_norm": norm, "coverage": coverage,
                     "frequency_bias": part["frequency_match"].mean(),
                     "context_positive_share": part["context_positive_share"].mean(),
                     "positives_available": int(part["positives_available"].iloc[-1]),
                     "cumulative_regret": float(regret.iloc[end]),
                     "history_frequency_bias": part["history_frequency_match"].mean(),
                     "knowing_doing_gap": part["knowing_doing_mismatch"].mean()})
    return pd.DataFrame(rows, columns=WINDOW_COLUMNS)


def per_class_table(state: CheckedRun) -> pd.DataFrame:
    """One row per test step and gold label: accuracy and number of test items of that label."""
    answers = state.config.test_set.answers
    rows = []
    for record in state.test:
        predictions = record.predictions
        if len(predictions) != len(answers):
            continue
        frame = pd.DataFrame({"answer": answers, "correct": [p == a for p, a in zip(predictions, answers)]})
        for label, group in frame.groupby("answer", sort=True):
            rows.append({"step": record.step, "gold_label": label, "accuracy": float(group["correct"].mean()),
                         "n": len(group)})
    return pd.DataFrame(rows, columns=["step", "gold_label", "accuracy", "n"])


def run_identity(state: CheckedRun, root: Path) -> dict[str, Any]:
    """run_id, model, task, method and label of a run, from its config.json: as the results
    table names it (``icrl.analysis.runs``: a learner's label stands in the model's place)."""
    row = run_row(state, Path(root), DEFAULT_EXPLORATIVE_P_KEEP)
    return {"run_id": row["run_id"], "model": row["model"], "task": row["task"], "method": row["method"],
            "label": run_label(row), "seed": row["seed"]}


def load_states(data_dir: Union[str, Path], run_dirs: Optional[Iterable[Union[str, Path]]] = None) -> list[CheckedRun]:
    """The runs under ``data_dir`` (only those in ``run_dirs`` when given), each checked as a
    resume checks it (``icrl.run.readback``: DamagedRecords in one line where a resume refuses)."""
    root = Path(data_dir)
    if not root.is_dir():
        raise UsageError(f"{str(root)!r} is not a directory: pass the data folder that holds the runs")
    keep = None if run_dirs is None else {Path(d).resolve() for d in run_dirs}
    return [read_run(d) for d in find_runs(root) if keep is None or d.resolve() in keep]


def failures_table(state: CheckedRun) -> dict[str, float]:
    """The run's failure metrics (icrl.analysis.failures), and its training steps."""
    return {"steps": len(state.train), **run_failures(state.train, labels_of(state))}


def diagnostics(data_dir: Union[str, Path], window: Optional[int] = None,
                run_dirs: Optional[Iterable[Union[str, Path]]] = None,
                ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(windows of every ICRL run, per-class test accuracy of every run, failure metrics of every
    ICRL run) under ``data_dir`` (only the runs in ``run_dirs`` when given, e.g.
    ``Results(...).runs["run_dir"]`` after filters)."""
    root = Path(data_dir)
    windows, classes, failures = [], [], []
    for state in load_states(root, run_dirs):
        ident = run_identity(state, root)
        if state.mode == "icrl" and state.train:
            frame = window_table(state, window)
            windows.append(frame.assign(**ident)[list(ident) + WINDOW_COLUMNS])
            failures.append({**ident, **failures_table(state)})
        per_class = per_class_table(state)
        if not per_class.empty:
            classes.append(per_class.assign(**ident)[list(ident) + list(per_class.columns)])
    ident_cols = ["run_id", "model", "task", "method", "label", "seed"]
    w = pd.concat(windows, ignore_index=True) if windows else pd.DataFrame(columns=ident_cols + WINDOW_COLUMNS)
    c = (pd.concat(classes, ignore_index=True) if classes
         else pd.DataFrame(columns=ident_cols + ["step", "gold_label", "accuracy", "n"]))
    f = pd.DataFrame(failures, columns=ident_cols + ["steps"] + FAILURE_COLUMNS)
    return w, c, f


def draw_diagnostics(windows: pd.DataFrame, path: Path) -> Optional[Path]:
    """The degeneration figure: per model and task a row of PANELS, one line per run."""
    if windows.empty:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    groups = list(windows.groupby(["model", "task"], sort=True))
    fig, axes = plt.subplots(len(groups), len(PANELS), figsize=(4.2 * len(PANELS), 3.2 * len(groups)),
                             squeeze=False)
    for row, ((model, task), group) in enumerate(groups):
        for col, (metric, title) in enumerate(PANELS):
            ax = axes[row][col]
            for _, run in group.groupby("run_id", sort=True):
                name = run["label"].iloc[0] + (f" seed {run['seed'].iloc[0]}" if group["seed"].nunique() > 1 else "")
                ax.plot(run["window_end"], run[metric], marker="o" if len(run) < 30 else None, ms=3, label=name)
            ax.set_title(f"{model} / {task}\n{title}" if col == 0 else title, fontsize=9)
            ax.set_xlabel("training step")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))  # steps: never 2.5
            if metric in ("reward_rate", "entropy_norm", "frequency_bias", "history_frequency_bias"):
                ax.set_ylim(-0.03, 1.03)
        axes[row][0].legend(fontsize=7)
    note = window_note(int(windows["steps"].max()), int(windows.groupby("run_id")["steps"].sum().max()))
    fig.suptitle(f"Degeneration diagnostics ({note}): falling reward and "
                 f"entropy with rising frequency bias mean the model copies its context", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _write_csv(frame: pd.DataFrame, f: IO[str]) -> None:
    frame.to_csv(f, index=False)


def write_diagnostics(data_dir: Union[str, Path], out_dir: Union[str, Path], window: Optional[int] = None,
                      run_dirs: Optional[Iterable[Union[str, Path]]] = None) -> list[Path]:
    """diagnostics.csv, diagnostics_per_class.csv and diagnostics.png for every run under
    ``data_dir`` (or those in ``run_dirs``), written into ``out_dir``; returns the paths
    written (no figure without an ICRL run)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    windows, classes, failures = diagnostics(data_dir, window, run_dirs)
    written = []
    for frame, name in ((windows, DIAGNOSTICS_CSV), (classes, PER_CLASS_CSV), (failures, FAILURES_CSV)):
        write_atomic(out / name, partial(_write_csv, frame), newline="")
        written.append(out / name)
    figure = draw_diagnostics(windows, out / DIAGNOSTICS_PNG)
    return written + ([figure] if figure else [])
