"""The viewer's data: every run under a folder, from its records, as one compact JSON object.

Strings (prompts, labels) are stored once in a shared table and referred to by index, so runs
of one sweep that share training and test examples cost little more than one; a context is
its episode steps as gaps in a 64-character variable-length code, runs of consecutive steps
as one token (see ``encode_context``: a naive ICRL sliding window is a few characters). Only the records are read
(config.json, train.jsonl, test.jsonl); see ``icrl.records`` for their format.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable, List, Optional, Sequence, Union

import numpy as np

from ..analysis.diagnostics import (default_window, labels_of, load_states, run_identity, step_table,
                                   window_note, window_table)
from ..analysis.failures import run_failures
from ..records.schema import TrainLine
from ..run.readback import CheckedRun
from ..records.typed import fits

DIAGNOSTIC_CURVES = ("reward_rate", "accuracy", "entropy_norm", "coverage", "frequency_bias",
                     "context_positive_share", "cumulative_regret", "history_frequency_bias")


class StringTable:
    """Each distinct string once; ``index`` gives its position."""

    def __init__(self) -> None:
        self.strings: list[str] = []
        self._index: dict[str, int] = {}

    def index(self, text: Optional[str]) -> int:
        text = "" if text is None else str(text)
        found = self._index.get(text)
        if found is None:
            found = self._index[text] = len(self.strings)
            self.strings.append(text)
        return found


DIGITS = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_."  # 64, safe in JSON and HTML


def _varint(value: int) -> str:
    """``value`` >= 0 in 5-bit digits, lowest first; a digit of 32 or more means more follow."""
    out = ""
    while value >= 32:
        out += DIGITS[32 + (value & 31)]
        value >>= 5
    return out + DIGITS[value]


def encode_context(ids: Iterable[int]) -> str:
    """A context's episode steps as a short string (decoded by ``decode_context`` and the page).

    Ascending steps (every strategy's context is in chronological order) are gaps from the
    previous step (the first from -1), with a run of consecutive steps as 0 and its length:
    a naive ICRL window of any size is a few characters. Any other order is "~" and the
    zigzag-coded differences.
    """
    ids = [int(x) for x in ids]
    previous, out = -1, []
    if any(b <= a for a, b in zip(ids, ids[1:])) or (ids and ids[0] < 0):
        for x in ids:
            d = x - previous
            out.append(_varint(2 * d if d >= 0 else -2 * d - 1))
            previous = x
        return "~" + "".join(out)
    i = 0
    while i < len(ids):
        out.append(_varint(ids[i] - previous))
        previous, j = ids[i], i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        if j - i >= 2:
            out.append(_varint(0) + _varint(j - i))
            previous, i = ids[j], j
        i += 1
    return "".join(out)


def decode_context(text: str) -> list[int]:
    """The inverse of ``encode_context``."""
    zigzag = text.startswith("~")
    values, value, shift = [], 0, 0
    for char in text[1:] if zigzag else text:
        digit = DIGITS.index(char)
        value |= (digit & 31) << shift
        if digit >= 32:
            shift += 5
            continue
        values.append(value)
        value, shift = 0, 0
    ids, previous, k = [], -1, 0
    while k < len(values):
        v = values[k]
        if zigzag:
            previous += v // 2 if v % 2 == 0 else -(v + 1) // 2
            ids.append(previous)
        elif v == 0:
            ids.extend(range(previous + 1, previous + 1 + values[k + 1]))
            previous += values[k + 1]
            k += 1
        else:
            previous += v
            ids.append(previous)
        k += 1
    return ids


def _number(value: Optional[float], digits: int = 4) -> Optional[float]:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return round(float(value), digits)


def run_payload(state: CheckedRun, root: Path, strings: StringTable) -> dict[str, Any]:
    """One run: identity, train steps, test steps, test set and diagnostic curves."""
    config = state.config
    ident = run_identity(state, root)
    mode = state.mode
    labels = [strings.index(x) for x in config.labels]
    train = state.train
    payload = {
        **{k: ident[k] for k in ("run_id", "model", "task", "method", "label")},
        "seed": ident["seed"], "mode": mode, "labels": labels, "finished": state.finished,
        "damage": state.damage or None,
        "train": {"prompt": [strings.index(r.prompt) for r in train],
                  "answer": [strings.index(r.answer) for r in train],
                  "prediction": [-1 if r.prediction is None else strings.index(r.prediction) for r in train],
                  # the shown feedback: 0 or 1, 0.5 for a partly right answer (--reward coarse_credit)
                  "reward": [-1 if r.feedback is None else _feedback(r.feedback) for r in train],
                  "correct": [-1 if r.accuracy is None else int(r.accuracy) for r in train],
                  "context": [encode_context(r.context) for r in train],
                  **beyond_paper_fields(train, strings), **shown_preambles(state, strings)},
    }
    payload["test_set"] = {"prompt": [strings.index(p) for p in config.test_set.prompts],
                           "answer": [strings.index(a) for a in config.test_set.answers]}
    payload["test"] = [{"step": r.step, "accuracy": _number(r.accuracy),
                        "context": encode_context(r.context or []),
                        # a query-aware strategy (knn_*): each test input's own context
                        **({"contexts": [encode_context(c) for c in r.contexts]} if r.contexts else {}),
                        "prediction": [strings.index(p) for p in r.predictions],
                        # --reasoning: what the model wrote before each test answer
                        **({"reasoning": [strings.index(x) for x in r.reasoning]} if r.reasoning else {})}
                       for r in state.test]
    payload["curves"] = curves(state)
    payload["failures"] = ({k: _number(v) for k, v in run_failures(train, labels_of(state)).items()}
                           if mode == "icrl" and train else {})
    return payload


def beyond_paper_fields(train: Sequence[TrainLine], strings: StringTable) -> dict[str, list[Any]]:
    """The training fields of the methods beyond the paper, where a run has them (index -1 or
    None for a step without): the reasoning before each answer and its tokens (--reasoning),
    the answer of each declared model call under its kind (``icrl.run.assemble.all_calls``; a
    written text by its index in ``strings``, a label as it is: the guide a strategy wrote, a
    reward's verdict), and the episodes curated retrieval stopped retrieving at a step."""
    from ..run.assemble import all_calls

    out: dict[str, list[Any]] = {}
    if any(r.reasoning is not None for r in train):
        out["reasoning"] = [-1 if r.reasoning is None else strings.index(r.reasoning) for r in train]
        out["reasoning_tokens"] = [r.reasoning_tokens for r in train]
    for call in all_calls():
        answers = [r.answers.get(call.field) for r in train] if call.field else []
        if any(a is not None for a in answers):
            out[call.kind] = ([-1 if a is None else strings.index(a) for a in answers] if call.generates
                              else answers)
    if any(_pruned(r) for r in train):
        out["pruned"] = [encode_context(_pruned(r)) for r in train]
    return out


def shown_preambles(state: CheckedRun, strings: StringTable) -> dict[str, list[list[int]]]:
    """``preamble``: the text the run's strategy put in each step's prompt before the episodes
    (a summary: ``icrl.analysis.counting.preambles``, rebuilt exactly from the records), as
    ``encode_preambles`` writes it; {} for a strategy without one, and for one whose text is the
    answer of its own declared call (a reflection's guide: shown as that call's answer)."""
    from ..analysis.counting import episodes_of, preambles
    from ..method.strategies import STRATEGIES

    name = state.config.spec.context_strategy_name
    if not state.train or name is None or name not in STRATEGIES or STRATEGIES.get(name).cls.calls:
        return {}
    texts = preambles(state.config, state.train, episodes_of(state.train))
    return {"preamble": encode_preambles(texts, strings)} if texts is not None else {}


def encode_preambles(texts: Iterable[str], strings: StringTable) -> list[list[int]]:
    """Each step's text as the lines that differ from the step before's: [its number of lines,
    then (line number, the line's index in ``strings``) for each line changed]; a summary changes
    a line or two a step. Decoded by ``decode_preambles`` and the page."""
    out: list[list[int]] = []
    before: list[str] = []
    for text in texts:
        lines = text.split("\n") if text else []
        changed = [(i, strings.index(line)) for i, line in enumerate(lines) if i >= len(before) or before[i] != line]
        out.append([len(lines), *[x for pair in changed for x in pair]])
        before = lines
    return out


def decode_preambles(encoded: Iterable[Sequence[int]], strings: Sequence[str]) -> list[str]:
    """The inverse of ``encode_preambles``."""
    out: list[str] = []
    lines: list[str] = []
    for step in encoded:
        lines = lines[:step[0]] + [""] * (step[0] - len(lines))
        for i, index in zip(step[1::2], step[2::2]):
            lines[i] = strings[index]
        out.append("\n".join(lines))
    return out


def _pruned(line: TrainLine) -> list[int]:
    """The episodes curated retrieval stopped retrieving at a training step (its metrics, which
    the schema leaves open: anything but a list of steps is none)."""
    pruned = line.metrics.get("pruned")
    return pruned if isinstance(pruned, list) and fits(pruned, List[int]) else []


def _feedback(value: float) -> float:
    value = float(value)
    return int(value) if value.is_integer() else value


def curves(state: CheckedRun) -> dict[str, Any]:
    """Diagnostic curves over windows of steps (empty without training predictions): the
    windows of diagnostics.csv and diagnostics.png (``default_window``), so that the viewer and
    the figure show the same points for the same run."""
    if state.mode != "icrl" or not state.train:
        return {}
    steps = step_table(state)
    windows = window_table(state, default_window(len(steps)), steps=steps)
    window = int(windows["steps"].max())
    out = {"step": [int(x) for x in windows["window_end"]], "window": window,
           "window_note": window_note(window, len(steps))}
    for name in DIAGNOSTIC_CURVES:
        out[name] = [_number(x) for x in windows[name]]
    return out


def viewer_data(data_dir: Union[str, Path]) -> dict[str, Any]:
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
