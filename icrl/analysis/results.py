"""One results loader for many runs (pandas): the plotting and token-counting tools read runs here.

    from icrl.analysis.results import Results
    res = Results("data", filters=["task=banking77"])   # every run under data/, filtered
    res.runs        # one row per run: its arguments, derived method, its results, token counts
    res.train()     # one row per training step of every run (run_id, step, accuracy, ...)
    res.test()      # one row per test step of every run (run_id, step, accuracy, per-class accuracy,
                    # predictions)
    res.predictions()  # one row per test example of every test step, with its gold answer
    res.aggregate()    # one row per configuration: mean, std and n over seeds of finished runs

Reads only the records (config.json, train.jsonl, test.jsonl and, when the token counter ran,
token_counts.json), each run checked as a resume checks it against its data where the raw
files are at hand (``icrl.run.readback``: a run a resume refuses is skipped with a note); never
loads a model.

Columns of ``runs`` (index ``run_id``, the run directory relative to the data directory):
the identity arguments under short names (``model``, ``task``, ``strategy``, ``p_keep``,
``max_context_examples`` (resolved), ``icrl``, ``omit_feedback``, ``flip_feedback``,
``flip_prob``, ``max_contexts``, ``sampling_method``, ``temperature``, ``train_k``,
``test_every``, ``test_k``, ``exemplars_per_label``, ``seed``, ``training_seed``,
``test_seed``, ``max_model_len``), derived ones (``mode``, ``method``, ``paper_method`` (the
method the published figures file the run under, "" for other settings; see
:func:`icrl.analysis.runs.paper_method_of`), ``auto_size`` (the size was searched), ``label``,
``task_base``, ``unsemantic``, ``strategy_base``, ``strategy_filter``, ``flip``,
``config_key``), the summary of
the records (``finished``: every planned step on disk and nothing a resume would repair,
checked as a resume checks them, ``icrl.run.readback``, never read from results.json;
``damage``: what is wrong with a run's records, else None; ``steps``, ``total_steps``, ``final_test_accuracy``,
``best_test_accuracy``, ``best_test_step``, ``regret``, ``train_accuracy``,
``mean_step_time_s``, ``total_time_s``) and token counts (``processed_tokens``, the paper's figure, ``prompt_tokens``,
``uncached_tokens``, ``tokenizer``; NaN until run_count_tokens.py has counted the run), and
``num_labels`` (chance accuracy is ``1 / num_labels``), ``num_test`` (test examples) and
``test_set`` (``test_set_name``, from the test example ids: runs on the same one compare).
Arguments that do not apply to a run are NaN (``max_contexts`` and ``sampling_method``
outside the approximate strategies, ``flip_prob`` without flipping), so runs that differ
only in an unused argument group together.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

import numpy as np
import pandas as pd

from ..errors import UsageError
from ..records import TEST, TRAIN, find_runs
from ..run.readback import CheckedRun, read_run
from .failures import FAILURE_COLUMNS, run_failures
from .runs import (ARG_COLUMNS, BASELINES, CONFIG_COLUMNS, DEFAULT_EXPLORATIVE_P_KEEP, INTEGER_COLUMNS, METHODS,
                   SEED_COLUMNS, _fmt, apply_filters, parse_filters, run_label, run_row)

if TYPE_CHECKING:
    from .stats import PairedComparison


class Results:
    """Every run under ``data_dir`` (optionally filtered), as pandas frames."""

    def __init__(self, data_dir: Union[str, Path], filters: Sequence[str] = (),
                 explorative_p_keep: float = DEFAULT_EXPLORATIVE_P_KEEP) -> None:
        self.root = Path(data_dir)
        if not self.root.is_dir():
            raise UsageError(f"--data_dir {str(self.root)!r} is not a directory")
        self.explorative_p_keep = explorative_p_keep
        self.notes: list[str] = []
        rows = []
        self._states: dict[str, CheckedRun] = {}
        for run_dir in find_runs(self.root):
            state = read_run(run_dir)  # checked as a resume checks it: DamagedRecords where it refuses
            if state.problems:
                self.notes.append(f"damaged run {run_dir} (not counted as finished): {state.damage}")
            rows.append(run_row(state, self.root, explorative_p_keep))
            self._states[rows[-1]["run_id"]] = state
        runs = pd.DataFrame(rows)
        if runs.empty:
            runs = pd.DataFrame(columns=["run_id", "run_dir", *ARG_COLUMNS.values(), "mode", "method", "paper_method",
                                         "family"])
        else:
            runs["label"] = runs.apply(run_label, axis=1)
            runs["config_key"] = ["|".join(map(str, values))
                                  for values in runs[list(CONFIG_COLUMNS)].itertuples(index=False)]
            for column in ("p_keep", "temperature", "flip_prob", "flip"):
                runs[column] = pd.to_numeric(runs[column], errors="coerce")
        runs.index = pd.Index(runs["run_id"].tolist(), dtype=object)
        self.all_runs = runs
        self.runs = apply_filters(self.all_runs, parse_filters(filters))
        self._train: Optional[pd.DataFrame] = None
        self._test: Optional[pd.DataFrame] = None

    def __len__(self) -> int:
        return len(self.runs)

    def state(self, run_id: str) -> CheckedRun:
        """The records of one run as read (``icrl.run.readback.read_run``), by its id in ``runs.index``."""
        return self._states[run_id]

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
            extra: dict[str, list[Any]] = {"per_class_accuracy": [], "predictions": []}
            for run_id in self.runs["run_id"]:
                for record in self._states[run_id].test:
                    extra["per_class_accuracy"].append(record.per_class_accuracy)
                    extra["predictions"].append(record.predictions)
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
            ids, answers = state.config.test_set.ids, state.config.test_set.answers
            records = state.test[-1:] if step == "last" else [
                r for r in state.test if step is None or r.step == step]
            for record in records:
                for i, prediction in enumerate(record.predictions):
                    answer = answers[i] if i < len(answers) else None
                    rows.append({"run_id": run_id, "step": record.step, "index": i,
                                 "example_id": ids[i] if i < len(ids) else None, "answer": answer,
                                 "prediction": prediction, "correct": prediction == answer})
        return pd.DataFrame(rows, columns=["run_id", "step", "index", "example_id", "answer", "prediction",
                                           "correct"])

    def aggregate(self, finished_only: bool = True) -> pd.DataFrame:
        """One row per configuration (runs equal in everything but ``seed``, ``training_seed``
        and ``test_seed``; see ``CONFIG_COLUMNS``): ``n`` runs, their seeds, and mean, std
        (sample standard deviation, ddof=1; NaN for one run) and n of final test accuracy,
        best test accuracy and regret, with the 95% interval over seeds (``_ci_low``, ``_ci_high``;
        NaN for one run; of accuracies inside [0, 1], ``stats.accuracy_summary``), and
        ``detectable_difference`` (the smallest gain over the mean final accuracy its test set
        detects, 80% power at the 5% level); ``seeds`` lists
        seed/training_seed/test_seed of each run; the means over seeds of the failure metrics
        (``icrl.analysis.failures``; ``early_collapse_mean``: the share of seeds that collapse
        early). Only finished runs count unless ``finished_only`` is False. This is
        run_draw_plots.py's summary_by_config.csv."""
        from .paired import detectable_difference, seed_columns

        runs = self.runs
        if finished_only and len(runs):
            runs = runs[runs["finished"].astype(bool)]
        keys = ["model", "task", "method", "label", "mode", *[c for c in CONFIG_COLUMNS if c not in
                                                               ("model", "mode")]]
        metrics = ("final_test_accuracy", "best_test_accuracy", "regret")
        failing = ("greediness", "history_frequency_bias", "knowing_doing_gap", "early_collapse")
        columns = (keys + ["n", "seeds"]
                   + [f"{m}_{s}" for m in metrics for s in ("mean", "std", "ci_low", "ci_high", "n")]
                   + ["detectable_difference"] + [f"{m}_mean" for m in failing])
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
                row.update({k: v for k, v in seed_columns(metric, values, first["num_test"]).items() if "_ci_" in k})
            row["detectable_difference"] = detectable_difference(row["final_test_accuracy_mean"], first["num_test"])
            failures = self.failures().loc[group["run_id"]]
            for metric in failing:  # early_collapse_mean: the share of seeds that collapse early
                row[f"{metric}_mean"] = pd.to_numeric(failures[metric], errors="coerce").mean()
            rows.append(row)
        order = {m: i for i, m in enumerate(METHODS + ("",) + BASELINES)}
        out = pd.DataFrame(rows, columns=columns)
        out["_order"] = out["method"].map(order)
        return out.sort_values(["model", "task", "_order", "label"]).drop(columns="_order").reset_index(drop=True)

    def compare(self, run_a: str, run_b: str, step: Union[int, str] = "last") -> PairedComparison:
        """Paired comparison of two runs (ids as in ``runs.index``) on their shared test items
        at ``step``: McNemar's exact test and a paired bootstrap interval of the accuracy
        difference (icrl.analysis.paired.compare_runs); ``.line()`` says it in one line."""
        from .paired import compare_runs

        return compare_runs(self, run_a, run_b, step)

    def _per_step(self, filename: str, fields: list[str]) -> pd.DataFrame:
        """One row per record of ``filename`` in every run, with ``fields`` as floats."""
        frames = []
        for run_id in self.runs["run_id"]:
            state = self._states[run_id]  # the records as a resume continues from them (icrl.run.readback)
            records = state.train if filename == TRAIN else state.test
            frame = pd.DataFrame({f: [getattr(r, f) for r in records] for f in fields}, dtype=float)
            frame.insert(0, "run_id", run_id)
            frames.append(frame)
        return _concat(frames, ["run_id", *fields])

    def failures(self) -> pd.DataFrame:
        """The failure metrics of every run (FAILURE_COLUMNS), indexed by run_id; computed once."""
        if getattr(self, "_failure_table", None) is None:
            ids = list(self.runs["run_id"])
            self._failure_table = pd.DataFrame([self._failures(i) for i in ids], index=ids, columns=FAILURE_COLUMNS)
        return self._failure_table

    def _failures(self, run_id: str) -> dict[str, float]:
        """A run's failure metrics (icrl.analysis.failures; NaN for runs without ICRL training steps)."""
        state = self._states[run_id]
        if state.mode != "icrl" or not state.train:
            return {}
        return run_failures(state.train, state.config.labels)

    def summary(self) -> pd.DataFrame:
        """One row per run: what it is and how it did (the plots' summary.csv), with its failure
        metrics (``icrl.analysis.failures``)."""
        columns = ["run_id", "model", "task", "method", "label", "mode", "strategy", "p_keep",
                   "max_context_examples", "max_contexts", "sampling_method", "omit_feedback",
                   "flip_feedback", "flip_prob", "temperature", "exemplars_per_label", "seed",
                   "training_seed", "test_seed", "finished", "steps", "total_steps",
                   "final_test_accuracy", "best_test_accuracy", "best_test_step", "regret",
                   "train_accuracy", "processed_tokens", "prompt_tokens", "uncached_tokens", "tokenizer"]
        runs = self.runs[[c for c in columns if c in self.runs.columns]].copy()
        runs = pd.concat([runs, self.failures().loc[runs["run_id"]].set_index(runs.index)], axis=1)
        for column in INTEGER_COLUMNS:
            if column in runs.columns:
                runs[column] = pd.to_numeric(runs[column], errors="coerce").astype("Int64")
        order = {m: i for i, m in enumerate(METHODS + ("",) + BASELINES)}
        runs["_order"] = runs["method"].map(order)
        return runs.sort_values(["model", "task", "_order", "strategy", "run_id"]).drop(
            columns="_order").reset_index(drop=True)


def _concat(frames: list[pd.DataFrame], columns: list[str]) -> pd.DataFrame:
    if not frames:
        return pd.DataFrame(columns=columns)
    out = pd.concat(frames, ignore_index=True)
    out["step"] = out["step"].astype(int)
    return out
