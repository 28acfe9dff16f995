"""run_count_tokens.py (command line: :mod:`icrl.cli.tokens`): count the tokens of finished runs
(see :mod:`icrl.analysis.counting`), cache the counts per run and print them as one table. The
runs are read through :class:`icrl.analysis.results.Results` first, each checked as a resume
checks it (``icrl.run.readback``: a run a resume refuses is skipped with a note), and a run is
counted from the lines so read. Runs on hosted APIs then get what their API recorded
and its dollars (:mod:`icrl.analysis.billing`)."""

from __future__ import annotations

import hashlib
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

import numpy as np

from ..backends.prices import load_prices
from ..errors import UsageError
from ..records import write_atomic
from .billing import billed_runs, usage_table
from .counting import count_run
from .results import Results
from .runs import BASELINES, METHODS, distinct_labels
from .token_cache import cache_key, counted, write_counts

if TYPE_CHECKING:
    import pandas as pd

    from ..backends.chat import ChatTokenizer
    from .billing import Billed


# -- tokenizers and the per-run cache -----------------------------------------------------------
_FINGERPRINT_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                      "vocab.json", "merges.txt", "added_tokens.json", "chat_template.jinja", "chat_template.json")


class TokenizerCache:
    """Loads each model's tokenizer once, and fingerprints its files without loading it."""

    def __init__(self, override: Optional[str] = None) -> None:
        self.override = override
        self._chat: dict[str, ChatTokenizer] = {}
        self._fingerprint: dict[str, str] = {}

    def name_for(self, model_name: str) -> str:
        return self.override or model_name

    def directory(self, name: str) -> Path:
        from ..backends.chat import local_model_dir

        return local_model_dir(name, weights=False)

    def fingerprint(self, name: str) -> str:
        if name not in self._fingerprint:
            directory = self.directory(name)
            h = hashlib.sha256()
            for file in _FINGERPRINT_FILES:
                path = directory / file
                if path.is_file():
                    h.update(file.encode() + b"\0" + path.read_bytes() + b"\0")
            self._fingerprint[name] = h.hexdigest()[:16]
        return self._fingerprint[name]

    def chat(self, name: str) -> ChatTokenizer:
        if name not in self._chat:
            from ..backends.chat import ChatTokenizer, load_hf_tokenizer

            directory = self.directory(name)
            self._chat[name] = ChatTokenizer(load_hf_tokenizer(directory), directory)
        return self._chat[name]


def select_runs(results: Results, models: Sequence[str], tasks: Sequence[str],
                strategies: Sequence[str]) -> pd.DataFrame:
    runs = results.runs
    runs = runs[runs["finished"].astype(bool)] if len(runs) else runs
    if models:
        runs = runs[runs["model"].isin(models) | runs.get("model_id", runs["model"]).isin(models)]
    if tasks:
        runs = runs[runs["task"].isin(tasks)]
    if strategies:
        runs = runs[runs["strategy"].isin(strategies) | runs["method"].isin(strategies)]
    return runs


@dataclass(frozen=True)
class CountOptions:
    """What run_count_tokens.py counts (its flags, ``icrl.cli.tokens``)."""

    data_dir: str = "data"
    model: tuple[str, ...] = ()
    task: tuple[str, ...] = ()
    strategy: tuple[str, ...] = ()
    tokenizer: Optional[str] = None
    csv: Optional[str] = None
    force: bool = False
    full_tokenization: bool = False
    verify: int = 32
    explorative_p_keep: float = 0.1
    prices: Optional[str] = None  # the price file of the hosted runs' dollars (None: the default)


def _check_csv(csv: str) -> None:
    """Refuse, before any counting, a --csv path that cannot be written."""
    folder = Path(csv).parent
    if Path(csv).is_dir():
        raise UsageError(f"--csv {csv!r} is a folder; give a file name, e.g. {str(Path(csv) / 'tokens.csv')!r}")
    if not folder.is_dir() or not os.access(folder, os.W_OK):
        raise UsageError(f"--csv {csv!r}: the folder {str(folder)!r} does not exist or is not writable")


def _row(run: pd.Series, label: str, summary: dict[str, Any], tokenizer: str) -> dict[str, Any]:
    """One run's row of the table, from its counts (``summary``)."""
    return {"model": run["model"], "task": run["task"], "run": label, "method": run["method"],
            "strategy": run["strategy"], "mode": run["mode"], "steps": summary["steps"],
            "test_set": run["test_set"],
            "calls": summary["calls"], "processed_tokens": summary["processed_tokens"],
            "processed_tokens_as_run": summary["processed_tokens_as_run"],
            "train_prompt_tokens": summary["train_prompt_tokens"],
            "test_prompt_tokens": summary["test_prompt_tokens"], "prompt_tokens": summary["prompt_tokens"],
            "uncached_tokens": summary["uncached_tokens"],
            "reasoning_tokens": summary.get("train_reasoning_tokens", 0) + summary.get("test_reasoning_tokens", 0),
            "train_reasoning_tokens": summary.get("train_reasoning_tokens", 0),
            "test_reasoning_tokens": summary.get("test_reasoning_tokens", 0),
            **{column: summary.get(column, 0) for column in _call_columns()},
            "tokenizer": tokenizer, "run_id": run["run_id"]}


