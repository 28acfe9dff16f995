"""One results loader for many runs (pandas): the plotting and token-counting tools read runs here.

    from icrl.results import Results
    res = Results("data", filters=["task=banking77"])   # every run under data/, filtered
    res.runs        # one row per run: its arguments, derived method, results.json, token counts
    res.train()     # one row per training step of every run (run_id, step, accuracy, ...)
    res.test()      # one row per test step of every run (run_id, step, accuracy, per-class accuracy,
                    # predictions)
    res.predictions()  # one row per test example of every test step, with its gold answer
    res.aggregate()    # one row per configuration: mean, std and n over seeds of finished runs

Reads only the records (config.json, results.json, train.jsonl, test.jsonl and, when the
token counter ran, token_counts.json); never loads a model.

Columns of ``runs`` (index ``run_id``, the run directory relative to the data directory):
the identity arguments under short names (``model``, ``task``, ``strategy``, ``p_keep``,
``max_context_examples`` (resolved), ``icrl``, ``omit_feedback``, ``flip_feedback``,
``flip_prob``, ``max_contexts``, ``sampling_method``, ``temperature``, ``train_k``,
``test_every``, ``test_k``, ``exemplars_per_label``, ``seed``, ``training_seed``,
``test_seed``, ``max_model_len``), derived ones (``mode``, ``method``, ``label``,
``task_base``, ``unsemantic``, ``strategy_base``, ``strategy_filter``, ``flip``,
``config_key``), the summary of
results.json (``finished``: every planned step on disk and the records consistent with
config.json, checked by ``records.inspect_run``, not read from results.json; ``damage``: what
is wrong with a run's records, else None; ``steps``, ``total_steps``, ``final_test_accuracy``,
``best_test_accuracy``, ``best_test_step``, ``regret``, ``train_accuracy``,
``mean_step_time_s``, ``total_time_s``) and token counts (``prompt_tokens``,
``uncached_tokens``, ``tokenizer``; NaN until run_count_tokens.py has counted the run), and
``num_labels`` (chance accuracy is ``1 / num_labels``), ``num_test`` (test examples) and
``test_set`` (``test_set_name``, from the test example ids: runs on the same one compare).
Arguments that do not apply to a run are NaN (``max_contexts`` and ``sampling_method``
outside the approximate strategies, ``flip_prob`` without flipping), so runs that differ
only in an unused argument group together.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from pathlib import Path
from typing import Iterable, Optional, Sequence

import numpy as np
import pandas as pd

from . import config
from .errors import UsageError
from .records import CONFIG, RESULTS, TEST, TRAIN, RunState, find_runs, inspect_run, read_json

TOKEN_COUNTS_JSON = "token_counts.json"
TOKEN_COUNTS_CSV = "token_counts.csv"

# config.json "args" name -> column name (the fields with a "column" role, in column order)
ARG_COLUMNS = dict(config.RESULT_COLUMNS)
SEED_COLUMNS = ("seed", "training_seed", "test_seed")
RESULT_COLUMNS = ("finished", "steps", "total_steps", "final_test_accuracy", "best_test_accuracy",
                  "best_test_step", "regret", "train_accuracy", "mean_step_time_s", "total_time_s")
# What defines a configuration apart from its seeds, with task, strategy and flipping split
# into their parts so that an ablation can vary one part and hold the others.
CONFIG_COLUMNS = ("model", "task_base", "unsemantic", "strategy_base", "strategy_filter", "p_keep",
                  "max_context_examples", "icrl", "omit_feedback", "flip", "max_contexts",
                  "sampling_method", "temperature", "exemplars_per_label", "train_k", "test_every",
                  "test_k", "max_model_len", "mode")

INTEGER_COLUMNS = ("max_context_examples", "max_contexts", "exemplars_per_label", "seed", "training_seed",
                   "test_seed", "steps", "total_steps", "best_test_step", "regret", "prompt_tokens",
                   "uncached_tokens")
# The paper's methods (Monea et al. 2024), in legend order.
METHODS = ("naive", "naive+", "explorative", "approximate")
BASELINES = ("zero-shot", "ICL")
DEFAULT_EXPLORATIVE_P_KEEP = 0.1


def method_of(mode: str, strategy: str, p_keep: float, explorative_p_keep: float = DEFAULT_EXPLORATIVE_P_KEEP) -> str:
    """The paper's name for a run's method, or "" when it is none of them.

    naive: random_biased_end at p_keep 1 (a window of the most recent episodes);
    naive+: random_biased_end_only_positive at p_keep 1; explorative (stochastic) ICRL:
    random_unbiased_only_positive at ``explorative_p_keep`` (0.1 in the paper);
    approximate: approximate_only_positive; zero-shot; ICL (supervised, gold labels).
    """
    if mode == "zero_shot":
        return "zero-shot"
    if mode == "icl":
        return "ICL"
    if strategy == "random_biased_end" and p_keep == 1:
        return "naive"
    if strategy == "random_biased_end_only_positive" and p_keep == 1:
        return "naive+"
    if strategy == "random_unbiased_only_positive" and math.isclose(p_keep, explorative_p_keep):
        return "explorative"
    if strategy == "approximate_only_positive":
        return "approximate"
    return ""


def split_strategy(strategy: str) -> tuple[str, str]:
    """("random_unbiased", "_only_positive") from "random_unbiased_only_positive"."""
    for suffix in ("_only_positive", "_only_negative"):
        if strategy.endswith(suffix):
            return strategy[: -len(suffix)], suffix
    return strategy, ""


def run_label(row) -> str:
    """A short human name for one run: method (or strategy) and the settings that matter."""
    if row["mode"] == "zero_shot":
        return "zero-shot"
    name = row["method"] or row["strategy"]
    parts = []
    if row["mode"] == "icl" or row["method"] not in ("naive", "naive+"):
        parts.append(f"p={_fmt(row['p_keep'])}")
    if row["strategy_base"] == "approximate":
        parts.append(f"K={_fmt(row['max_contexts'])} {row['sampling_method']}")
    parts.append(f"m={_fmt(row['max_context_examples'])}")
    if row["omit_feedback"]:
        parts.append("no feedback")
    if row["flip_feedback"]:
        parts.append(f"flip {_fmt(row['flip_prob'])}")
    if row["temperature"] != 1.0:
        parts.append(f"T={_fmt(row['temperature'])}")
    if row["exemplars_per_label"]:
        parts.append(f"{row['exemplars_per_label']} exemplars/label")
    return f"{name} ({', '.join(parts)})"


LABEL_DETAILS = (("total_steps", "{} steps"), ("test_set", "test {}"), ("seed", "seed {}"),
                 ("training_seed", "training_seed {}"), ("test_seed", "test_seed {}"))


def distinct_labels(runs: pd.DataFrame, within: Sequence[str] = ("model", "task")) -> pd.Series:
    """Run labels made distinct within ``within``: where runs share a label, what differs among
    them (steps, test set, seeds) is appended, e.g. "explorative (p=0.1, m=16), seed 101"."""
    labels = runs["label"].astype(str).copy()
    keys = [c for c in within if c in runs.columns] + ["label"]
    for _, group in runs.groupby(keys, sort=False, dropna=False):
        if len(group) < 2:
            continue
        differing = [(c, fmt) for c, fmt in LABEL_DETAILS if c in group and group[c].astype(str).nunique() > 1]
        for index, row in group.iterrows():
            extra = ", ".join(fmt.format(_fmt(row[c])) for c, fmt in differing)
            labels[index] = f"{row['label']}, {extra}" if extra else f"{row['label']} ({row['run_id']})"
    return labels


def _fmt(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def model_size(name: str) -> float:
    """Parameters parsed from a model name ("SmolLM2-135M" -> 1.35e8, "8B" -> 8e9); inf if none."""
    sizes = [float(n) * {"m": 1e6, "b": 1e9}[unit.lower()]
             for n, unit in re.findall(r"(?<![A-Za-z0-9.])(\d+(?:\.\d+)?)([mMbB])(?![A-Za-z])", name)]
    return max(sizes) if sizes else math.inf


# -- filters -----------------------------------------------------------------------------------
ALIASES = {k: v for k, v in ARG_COLUMNS.items() if k != v}
ALIASES.update({"context_strategy": "strategy", "method_name": "method"})


def parse_filters(filters: Iterable[str]) -> dict[str, list[str]]:
    """{"column": [values]} from "key=value" strings (a key given twice matches either value)."""
    out: dict[str, list[str]] = {}
    for item in filters or ():
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"bad --filter {item!r}: use key=value, e.g. --filter task=banking77")
        out.setdefault(ALIASES.get(key, key), []).append(value.strip())
    return out


def _matches(series: pd.Series, value: str) -> pd.Series:
    text = value.lower()
    if text in ("none", "nan", ""):
        return series.isna()
    if series.dtype == bool or set(series.dropna().map(type)) <= {bool}:
        if text in ("true", "1", "yes"):
            return series.fillna(False).astype(bool)
        if text in ("false", "0", "no"):
            return ~series.fillna(True).astype(bool)
        return pd.Series(False, index=series.index)
    try:
        number = float(value)
    except ValueError:
        number = None
    if number is not None and pd.api.types.is_numeric_dtype(series):
        return np.isclose(series.astype(float), number, rtol=1e-9, atol=1e-12) & series.notna()
    return series.astype(str) == value


def apply_filters(runs: pd.DataFrame, filters: dict[str, list[str]]) -> pd.DataFrame:
    for key, values in filters.items():
        if key not in runs.columns:
            keys = sorted(set(runs.columns) - {"run_dir", "config_key"})
            raise UsageError(f"unknown --filter key {key!r}; use one of: {', '.join(keys)}")
        mask = pd.Series(False, index=runs.index)
        for value in values:
            mask |= _matches(runs[key], value)
        runs = runs[mask]
    return runs


# -- loading -----------------------------------------------------------------------------------
def _run_row(state: RunState, root: Path, explorative_p_keep: float) -> dict:
    run_dir, config = state.directory, state.config
    args, resolved = config.get("args", {}), config.get("resolved", {})
    row = {"run_id": run_dir.relative_to(root).as_posix(), "run_dir": str(run_dir)}
    for arg, column in ARG_COLUMNS.items():
        row[column] = args.get(arg)
    if resolved.get("max_context_examples") is not None:
        row["max_context_examples"] = resolved["max_context_examples"]
    row["mode"] = resolved.get("mode") or ("zero_shot" if row["max_context_examples"] == 0
                                           else "icrl" if row["icrl"] else "icl")
    row["strategy_base"], row["strategy_filter"] = split_strategy(row["strategy"] or "")
    if row["strategy_base"] != "approximate":
        row["max_contexts"], row["sampling_method"] = None, None
    if not row["flip_feedback"]:
        row["flip_prob"] = None
    row["flip"] = float(row["flip_prob"]) if row["flip_feedback"] else 0.0
    task = row["task"] or ""
    row["unsemantic"] = "_unsemantic" in task
    row["task_base"] = task.replace("_unsemantic", "")
    row["method"] = method_of(row["mode"], row["strategy"], float(row["p_keep"]), explorative_p_keep)
    try:
        results = read_json(run_dir / RESULTS) if (run_dir / RESULTS).is_file() else {}
    except (OSError, ValueError):
        results = {}
    # Finished only when the records check out (see records.inspect_run), whatever results.json says.
    row["finished"] = state.finished
    row["damage"] = state.damage or None
    row["steps"] = state.steps_done  # a zero-shot run has one step, its test
    row["total_steps"] = results.get("total_steps", resolved.get("steps"))
    for key in RESULT_COLUMNS[3:]:
        row[key] = results.get(key)
    row.update(_token_counts(run_dir))
    labels = (config.get("dataset") or {}).get("labels")
    row["num_labels"] = len(labels) if isinstance(labels, list) else None
    ids = (config.get("test_set") or {}).get("ids")
    row["num_test"] = len(ids) if isinstance(ids, list) else None
    row["test_set"] = test_set_name(ids)
    return row


def test_set_name(ids) -> Optional[str]:
    """Which test set a run used, from its recorded test example ids (as a set: the whole split
    in two orders is one test set): "<n> items <hash>". Runs are comparable on the same one."""
    if not isinstance(ids, list):
        return None
    digest = hashlib.sha1(json.dumps(sorted(map(str, ids))).encode()).hexdigest()[:8]
    return f"{len(ids)} items {digest}"


def _token_counts(run_dir: Path) -> dict:
    """prompt_tokens / uncached_tokens / tokenizer from token_counts.json, when it matches the records."""
    path = run_dir / TOKEN_COUNTS_JSON
    empty = {"prompt_tokens": None, "uncached_tokens": None, "tokenizer": None}
    if not path.is_file():
        return empty
    try:
        data = read_json(path)
        if data.get("key", {}).get("records") != records_stamp(run_dir):
            return empty  # counted before the run went on: stale
        summary = data["summary"]
        return {"prompt_tokens": summary["prompt_tokens"], "uncached_tokens": summary["uncached_tokens"],
                "tokenizer": data["key"]["tokenizer"]["name"]}
    except (ValueError, KeyError, TypeError, OSError):
        return empty


def records_stamp(run_dir: Path) -> dict:
    """Size and modification time of the record files: a count is valid while they are unchanged."""
    stamp = {}
    for name in (CONFIG, TRAIN, TEST):
        try:
            st = os.stat(Path(run_dir) / name)
            stamp[name] = [st.st_size, st.st_mtime_ns]
        except FileNotFoundError:
            stamp[name] = None
    return stamp


class Results:
    """Every run under ``data_dir`` (optionally filtered), as pandas frames."""

    def __init__(self, data_dir, filters: Sequence[str] = (), explorative_p_keep: float = DEFAULT_EXPLORATIVE_P_KEEP):
        self.root = Path(data_dir)
        if not self.root.is_dir():
            raise UsageError(f"--data_dir {str(self.root)!r} is not a directory")
        self.explorative_p_keep = explorative_p_keep
        self.notes: list[str] = []
        rows = []
        self._states: dict[str, RunState] = {}
        for run_dir in find_runs(self.root):
            state = inspect_run(run_dir)
            if state.config is None:
                self.notes.append(f"skipped unreadable run {run_dir}: {state.damage}")
                continue
            if state.problems:
                self.notes.append(f"damaged run {run_dir} (not counted as finished): {state.damage}")
            try:
                row = _run_row(state, self.root, explorative_p_keep)
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                self.notes.append(f"skipped unreadable run {run_dir}: {type(exc).__name__}: {exc}")
                continue
            rows.append(row)
            self._states[row["run_id"]] = state
        runs = pd.DataFrame(rows)
        if runs.empty:
            runs = pd.DataFrame(columns=["run_id", "run_dir", *ARG_COLUMNS.values(), "mode", "method"])
        else:
            runs["label"] = runs.apply(run_label, axis=1)
            runs["config_key"] = [ "|".join(map(str, values)) for values in runs[list(CONFIG_COLUMNS)].itertuples(index=False)]
            for column in ("p_keep", "temperature", "flip_prob", "flip"):
                runs[column] = pd.to_numeric(runs[column], errors="coerce")
        runs.index = pd.Index(runs["run_id"].tolist(), dtype=object)
        self.all_runs = runs
        self.runs = apply_filters(self.all_runs, parse_filters(filters))
        self._train: Optional[pd.DataFrame] = None
        self._test: Optional[pd.DataFrame] = None

    def __len__(self) -> int:
        return len(self.runs)

    def train(self) -> pd.DataFrame:
        """Per training step: run_id, step, accuracy (NaN in ICL), feedback, context_size."""
        if self._train is None:
            self._train = self._per_step(TRAIN, ["step", "accuracy", "feedback", "context_size"])
        return self._train

    def test(self) -> pd.DataFrame:
        """Per test step: run_id, step, accuracy, context_size, per_class_accuracy (a dict: gold
        label -> accuracy on the test items of that label) and predictions (a list, in the order
        of the run's test set; see :meth:`predictions` for them next to the gold answers)."""
        if self._test is None:
            frame = self._per_step(TEST, ["step", "accuracy", "context_size"])
            extra = {"per_class_accuracy": [], "predictions": []}
            for run_id in self.runs["run_id"]:
                for record in self._states[run_id].test:
                    extra["per_class_accuracy"].append(record.get("per_class_accuracy"))
                    extra["predictions"].append(record.get("predictions"))
            for column, values in extra.items():
                frame[column] = pd.Series(values, index=frame.index, dtype=object)
            self._test = frame
        return self._test

    def predictions(self, step: Optional[str | int] = None) -> pd.DataFrame:
        """One row per test example of every test step: run_id, step, index (position in the
        test set), example_id, answer (gold), prediction, correct. ``step="last"`` keeps each
        run's last test step only; an integer keeps that step."""
        rows = []
        for run_id in self.runs["run_id"]:
            state = self._states[run_id]
            test_set = (state.config or {}).get("test_set") or {}
            ids, answers = test_set.get("ids") or [], test_set.get("answers") or []
            records = state.test[-1:] if step == "last" else [
                r for r in state.test if step is None or r["step"] == step]
            for record in records:
                for i, prediction in enumerate(record.get("predictions") or []):
                    answer = answers[i] if i < len(answers) else None
                    rows.append({"run_id": run_id, "step": record["step"], "index": i,
                                 "example_id": ids[i] if i < len(ids) else None, "answer": answer,
                                 "prediction": prediction, "correct": prediction == answer})
        return pd.DataFrame(rows, columns=["run_id", "step", "index", "example_id", "answer", "prediction",
                                           "correct"])

    def aggregate(self, finished_only: bool = True) -> pd.DataFrame:
        """One row per configuration (runs equal in everything but ``seed``, ``training_seed``
        and ``test_seed``; see ``CONFIG_COLUMNS``): ``n`` runs, their seeds, and mean, std
        (sample standard deviation, ddof=1; NaN for one run) and n of final test accuracy,
        best test accuracy and regret; ``seeds`` lists seed/training_seed/test_seed of each run. Only finished runs count unless ``finished_only`` is
        False. This is run_draw_plots.py's summary_by_config.csv."""
        runs = self.runs
        if finished_only and len(runs):
            runs = runs[runs["finished"].astype(bool)]
        keys = ["model", "task", "method", "label", "mode", *[c for c in CONFIG_COLUMNS if c not in
                                                               ("model", "mode")]]
        metrics = ("final_test_accuracy", "best_test_accuracy", "regret")
        columns = keys + ["n", "seeds"] + [f"{m}_{s}" for m in metrics for s in ("mean", "std", "n")]
        if runs.empty:
            return pd.DataFrame(columns=columns)
        rows = []
        for _, group in runs.groupby("config_key", sort=False):
            first = group.iloc[0]
            row = {k: first[k] for k in keys}
            row["n"] = len(group)
            row["seeds"] = " ".join("/".join(_fmt(v) for v in seeds)
                                    for seeds in group[list(SEED_COLUMNS)].itertuples(index=False))
            for metric in metrics:
                values = pd.to_numeric(group[metric], errors="coerce").dropna()
                row[f"{metric}_mean"] = values.mean() if len(values) else np.nan
                row[f"{metric}_std"] = values.std(ddof=1) if len(values) > 1 else np.nan
                row[f"{metric}_n"] = len(values)
            rows.append(row)
        order = {m: i for i, m in enumerate(METHODS + ("",) + BASELINES)}
        out = pd.DataFrame(rows, columns=columns)
        out["_order"] = out["method"].map(order)
        return out.sort_values(["model", "task", "_order", "label"]).drop(columns="_order").reset_index(drop=True)

    def _per_step(self, filename: str, fields: list) -> pd.DataFrame:
        """One row per record of ``filename`` in every run, with ``fields`` as floats."""
        frames = []
        for run_id in self.runs["run_id"]:
            state = self._states[run_id]  # the records that check out (see records.inspect_run)
            records = state.train if filename == TRAIN else state.test
            frame = pd.DataFrame({f: [r.get(f) for r in records] for f in fields}, dtype=float)
            frame.insert(0, "run_id", run_id)
            frames.append(frame)
        return _concat(frames, ["run_id", *fields])

    def summary(self) -> pd.DataFrame:
        """One row per run: what it is and how it did (the plots' summary.csv)."""
        columns = ["run_id", "model", "task", "method", "label", "mode", "strategy", "p_keep",
                   "max_context_examples", "max_contexts", "sampling_method", "omit_feedback",
                   "flip_feedback", "flip_prob", "temperature", "exemplars_per_label", "seed",
                   "training_seed", "test_seed", "finished", "steps", "total_steps",
                   "final_test_accuracy", "best_test_accuracy", "best_test_step", "regret",
                   "train_accuracy", "prompt_tokens", "uncached_tokens", "tokenizer"]
        runs = self.runs[[c for c in columns if c in self.runs.columns]].copy()
        for column in INTEGER_COLUMNS:
            if column in runs.columns:
                runs[column] = pd.to_numeric(runs[column], errors="coerce").astype("Int64")
        order = {m: i for i, m in enumerate(METHODS + ("",) + BASELINES)}
        runs["_order"] = runs["method"].map(order)
        return runs.sort_values(["model", "task", "_order", "strategy", "run_id"]).drop(
            columns="_order").reset_index(drop=True)


def _concat(frames: list, columns: list) -> pd.DataFrame:
    if not frames:
        return pd.DataFrame(columns=columns)
    out = pd.concat(frames, ignore_index=True)
    out["step"] = out["step"].astype(int)
    return out
