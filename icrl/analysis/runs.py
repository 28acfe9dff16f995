"""One row per run: its method, label and columns, read from its records; filters on them.

The columns are described in :mod:`icrl.analysis.results`; :func:`run_row` builds one row.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

import numpy as np
import pandas as pd

from .. import config
from .. import config as config_module  # run_row's ``config`` is a run's config.json
from ..errors import UsageError
from ..method import declared_params
from ..method.agents import AGENTS, is_learner, label_of_args
from ..method.strategies import STRATEGIES, split_name
from ..records.summary import summarize
from ..run.readback import CheckedRun
from .token_cache import count_columns
from .verdict import DEFAULT_EXPLORATIVE_P_KEEP, PAPER_METHODS

# config.json "args" name -> column name
# config.json "args" name -> column name (the fields with a "column" role, in column order)
ARG_COLUMNS = dict(config.RESULT_COLUMNS)
SEED_COLUMNS = ("seed", "training_seed", "test_seed")
RESULT_COLUMNS = ("finished", "steps", "total_steps", "final_test_accuracy", "best_test_accuracy",
                  "best_test_step", "regret", "train_accuracy", "mean_step_time_s", "total_time_s")
# What defines a configuration apart from its seeds, with task, strategy and flipping split
# into their parts so that an ablation can vary one part and hold the others.
# The declared parameters beyond the paper with a results column and a label: exploration,
# rewards, the strategies' own (a learner's are in its name, ``label_of_args``).
LABELLED = tuple(d.param for d in declared_params() if d.param.column and d.param.label and d.group != "agent")
CONFIG_COLUMNS = ("model", "task_base", "unsemantic", "strategy_base", "strategy_filter", "p_keep",
                  "max_context_examples", "auto_size", "icrl", "omit_feedback", "flip", "max_contexts",
                  "sampling_method", "temperature", "exemplars_per_label", "train_k", "test_every",
                  "test_k", "max_model_len", "mode", *[p.column for p in LABELLED])

INTEGER_COLUMNS = ("max_context_examples", "max_contexts", "exemplars_per_label", "seed", "training_seed",
                   "test_seed", "steps", "total_steps", "best_test_step", "regret", "prompt_tokens",
                   "uncached_tokens", "processed_tokens")
# The paper's methods (Monea et al. 2024), in legend order.
METHODS = PAPER_METHODS
BASELINES = ("zero-shot", "ICL")


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


def paper_method_of(row: Mapping[str, Any], explorative_p_keep: float = DEFAULT_EXPLORATIVE_P_KEEP) -> str:
    """The method the published figures file a run under, or "" (their rules, lil-lab/icrl
    src/plot/plotting.py: plot_main_results and plot_main_results_with_phi_and_approximate).

    naive: random_biased_end at p_keep 1 and temperature 1.0; naive+:
    random_biased_end_only_positive at p_keep 1 and temperature 2.0; explorative ("Stochastic
    ICRL"): random_unbiased_only_positive at p_keep 0.1 (``explorative_p_keep``) with the
    automatic context size, feedback neither omitted nor flipped, temperature 1.0; approximate:
    approximate_only_positive with 8 contexts sampled uniformly; ICL (the upper bound): any
    supervised run. Zero-shot runs are ours (the published figures take zero-shot from the
    naive run's step 0). Everything else that :func:`method_of` names is another setting of a
    method, drawn only with ``run_draw_plots.py --other_runs``.
    """
    mode, strategy = row["mode"], row["strategy"]
    if mode in ("zero_shot", "icl"):
        return method_of(mode, strategy, 1.0)
    p_keep, temperature = float(row["p_keep"]), float(row["temperature"])
    if strategy == "random_biased_end" and p_keep == 1 and temperature == 1.0:
        return "naive"
    if strategy == "random_biased_end_only_positive" and p_keep == 1 and temperature == 2.0:
        return "naive+"
    if (strategy == "random_unbiased_only_positive" and math.isclose(p_keep, explorative_p_keep)
            and row["auto_size"] and not row["omit_feedback"] and not row["flip_feedback"] and temperature == 1.0):
        return "explorative"
    if strategy == "approximate_only_positive" and row["max_contexts"] == 8 and row["sampling_method"] == "uniform":
        return "approximate"
    return ""


def run_label(row: Mapping[str, Any]) -> str:
    """A short human name for one run: method (or strategy) and the settings that matter."""
    if row["mode"] == "zero_shot":
        return "zero-shot"
    if isinstance(row.get("learner"), str):  # NaN for an LLM's run beside a learner's in one table
        return row["model"]  # e.g. "LinUCB (tfidf)"
    name = row["method"] or row["strategy"]
    parts = []
    strategy = STRATEGIES.get(row["strategy"]).cls if row["strategy"] in STRATEGIES else None
    reads = strategy.reads if strategy is not None else ("max_context_examples", "context_p_keep")
    if (row["mode"] == "icl" or row["method"] not in ("naive", "naive+")) and "context_p_keep" in reads:
        parts.append(f"p={_fmt(row['p_keep'])}")
    if strategy is not None:
        parts += strategy.label_parts(row)  # e.g. approximate: K=8 uniform
    if "max_context_examples" in reads:  # not for a summary, whose episodes are its own setting
        parts.append(f"m={_fmt(row['max_context_examples'])}")
    if row["omit_feedback"]:
        parts.append("no feedback")
    if row["flip_feedback"]:
        parts.append(f"flip {_fmt(row['flip_prob'])}")
    if row["temperature"] != 1.0:
        parts.append(f"T={_fmt(row['temperature'])}")
    if row["exemplars_per_label"]:
        parts.append(f"{row['exemplars_per_label']} exemplars/label")
    parts += beyond_the_paper(row)
    return f"{name} ({', '.join(parts)})" if parts else name


def beyond_the_paper(row: Mapping[str, Any]) -> list[str]:
    """The label parts of the declared settings beyond the paper a run uses (our exploration
    flags, a reward other than exact match, a strategy's own parameters); empty for none."""
    parts = []
    for param in LABELLED:
        value: Any = row.get(param.column) if param.column else None  # LABELLED: parameters with a column
        part = param.label_of(value.item() if hasattr(value, "item") else value)
        if part:
            parts.append(part)
    return parts


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


def _fmt(value: object) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


NOT_THE_MODEL = ("fake",)  # the backend whose answers are not the named model's


def model_label(model: str, backend: Optional[str]) -> str:
    """The model as tables, verdicts, the report and figures name it: with the backend when that
    is not the model ("smollm2-135m (fake)"), the model's name alone otherwise."""
    if backend in NOT_THE_MODEL and model != backend:
        return f"{model} ({backend})"
    return model


def model_params(name: str) -> float:
    """The size the verdicts' advice goes by: ``model_size``, but NaN (no model, as for a learner:
    no advice about a larger model) where the backend is not the model ("smollm2-135m (fake)")."""
    if name.endswith(tuple(f" ({backend})" for backend in NOT_THE_MODEL)):
        return math.nan
    return model_size(name)


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
def run_row(state: CheckedRun, root: Path, explorative_p_keep: float) -> dict[str, Any]:
    """The run's row: a value (of its column's type) per column (the readers skip a run that
    cannot be read)."""
    run_dir, config = state.directory, state.config
    # an argument a record lacks had its default (added after the run was recorded)
    args, resolved = {**config_module.SPEC_DEFAULTS, **config.args}, config.resolved
    row: dict[str, Any] = {"run_id": run_dir.relative_to(root).as_posix(), "run_dir": str(run_dir)}
    for arg, column in ARG_COLUMNS.items():
        row[column] = args.get(arg)
    row["auto_size"] = row["max_context_examples"] is None  # the size the search found, not given
    if resolved.max_context_examples is not None:
        row["max_context_examples"] = resolved.max_context_examples
    row["mode"] = resolved.mode
    row["strategy_base"], row["strategy_filter"] = split_name(row["strategy"] or "")
    entry = STRATEGIES.get(row["strategy"]) if row["strategy"] in STRATEGIES else None
    row["family"] = entry.family if entry else None
    uses = entry.cls.uses if entry else ()
    if "max_contexts" not in uses:  # a setting the run's strategy does not read
        row["max_contexts"] = None
    if "approximate_context_sampling_method" not in uses:
        row["sampling_method"] = None
    if not row["flip_feedback"]:
        row["flip_prob"] = None
    row["flip"] = float(row["flip_prob"]) if row["flip_feedback"] else 0.0
    task = row["task"] or ""
    row["unsemantic"] = "_unsemantic" in task
    row["task_base"] = task.replace("_unsemantic", "")
    # A learner that is not an LLM (icrl.method.agents): its label stands in the model's column.
    row["agent"] = args.get("agent", "llm")
    row["learner"] = AGENTS.get(row["agent"]).title if is_learner(row["agent"]) and row["agent"] in AGENTS else None
    if row["learner"]:
        row["model"] = label_of_args(args)
    else:  # a backend that is not the model says so wherever the model is named
        row["model_id"] = row["model"]  # the name as given: a tokenizer's, for the token counts
        row["model"] = model_label(row["model"], args.get("backend"))
    row["method"] = method_of(row["mode"], row["strategy"], float(row["p_keep"]), explorative_p_keep)
    row["paper_method"] = paper_method_of(row, explorative_p_keep)
    if beyond_the_paper(row):  # our exploration flags or reward: none of the paper's methods
        row["method"] = row["paper_method"] = ""
    # What the records say, checked as a resume checks them (icrl.run.readback), whatever results.json says.
    results = summarize(state.train, state.test, resolved.steps, resolved.mode)
    row["finished"] = state.finished
    row["damage"] = state.damage or None
    row["steps"] = state.steps_done  # a zero-shot run has one step, its test
    row["total_steps"] = resolved.steps
    for key in RESULT_COLUMNS[3:]:
        row[key] = results.get(key)
    row.update(count_columns(run_dir))
    row["num_labels"] = len(config.labels)
    row["num_test"] = len(config.test_set.ids)
    row["test_set"] = test_set_name(config.test_set.ids)
    return row


def test_set_name(ids: list[int]) -> Optional[str]:
    """Which test set a run used, from its recorded test example ids (as a set: the whole split
    in two orders is one test set): "<n> items <hash>". Runs are comparable on the same one."""
    if not isinstance(ids, list):
        return None
    digest = hashlib.sha1(json.dumps(sorted(map(str, ids))).encode()).hexdigest()[:8]
    return f"{len(ids)} items {digest}"