def count_tokens(args: CountOptions) -> int:
    """Count (or read from each run's cache) and print the table, then what the runs on hosted
    APIs recorded and cost (``analysis.billing``); 0 when done."""
    import pandas as pd

    prices = load_prices(args.prices)  # a bad price file: one line, before anything is counted or written
    if args.csv:
        _check_csv(args.csv)
    results = Results(args.data_dir, explorative_p_keep=args.explorative_p_keep)
    for note in results.notes:
        print(f"note: {note}")
    runs = select_runs(results, args.model, args.task, args.strategy)
    if len(runs) and "learner" in runs and runs["learner"].notna().any():  # icrl.method.agents: no model, no prompt
        print(f"note: {int(runs['learner'].notna().sum())} run(s) of learners that are not LLMs have no tokens "
              f"to count: left out")
        runs = runs[runs["learner"].isna()]
    if runs.empty:
        damaged = sum(note.startswith("damaged run ") for note in results.notes)
        hint = f" ({damaged} damaged: run_experiment.py with the run's flags repairs it)" if damaged else ""
        raise UsageError(f"no finished run under {args.data_dir!r} matches the filters{hint}")
    billed = billed_runs(results, runs.index, prices)
    tic = time.perf_counter()
    labels = distinct_labels(runs) if len(runs) else {}
    rows, counted_now, total_s, total_tokens = _count_runs(args, results, runs, labels, billed)
    table = pd.DataFrame(rows)
    if rows:
        for column in ("processed_tokens", "processed_tokens_as_run"):
            table[column] = table[column].astype("Int64")  # blank for zero-shot runs
        table = _add_ratios(table)
        print()
        print(format_table(table))
    if args.csv:
        write_atomic(Path(args.csv), lambda f: table.to_csv(f, index=False), newline="")  # whole or not at all
        print(f"wrote {args.csv}")
    if billed:
        print(usage_table(billed, labels, prices))
    elapsed = time.perf_counter() - tic
    print(f"{len(table)} runs ({counted_now} counted now, {len(table) - counted_now} from token_counts.json) in "
          f"{elapsed:.1f} s" + (f"; counting speed {total_tokens / total_s:,.0f} prompt tokens/s"
                                if total_s > 0 else ""))
    return 0


def _count_runs(args: CountOptions, results: Results, runs: pd.DataFrame, labels: Mapping[str, str],
                billed: Mapping[str, Billed]) -> tuple[list[dict[str, Any]], int, float, int]:
    """Each run's row, counted now (from its records as ``results`` read them) or read from its
    cache: (rows, runs counted now, seconds and prompt tokens of those). A run on a hosted API
    whose model has no local tokenizer is left out of the table with a note (its recorded usage
    is the last table)."""
    tokenizers = TokenizerCache(args.tokenizer)
    rows, counted_now, total_s, total_tokens = [], 0, 0.0, 0
    for index, run in runs.iterrows():
        run_dir = Path(run["run_dir"])
        name = tokenizers.name_for(run.get("model_id") if isinstance(run.get("model_id"), str) else run["model"])
        try:
            key = cache_key(run_dir, name, tokenizers.fingerprint(name), args.full_tokenization)
            summary = None if args.force else counted(run_dir, key)
            chat = tokenizers.chat(name) if summary is None else None
        except UsageError as exc:
            if index not in billed:
                raise
            print(f"note: {run['run_id']}: no tokenizer to count with ({exc}); its recorded usage is below")
            continue
        if summary is None:
            summary, per_step = count_run(results.state(index), chat, full_tokenization=args.full_tokenization,
                                          verify=args.verify)
            write_counts(run_dir, key, summary, per_step)
            counted_now += 1
            total_s += summary["seconds"]
            total_tokens += summary["prompt_tokens"] + summary["icl_train_prompt_tokens"]
            print(f"counted {run['run_id']}: {summary['calls']:,} calls, {summary['prompt_tokens']:,} tokens in "
                  f"{summary['seconds']:.2f} s ({summary['prompt_tokens'] / max(summary['seconds'], 1e-9):,.0f} "
                  f"tokens/s, {summary['tokenization']})")
        rows.append(_row(run, labels[index], summary, name))
    return rows, counted_now, total_s, total_tokens


