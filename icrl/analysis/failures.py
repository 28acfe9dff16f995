"""How a run fails, from its training records alone (our definitions, after Schmied et al. 2025,
arXiv 2504.16078, and "When Greedy Wins", arXiv 2509.24923).

Per training step (``step_failures``):

- ``history_frequency_match``: 1 when the prediction is the label predicted most often in the
  run's earlier training steps (any of them on a tie), else 0; NaN at step 0 and for steps
  without a prediction (supervised ICL). The context's own frequency bias is
  :mod:`icrl.analysis.diagnostics`' ``frequency_match``.
- ``reasoning_label``: with --reasoning, the label the step's reasoning concludes with
  (``concluded_label``), or None when it names none; ``knowing_doing_mismatch``: 1 when that
  label is not the prediction, 0 when it is, NaN without one.

Per run (``run_failures``):

- ``greediness``: the share of the task's labels never predicted in training (explored labels
  count as predicted: they were tried); ``never_predicted``: how many.
- ``history_frequency_bias``: the mean of ``history_frequency_match``.
- ``knowing_doing_gap``: among the training steps whose reasoning names a label, the share whose
  last-named label is not the answer given; ``reasoning_steps``: steps with reasoning;
  ``reasoning_names_label``: the share of those that name a label.
- ``collapse_step``: the first step of the first stretch of ``collapse_window`` consecutive
  training steps that all predict one label with a mean reward below 0.5 (the step's reward:
  ``TrainLine.earned``, ``reward`` when recorded apart, else the accuracy); NaN when there is none.
  ``collapse_window`` = max(5, round(steps / 20)). ``early_collapse``: the collapse starts in
  the first quarter of the run's training steps.

Finding a label in free text: text and labels are lower-cased, ``_`` and ``-`` read as spaces,
runs of spaces as one; a label is named where it stands as whole words (no letter or digit
touching it). The label a text concludes with is the one named last (the match that ends
last; of matches ending at the same place, the longer label).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any, Iterable, Optional, Sequence

import numpy as np

from ..records.schema import TrainLine

FAILURE_COLUMNS = ["greediness", "never_predicted", "history_frequency_bias", "reasoning_steps",
                   "reasoning_names_label", "knowing_doing_gap", "collapse_window", "collapse_step", "early_collapse"]
COLLAPSE_REWARD = 0.5


def _normal(text: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"[_\-]", " ", text.lower())).strip()


def label_mentions(text: str, labels: Sequence[str]) -> list[tuple[int, int, str]]:
    """(start, end, label) of every place ``text`` names one of ``labels`` (see the module)."""
    body = " " + _normal(text) + " "
    found = []
    for label in labels:
        needle = _normal(label)
        if not needle:
            continue
        for m in re.finditer(r"(?<![a-z0-9])" + re.escape(needle) + r"(?![a-z0-9])", body):
            found.append((m.start() - 1, m.end() - 1, label))
    return sorted(found)


def concluded_label(text: Optional[str], labels: Sequence[str]) -> Optional[str]:
    """The label ``text`` names last (None when it names none)."""
    if not text:
        return None
    mentions = label_mentions(text, labels)
    if not mentions:
        return None
    return max(mentions, key=lambda m: (m[1], m[1] - m[0]))[2]


def step_failures(train: Sequence[TrainLine], labels: Sequence[str]) -> list[dict[str, Any]]:
    """Per training line: history_frequency_match, reasoning_label, knowing_doing_mismatch."""
    counts: Counter[str] = Counter()
    rows = []
    for record in train:
        prediction = record.prediction
        match = math.nan
        if prediction is not None and counts:
            top = max(counts.values())
            match = float(counts.get(prediction, 0) == top)
        said = concluded_label(record.reasoning, labels) if record.reasoning is not None else None
        mismatch = math.nan if said is None or prediction is None else float(said != prediction)
        rows.append({"history_frequency_match": match, "reasoning_label": said, "knowing_doing_mismatch": mismatch})
        if prediction is not None:
            counts[prediction] += 1
    return rows


def _mean(values: Iterable[float]) -> float:
    values = [v for v in values if not (isinstance(v, float) and math.isnan(v))]
    return float(np.mean(values)) if values else math.nan


def collapse(train: Sequence[TrainLine]) -> tuple[int, float]:
    """(window, first step of the first collapsed stretch or NaN): see the module docstring."""
    window = max(5, round(len(train) / 20))
    for end in range(window, len(train) + 1):
        part = train[end - window:end]
        predictions = {r.prediction for r in part}
        if len(predictions) != 1 or None in predictions:
            continue
        rewards = [r.earned for r in part if r.earned is not None]
        if len(rewards) == len(part) and float(np.mean(rewards)) < COLLAPSE_REWARD:
            return window, float(part[0].step)
    return window, math.nan


def run_failures(train: Sequence[TrainLine], labels: Sequence[str]) -> dict[str, float]:
    """The per-run failure metrics of FAILURE_COLUMNS (NaN where they do not apply)."""
    steps = step_failures(train, labels)
    predicted = {r.prediction for r in train if r.prediction is not None}
    reasoned = [s for r, s in zip(train, steps) if r.reasoning is not None]
    named = [s for s in reasoned if s["reasoning_label"] is not None]
    window, start = collapse(train)
    any_prediction = bool(predicted)
    return {
        "greediness": (1 - len(predicted & set(labels)) / len(labels)) if labels and any_prediction else math.nan,
        "never_predicted": len(set(labels) - predicted) if any_prediction else math.nan,
        "history_frequency_bias": _mean([s["history_frequency_match"] for s in steps]),
        "reasoning_steps": len(reasoned),
        "reasoning_names_label": len(named) / len(reasoned) if reasoned else math.nan,
        "knowing_doing_gap": _mean([s["knowing_doing_mismatch"] for s in named]),
        "collapse_window": window,
        "collapse_step": start,
        "early_collapse": (float(start < len(train) / 4) if not math.isnan(start) else 0.0) if any_prediction
        else math.nan,
    }
