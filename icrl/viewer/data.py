"""The viewer's data: every run under a folder, from its records, as one compact JSON object.

Strings (prompts, labels) are stored once in a shared table and referred to by index, so runs
of one sweep that share training and test examples cost little more than one; a context is
its episode steps in order, written as base-36 numbers with runs of consecutive steps as
``first-last`` (a naive ICRL sliding window is one range). Only the records are read
(config.json, train.jsonl, test.jsonl); see ``icrl.records`` for their format.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import numpy as np

from ..analysis.diagnostics import load_states, mode_of, run_identity, step_table, window_table
from ..records import RunState

CURVE_WINDOWS = 50  # about this many points per diagnostic curve
DIAGNOSTIC_CURVES = ("reward_rate", "accuracy", "entropy_norm", "coverage", "frequency_bias",
                     "context_positive_share", "cumulative_regret")


class StringTable:
    """Each distinct string once; ``index`` gives its position."""

    def __init__(self):
        self.strings: list[str] = []
        self._index: dict[str, int] = {}

    def index(self, text) -> int:
        text = "" if text is None else str(text)
        found = self._index.get(text)
        if found is None:
            found = self._index[text] = len(self.strings)
            self.strings.append(text)
        return found


def _base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if not n:
            return out


def encode_context(ids) -> str:
    """"0-f,1k" for [0, 1, ..., 15, 56]: base-36 steps, consecutive ones as ranges."""
    parts, i = [], 0
    ids = [int(x) for x in ids]
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        parts.append(_base36(ids[i]) if j == i else f"{_base36(ids[i])}-{_base36(ids[j])}")
        i = j + 1
    return ",".join(parts)


def _number(value, digits: int = 4) -> Optional[float]:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return round(float(value), digits)


def run_payload(state: RunState, root: Path, strings: StringTable) -> dict:
    """One run: identity, train steps, test steps, test set and diagnostic curves."""
    config = state.config or {}
    ident = run_identity(state, root)
    mode = mode_of(state)
    labels = [strings.index(x) for x in ((config.get("dataset") or {}).get("labels") or [])]
    train = state.train
    payload = {
        **{k: ident[k] for k in ("run_id", "model", "task", "method", "label")},
        "seed": ident["seed"], "mode": mode, "labels": labels, "finished": state.finished,
        "damage": state.damage or None,
        "train": {"prompt": [strings.index(r.get("prompt")) for r in train],
                  "answer": [strings.index(r.get("answer")) for r in train],
                  "prediction": [-1 if r.get("prediction") is None else strings.index(r["prediction"]) for r in train],
                  "reward": [-1 if r.get("feedback") is None else int(r["feedback"]) for r in train],
                  "correct": [-1 if r.get("accuracy") is None else int(r["accuracy"]) for r in train],
                  "context": [encode_context(r.get("context") or []) for r in train]},
    }
    test_set = config.get("test_set") or {}
    payload["test_set"] = {"prompt": [strings.index(p) for p in test_set.get("prompts") or []],
                           "answer": [strings.index(a) for a in test_set.get("answers") or []]}
    payload["test"] = [{"step": r["step"], "accuracy": _number(r.get("accuracy")),
                        "context": encode_context(r.get("context") or []),
                        "prediction": [strings.index(p) for p in r.get("predictions") or []]} for r in state.test]
    payload["curves"] = curves(state)
    return payload


def curves(state: RunState) -> dict:
    """Diagnostic curves over windows of steps (empty without training predictions)."""
    if mode_of(state) != "icrl" or not state.train:
        return {}
    steps = step_table(state)
    windows = window_table(state, max(1, math.ceil(len(steps) / CURVE_WINDOWS)), steps=steps)
    out = {"step": [int(x) for x in windows["window_end"]], "window": int(windows["steps"].max())}
    for name in DIAGNOSTIC_CURVES:
        out[name] = [_number(x) for x in windows[name]]
    return out


def viewer_data(data_dir) -> dict:
    """Everything the page shows for the runs under ``data_dir`` (a run folder or any parent)."""
    root = Path(data_dir)
    states = load_states(root)
    base = root if len(states) != 1 or states[0].directory != root else root.parent
    strings = StringTable()
    runs = [run_payload(state, base, strings) for state in states]
    order = {"naive": 0, "naive+": 1, "explorative": 2, "approximate": 3, "": 4, "ICL": 5, "zero-shot": 6}
    runs.sort(key=lambda r: (str(r["model"]), str(r["task"]), order.get(r["method"], 4), r["run_id"]))
    return {"source": str(root), "strings": strings.strings, "runs": runs,
            "steps": int(np.max([max(len(r["train"]["prompt"]), 1) for r in runs])) if runs else 0}