def _call_columns() -> dict[str, str]:
    """The column of each call beside the classifier's (``<field>_calls``, as the counter names
    it) and how the table names its calls: from the declarations (``icrl.run.assemble.all_calls``)."""
    from ..run.assemble import all_calls

    return {f"{call.field}_calls": call.summary for call in all_calls() if call.field}


# Runs whose token counts compare: same model, task, number of steps and test set.
LIKE = ["model", "task", "steps", "test_set"]


def _add_ratios(table: pd.DataFrame) -> pd.DataFrame:
    """cached_pct (of every call sent), and processed tokens relative to the explorative run(s) of
    the same model, task, number of steps and test set (their mean over seeds); NaN where there is
    none."""
    import pandas as pd

    prompt_tokens = table["prompt_tokens"].where(table["prompt_tokens"] > 0)
    table["cached_pct"] = 100 * (1 - table["uncached_tokens"] / prompt_tokens)
    processed = pd.to_numeric(table["processed_tokens"], errors="coerce").astype(float)
    ratios = []
    for _, group in table.groupby(LIKE, sort=False, dropna=False):
        ref = processed[group[group["method"] == "explorative"].index]
        base = ref.mean() if len(ref) else math.nan
        ratios.append(processed[group.index] / base if base else processed[group.index] * math.nan)
    table["vs_explorative"] = pd.concat(ratios) if ratios else []
    order = {m: i for i, m in enumerate(METHODS + ("",) + BASELINES)}
    table["_order"] = table["method"].map(order)
    return table.sort_values(["model", "task", "_order", "run"], kind="stable").drop(
        columns="_order").reset_index(drop=True)


HEADER = ("processed tokens: the paper's figure, as the published run_count_tokens.py computes it: the "
          "training prompts' tokens that no earlier training prompt of the run had as a prefix (supervised-ICL "
          "runs: each step counted as a call of its context and training input, as published); train / test "
          "tokens: every prompt token of the training / test calls sent; uncached and cached: over every call "
          "sent. With --reasoning a call's prompt is the prompt of its answer, its reasoning included; the "
          "reasoning column counts the tokens generated before the answers (training and test)")


def _fmt_count(value: Any) -> str:  # a cell of an Int64 column: a count, or NA
    import pandas as pd

    return "-" if pd.isna(value) else f"{int(value):,}"


def format_table(table: pd.DataFrame) -> str:
    """The grouped table: one block per model and task, with the explorative/approximate ratio."""
    lines = [HEADER, ""]
    for (model, task), group in table.groupby(["model", "task"], sort=False):
        lines.append(f"== {model} / {task} ==")
        width = max(12, *(len(r) for r in group["run"]))
        reasoned = "reasoning_tokens" in group and group["reasoning_tokens"].fillna(0).sum() > 0
        lines.append(f"{'run':<{width}}  {'steps':>6} {'processed tokens':>16} {'calls':>8} {'train tokens':>14} "
                     f"{'test tokens':>14} {'uncached':>13} {'cached':>7} {'vs explorative':>14}"
                     + (f" {'reasoning':>12}" if reasoned else ""))
        for _, r in group.iterrows():
            ratio = "" if not np.isfinite(r["vs_explorative"]) else f"{r['vs_explorative']:.3f}"
            cached = "" if not np.isfinite(r["cached_pct"]) else f"{r['cached_pct']:.1f}%"
            lines.append(f"{r['run']:<{width}}  {r['steps']:>6} {_fmt_count(r['processed_tokens']):>16} "
                         f"{r['calls']:>8,} {r['train_prompt_tokens']:>14,} {r['test_prompt_tokens']:>14,} "
                         f"{r['uncached_tokens']:>13,} {cached:>7} {ratio:>14}"
                         + (f" {_fmt_count(r['reasoning_tokens']):>12}" if reasoned else ""))
        for _, r in group.iterrows():
            other = [f"{int(r[k]):,} {what}" for k, what in _call_columns().items()
                     if k in r and r[k] == r[k] and r[k] > 0]
            if other:
                lines.append(f"{r['run']}: also {' and '.join(other)} (other prompts, not counted above)")
        for _, r in group[group["method"] == "approximate"].iterrows():
            if r["processed_tokens"] and np.isfinite(r["vs_explorative"]) and r["vs_explorative"]:
                lines.append(f"processed tokens, explorative / {r['run']}: {1 / r['vs_explorative']:.2f}x "
                             f"(same steps and test set)")
        lines.append("vs explorative: processed tokens over those of the explorative run(s) with the same "
                     "steps and test set (mean over seeds); blank where there is none")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
