"""Count the prompt tokens of finished runs by replaying their records (no model).

For each run, every model call it made is rebuilt from the records: at each step the
training call (ICRL) renders the step's training prompt after the recorded context (the
step indices in ``train.jsonl``), and a test step renders every test prompt of
``config.json`` after that step's context, in the order the experiment made them (the
training call, then the test prompts). Rendering is the experiment's own:
``build_messages`` then the model's chat template.

Two numbers per run:

- prompt tokens: the tokens of every rendered prompt, split into training calls (the
  paper's processed-token figure: the published ``run_count_tokens.py`` counts training
  calls only, and the table prints that as "train tokens") and test calls ("test tokens");
- uncached tokens: what a perfect prefix cache would still compute, i.e. each prompt's
  tokens minus its longest common token prefix with ANY earlier prompt of the run. That
  prefix is found in a radix tree (compressed trie) of the earlier prompts' token ids:
  at most two nodes per prompt, and an edge keeps only the tokens that no earlier prompt
  had at that place, so memory grows with the uncached tokens, not with the prompt tokens.

Incremental tokenization. A Hugging Face fast tokenizer first cuts the text at its added
tokens (``<|im_start|>``, ``<|eot_id|>`` ...) and then normalizes, pre-tokenizes and
encodes each piece in between on its own. So when the text is cut just before added tokens
that match as-is and take in nothing before them (not normalized, no lstrip or single_word),
the ids of the whole text are the ids of the segments put end to end. Chat prompts are mostly the same segments over
and over (the system prompt, each episode's messages), so each distinct segment is encoded
once and cached. This is checked, not assumed: the first prompts of every run and a sample
of the others are also encoded whole, and on any difference the run is counted again with
whole-prompt tokenization (``--full_tokenization`` forces that).

Results are cached per run in ``token_counts.json`` (valid while the record files and the
tokenizer files are unchanged) and written per step to ``token_counts.csv`` in the run.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
import os
import re
import sys
import time
from array import array
from pathlib import Path
from types import SimpleNamespace
from typing import Iterator, Optional, Sequence

import numpy as np

from .diskfull import atomic_output
from .episode import Episode
from .errors import ArgumentParser, UsageError
from .prompts import build_messages
from .records import CONFIG, TEST, TRAIN, read_json, read_jsonl, write_json_atomic
from .results import BASELINES, METHODS, TOKEN_COUNTS_CSV, TOKEN_COUNTS_JSON, Results, distinct_labels, records_stamp

COUNTER_VERSION = 1
CHUNK = 256  # prompts rendered and encoded together


# -- the calls of a run -------------------------------------------------------------------------
def prompt_format(task_name: str) -> SimpleNamespace:
    """What build_messages needs of a task (prediction prefix, description), without its data."""
    from .tasks import prediction_prefix

    return SimpleNamespace(prediction_prefix=prediction_prefix(task_name), description="")


def iter_calls(config: dict, train: Sequence[dict], test: Sequence[dict]) -> Iterator[tuple[int, str, list, str]]:
    """(step, "train" | "test", context step indices, prompt) of every model call, in order."""
    mode = config["resolved"]["mode"]
    test_prompts = config["test_set"]["prompts"]
    if mode == "zero_shot":
        for record in test:
            for prompt in test_prompts:
                yield record["step"], "test", [], prompt
        return
    tests = {record["step"]: record for record in test}
    for record in train:
        step = record["step"]
        if mode == "icrl":
            yield step, "train", record["context"], record["prompt"]
        if step in tests:
            for prompt in test_prompts:
                yield step, "test", tests[step]["context"], prompt


class Replay:
    """Renders the calls of one run exactly as the experiment rendered them."""

    def __init__(self, config: dict, train: Sequence[dict], test: Sequence[dict], chat):
        args = config["args"]
        self.config, self.train, self.test, self.chat = config, train, test, chat
        self.mode = config["resolved"]["mode"]
        self.task = prompt_format(args["task_name"])
        self.omit_feedback = bool(args.get("icrl_omit_feedback"))
        self.exemplars = [(e["prompt"], e["answer"]) for e in config.get("exemplars", [])]
        self.history = [Episode(r["prompt"], r.get("prediction"), r.get("feedback"), r["answer"], r.get("accuracy"))
                        for r in train]

    def calls(self):
        return iter_calls(self.config, self.train, self.test)

    def render(self, context: Sequence[int], prompt: str) -> str:
        messages, prefix = build_messages(
            self.task, [self.history[i] for i in context], prompt, self.mode, omit_feedback=self.omit_feedback,
            exemplars=self.exemplars, supports_system_role=self.chat.supports_system_role)
        return self.chat.render(messages, prefix)


# -- tokenization -------------------------------------------------------------------------------
class SegmentEncoder:
    """Token ids of rendered prompts, segment by segment with a cache (see the module docstring).

    ``incremental`` is False when the tokenizer gives no safe cut points (a slow tokenizer, or
    no added token that matches as-is): then every prompt is encoded whole.
    """

    def __init__(self, chat, incremental: bool = True):
        self.chat = chat
        self.tokenizer = chat.tokenizer
        cut = []
        if getattr(self.tokenizer, "is_fast", False):
            for token in self.tokenizer.added_tokens_decoder.values():
                # A cut before the token is safe unless the token takes in text before it
                # (lstrip, single_word) or is matched after normalization. rstrip is safe: the
                # whitespace it strips lies in its own segment.
                if not (token.lstrip or token.single_word or token.normalized) and token.content:
                    cut.append(token.content)
        # Any subset of safe cut points is safe: keep the tokens the chat template writes (a
        # regex over hundreds of reserved tokens would be slow to scan every prompt with).
        written = _template_sample(chat)
        if written is not None:
            cut = [t for t in cut if t in written]
        self.incremental = incremental and bool(cut)
        # Cut before each cut token; longer tokens first so that a token that is a prefix of
        # another never cuts it in two.
        alternatives = "|".join(re.escape(t) for t in sorted(set(cut), key=len, reverse=True))
        self._cut = re.compile(f"(?=(?:{alternatives}))") if cut else None
        self._cache: dict[str, bytes] = {}
        self._backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if self._backend is None:
            self.incremental = False

    def segments(self, text: str) -> list[str]:
        return [s for s in self._cut.split(text) if s]

    def encode_full(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Whole-text ids, as ChatTokenizer.encode gives them."""
        ids = self.tokenizer(list(texts), add_special_tokens=False)["input_ids"]
        return [np.asarray(x, dtype=np.int32) for x in ids]

    def encode(self, texts: Sequence[str]) -> list[np.ndarray]:
        if not self.incremental:
            return self.encode_full(texts)
        cache = self._cache
        pieces = [self.segments(text) for text in texts]
        missing = list({s for segs in pieces for s in segs if s not in cache})
        if missing:
            # The Rust tokenizer directly: the same ids as tokenizer(...) without building a
            # BatchEncoding (whole-prompt checks go through tokenizer(...)).
            for segment, encoding in zip(missing, self._backend.encode_batch(missing, add_special_tokens=False)):
                cache[segment] = array("i", encoding.ids).tobytes()
        return [np.frombuffer(b"".join([cache[s] for s in segs]), dtype=np.int32) for segs in pieces]

    @property
    def cached_segments(self) -> int:
        return len(self._cache)


def _template_sample(chat) -> Optional[str]:
    """A short conversation in the model's chat template (None if it cannot be rendered)."""
    role = "system" if chat.supports_system_role else "user"
    messages = [{"role": role, "content": "s"}, *([{"role": "user", "content": "u"}] if role == "system" else []),
                {"role": "assistant", "content": "a"}, {"role": "user", "content": "u"}]
    try:
        return chat.render(messages, "")
    except Exception:  # noqa: BLE001 - any template error: use every safe token
        return None


# -- longest common prefix with any earlier prompt ----------------------------------------------
class PrefixTree:
    """Radix tree of token sequences: ``insert`` returns the longest common prefix of the new
    sequence with any sequence inserted before (0 for the first), then adds it.

    A node is a dict {first token of an edge: [edge tokens (numpy int32), child node]}.
    """

    def __init__(self):
        self.root: dict = {}
        self.nodes = 1

    def insert(self, tokens: np.ndarray) -> int:
        node, i, n = self.root, 0, len(tokens)
        while i < n:
            edge = node.get(int(tokens[i]))
            if edge is None:
                node[int(tokens[i])] = [tokens[i:].copy(), {}]
                self.nodes += 1
                return i
            label, child = edge
            m = min(len(label), n - i)
            diff = np.flatnonzero(label[1:m] != tokens[i + 1:i + m])
            k = 1 + int(diff[0]) if len(diff) else m
            if k == len(label):
                i += k
                node = child
                continue
            if i + k == n:  # the new sequence is a prefix of an earlier one
                return n
            # split the edge at k; the new sequence branches off there
            edge[0], edge[1] = label[:k], {int(label[k]): [label[k:], child],
                                           int(tokens[i + k]): [tokens[i + k:].copy(), {}]}
            self.nodes += 2
            return i + k
        return n


def naive_uncached(sequences: Sequence[Sequence[int]]) -> list[int]:
    """The same numbers by brute force, O(n^2): for tests."""
    out = []
    for j, seq in enumerate(sequences):
        best = 0
        for earlier in sequences[:j]:
            k = 0
            while k < min(len(seq), len(earlier)) and seq[k] == earlier[k]:
                k += 1
            best = max(best, k)
        out.append(len(seq) - best)
    return out


# -- counting one run ---------------------------------------------------------------------------
class IncrementalMismatch(Exception):
    pass


def count_run(run_dir, chat, *, full_tokenization: bool = False, verify: int = 32,
              chunk: int = CHUNK) -> tuple[dict, list[dict]]:
    """(summary, per-step rows) for one run directory; see the module docstring.

    ``verify``: besides the first 8 prompts, about this many more spread over the run are
    also encoded whole and compared (incremental mode only).
    """
    run_dir = Path(run_dir)
    config = read_json(run_dir / CONFIG)
    replay = Replay(config, read_jsonl(run_dir / TRAIN), read_jsonl(run_dir / TEST), chat)
    start = time.perf_counter()
    if not full_tokenization:
        encoder = SegmentEncoder(chat)
        if encoder.incremental:
            try:
                return _count(replay, encoder, verify, chunk, start)
            except IncrementalMismatch as exc:
                summary, rows = _count(replay, SegmentEncoder(chat, incremental=False), 0, chunk, start)
                summary["tokenization"] = f"full ({exc})"
                return summary, rows
    return _count(replay, SegmentEncoder(chat, incremental=False), 0, chunk, start)


def _count(replay: Replay, encoder: SegmentEncoder, verify: int, chunk: int, start: float):
    calls = list(replay.calls())
    n = len(calls)
    every = max(1, n // verify) if verify > 0 else 0
    tree = PrefixTree()
    per_step: dict = {}
    verified = 0
    render_s = encode_s = tree_s = 0.0
    for lo in range(0, n, chunk):
        batch = calls[lo:lo + chunk]
        tic = time.perf_counter()
        texts = [replay.render(context, prompt) for _, _, context, prompt in batch]
        tic2 = time.perf_counter()
        ids = encoder.encode(texts)
        if encoder.incremental:
            check = [j for j in range(len(batch)) if lo + j < 8 or (every and (lo + j) % every == every - 1)]
            if check:
                whole = encoder.encode_full([texts[j] for j in check])
                for j, full in zip(check, whole):
                    if not np.array_equal(full, ids[j]):
                        step, kind = batch[j][0], batch[j][1]
                        raise IncrementalMismatch(f"segment-wise ids differ from whole-prompt ids at step {step} ({kind})")
                verified += len(check)
        tic3 = time.perf_counter()
        for (step, kind, _, _), x in zip(batch, ids):
            lcp = tree.insert(x)
            row = per_step.get((step, kind))
            if row is None:
                row = per_step[(step, kind)] = [0, 0, 0]
            row[0] += 1
            row[1] += len(x)
            row[2] += len(x) - lcp
        tic4 = time.perf_counter()
        render_s, encode_s, tree_s = render_s + tic2 - tic, encode_s + tic3 - tic2, tree_s + tic4 - tic3
    rows, cum_p, cum_u = [], 0, 0
    totals = {"train": [0, 0, 0], "test": [0, 0, 0]}
    for (step, kind), (calls_, p, u) in per_step.items():
        cum_p, cum_u = cum_p + p, cum_u + u
        rows.append({"step": step, "kind": kind, "calls": calls_, "prompt_tokens": p, "uncached_tokens": u,
                     "cumulative_prompt_tokens": cum_p, "cumulative_uncached_tokens": cum_u})
        for i, v in enumerate((calls_, p, u)):
            totals[kind][i] += v
    seconds = time.perf_counter() - start
    prompt_tokens = totals["train"][1] + totals["test"][1]
    summary = {
        "calls": n, "prompt_tokens": prompt_tokens, "uncached_tokens": totals["train"][2] + totals["test"][2],
        "train_calls": totals["train"][0], "train_prompt_tokens": totals["train"][1],
        "train_uncached_tokens": totals["train"][2], "test_calls": totals["test"][0],
        "test_prompt_tokens": totals["test"][1], "test_uncached_tokens": totals["test"][2],
        "steps": len(replay.train) if replay.mode != "zero_shot" else len(replay.test),
        "tokenization": "incremental" if encoder.incremental else "full",
        "verified_prompts": verified, "cached_segments": encoder.cached_segments, "tree_nodes": tree.nodes,
        "seconds": seconds, "render_s": render_s, "encode_s": encode_s, "prefix_tree_s": tree_s,
        "tokens_per_s": prompt_tokens / seconds if seconds > 0 else None,
    }
    return summary, rows


# -- tokenizers and the per-run cache -----------------------------------------------------------
_FINGERPRINT_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                      "vocab.json", "merges.txt", "added_tokens.json", "chat_template.jinja", "chat_template.json")


class Tokenizers:
    """Loads each model's tokenizer once, and fingerprints its files without loading it."""

    def __init__(self, override: Optional[str] = None):
        self.override = override
        self._chat: dict = {}
        self._fingerprint: dict = {}

    def name_for(self, model_name: str) -> str:
        return self.override or model_name

    def directory(self, name: str) -> Path:
        from .backends.chat import local_model_dir

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

    def chat(self, name: str):
        if name not in self._chat:
            from .backends.chat import ChatTokenizer, load_hf_tokenizer

            directory = self.directory(name)
            self._chat[name] = ChatTokenizer(load_hf_tokenizer(directory), directory)
        return self._chat[name]


def cache_key(run_dir: Path, tokenizer_name: str, fingerprint: str, full_tokenization: bool) -> dict:
    return {"version": COUNTER_VERSION, "tokenizer": {"name": tokenizer_name, "fingerprint": fingerprint},
            "full_tokenization": full_tokenization, "records": records_stamp(run_dir)}


def counted(run_dir: Path, key: dict) -> Optional[dict]:
    """The cached summary of a run when its key matches (and its CSV is there), else None."""
    path = run_dir / TOKEN_COUNTS_JSON
    if not path.is_file() or not (run_dir / TOKEN_COUNTS_CSV).is_file():
        return None
    try:
        data = read_json(path)
    except (OSError, ValueError):
        return None
    cached = data.get("key", {})
    same = {k: v for k, v in cached.items() if k != "full_tokenization"} == \
        {k: v for k, v in key.items() if k != "full_tokenization"}
    # a whole-prompt count also answers an incremental request (same numbers), not vice versa
    if same and (cached.get("full_tokenization") or not key["full_tokenization"]):
        return data.get("summary")
    return None


def write_counts(run_dir: Path, key: dict, summary: dict, rows: list[dict]) -> None:
    columns = ["step", "kind", "calls", "prompt_tokens", "uncached_tokens",
               "cumulative_prompt_tokens", "cumulative_uncached_tokens"]
    tmp = run_dir / (TOKEN_COUNTS_CSV + ".tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    tmp.replace(run_dir / TOKEN_COUNTS_CSV)
    write_json_atomic(run_dir / TOKEN_COUNTS_JSON, {"key": key, "summary": summary})


# -- the command line ---------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="run_count_tokens.py",
                description="Count the prompt tokens of finished runs (and what a perfect prefix cache would "
                            "still compute) by replaying their records; no model is loaded.")
    p.add_argument("--data_dir", default="data", help="results root (as run_experiment.py --output_dir)")
    p.add_argument("--model", action="append", default=[], help="only runs of this model (repeatable)")
    p.add_argument("--task", action="append", default=[], help="only runs of this task (repeatable)")
    p.add_argument("--strategy", action="append", default=[],
                   help="only runs of this context strategy or method (e.g. explorative) (repeatable)")
    p.add_argument("--tokenizer", default=None,
                   help="count with this tokenizer (HF id, directory or smollm2-135m) (default: each run's own model)")
    p.add_argument("--csv", default=None, help="also write the combined table to this CSV file (default: none)")
    p.add_argument("--force", action="store_true", help="count again even when token_counts.json is current")
    p.add_argument("--full_tokenization", action="store_true",
                   help="tokenize every prompt whole (slower; the default is checked to give the same ids)")
    p.add_argument("--verify", type=int, default=32,
                   help="prompts per run, besides the first 8, also tokenized whole to check the incremental ids")
    p.add_argument("--explorative_p_keep", type=float, default=0.1, help="p_keep that names a run explorative")
    return p


def select_runs(results: Results, models, tasks, strategies):
    runs = results.runs
    runs = runs[runs["finished"].astype(bool)] if len(runs) else runs
    if models:
        runs = runs[runs["model"].isin(models)]
    if tasks:
        runs = runs[runs["task"].isin(tasks)]
    if strategies:
        runs = runs[runs["strategy"].isin(strategies) | runs["method"].isin(strategies)]
    return runs


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = build_parser().parse_args(argv)
        if args.verify < 0:
            raise UsageError(f"--verify must be >= 0, got {args.verify}")
        return _main(args)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _main(args) -> int:
    import pandas as pd

    if args.csv:
        folder = Path(args.csv).parent
        if not folder.is_dir() or not os.access(folder, os.W_OK) or Path(args.csv).is_dir():
            raise UsageError(f"--csv {args.csv!r}: the folder {str(folder)!r} does not exist or is not writable")
    results = Results(args.data_dir, explorative_p_keep=args.explorative_p_keep)
    for note in results.notes:
        print(f"note: {note}")
    runs = select_runs(results, args.model, args.task, args.strategy)
    if runs.empty:
        raise UsageError(f"no finished run under {args.data_dir!r} matches the filters")
    tokenizers = Tokenizers(args.tokenizer)
    rows, counted_now, total_s, total_tokens = [], 0, 0.0, 0
    tic = time.perf_counter()
    labels = distinct_labels(runs) if len(runs) else {}
    for index, run in runs.iterrows():
        run_dir = Path(run["run_dir"])
        name = tokenizers.name_for(run["model"])
        key = cache_key(run_dir, name, tokenizers.fingerprint(name), args.full_tokenization)
        summary = None if args.force else counted(run_dir, key)
        if summary is None:
            summary, per_step = count_run(run_dir, tokenizers.chat(name), full_tokenization=args.full_tokenization,
                                          verify=args.verify)
            write_counts(run_dir, key, summary, per_step)
            counted_now += 1
            total_s += summary["seconds"]
            total_tokens += summary["prompt_tokens"]
            print(f"counted {run['run_id']}: {summary['calls']:,} calls, {summary['prompt_tokens']:,} tokens in "
                  f"{summary['seconds']:.2f} s ({summary['prompt_tokens'] / max(summary['seconds'], 1e-9):,.0f} "
                  f"tokens/s, {summary['tokenization']})")
        rows.append({"model": run["model"], "task": run["task"], "run": labels[index], "method": run["method"],
                     "strategy": run["strategy"], "mode": run["mode"], "steps": summary["steps"],
                     "test_set": run["test_set"],
                     "calls": summary["calls"], "train_prompt_tokens": summary["train_prompt_tokens"],
                     "test_prompt_tokens": summary["test_prompt_tokens"], "prompt_tokens": summary["prompt_tokens"],
                     "uncached_tokens": summary["uncached_tokens"], "tokenizer": name, "run_id": run["run_id"]})
    table = pd.DataFrame(rows)
    table = _add_ratios(table)
    print()
    print(format_table(table))
    if args.csv:
        with atomic_output(args.csv) as tmp:  # whole or not at all (a full disk)
            table.to_csv(tmp, index=False)
        print(f"wrote {args.csv}")
    elapsed = time.perf_counter() - tic
    print(f"{len(table)} runs ({counted_now} counted now, {len(table) - counted_now} from token_counts.json) in "
          f"{elapsed:.1f} s" + (f"; counting speed {total_tokens / total_s:,.0f} prompt tokens/s"
                                if total_s > 0 else ""))
    return 0


# Runs whose token counts compare: same model, task, number of steps and test set.
LIKE = ["model", "task", "steps", "test_set"]


def _add_ratios(table):
    """cached_pct, and uncached tokens relative to the explorative run(s) of the same model,
    task, number of steps and test set (their mean over seeds); NaN where there is none."""
    table["cached_pct"] = 100 * (1 - table["uncached_tokens"] / table["prompt_tokens"].where(table["prompt_tokens"] > 0))
    ratios = []
    for _, group in table.groupby(LIKE, sort=False, dropna=False):
        ref = group[group["method"] == "explorative"]
        base = ref["uncached_tokens"].mean() if len(ref) else math.nan
        ratios.append(group["uncached_tokens"] / base if base else group["uncached_tokens"] * math.nan)
    import pandas as pd

    table["vs_explorative"] = pd.concat(ratios) if ratios else []
    order = {m: i for i, m in enumerate(METHODS + ("",) + BASELINES)}
    table["_order"] = table["method"].map(order)
    return table.sort_values(["model", "task", "_order", "run"], kind="stable").drop(
        columns="_order").reset_index(drop=True)


def format_table(table) -> str:
    """The grouped table: one block per model and task, with the explorative/approximate ratio."""
    lines = ["train tokens: prompt tokens of the training calls, the paper's processed-token figure (the "
             "published run_count_tokens.py counts training calls only); test tokens: those of the test "
             "calls; uncached and cached: all calls", ""]
    for (model, task), group in table.groupby(["model", "task"], sort=False):
        lines.append(f"== {model} / {task} ==")
        width = max(12, *(len(r) for r in group["run"]))
        lines.append(f"{'run':<{width}}  {'steps':>6} {'calls':>8} {'train tokens':>14} {'test tokens':>14} "
                     f"{'uncached':>13} {'cached':>7} {'vs explorative':>14}")
        for _, r in group.iterrows():
            ratio = "" if not np.isfinite(r["vs_explorative"]) else f"{r['vs_explorative']:.3f}"
            cached = "" if not np.isfinite(r["cached_pct"]) else f"{r['cached_pct']:.1f}%"
            lines.append(f"{r['run']:<{width}}  {r['steps']:>6} {r['calls']:>8,} {r['train_prompt_tokens']:>14,} "
                         f"{r['test_prompt_tokens']:>14,} {r['uncached_tokens']:>13,} {cached:>7} {ratio:>14}")
        for _, r in group[group["method"] == "approximate"].iterrows():
            if r["uncached_tokens"] and np.isfinite(r["vs_explorative"]) and r["vs_explorative"]:
                lines.append(f"uncached tokens, explorative / {r['run']}: {1 / r['vs_explorative']:.2f}x "
                             f"(same steps and test set)")
        lines.append("vs explorative: uncached tokens over those of the explorative run(s) with the same "
                     "steps and test set (mean over seeds); blank where there is none")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


# -- synthetic records (benchmarks and tests) ---------------------------------------------------
def synthesize_run(out_dir, task, *, steps: int, strategy: str = "random_unbiased_only_positive",
                   p_keep: float = 0.1, max_examples: int = 40, max_contexts: int = 8,
                   sampling_method: str = "uniform", test_every: int = 500, test_k: int = 500,
                   model_name: str = "smollm2-135m", p_correct=0.6, seed: int = 100, **extra_args) -> Path:
    """Write the records of a finished ICRL run without a model, in the experiment's format.

    Training examples and test prompts are ``task``'s (a loaded icrl.tasks.Task); predictions
    are right with probability ``p_correct`` (a number, or a function of the step; else a
    random label); contexts come from the real strategy code, as in a live run.
    ``extra_args`` override entries of the recorded arguments. Returns the run directory.
    """
    from .context import make_strategy
    from .experiment import plan_steps
    from .records import RunRecords, experiment_dir

    rng = np.random.default_rng(seed)
    train = task.training_examples(steps, extra_args.get("training_seed", seed))
    test_examples = task.test_examples(test_k, extra_args.get("test_seed", seed))
    steps = len(train)
    n_steps, test_steps = plan_steps("icrl", steps, test_every, max_examples)
    args = {"model_name": model_name, "task_name": task.name, "context_strategy_name": strategy,
            "context_p_keep": p_keep, "max_context_examples": max_examples, "icrl": True,
            "icrl_omit_feedback": False, "icrl_flip_feedback": False, "icrl_flip_feedback_prob": None,
            "max_contexts": max_contexts if strategy.startswith("approximate") else -1,
            "approximate_context_sampling_method": sampling_method if strategy.startswith("approximate") else None,
            "temperature": 1.0, "train_k": steps, "test_every": test_every, "test_k": test_k,
            "exemplars_per_label": 0, "seed": seed, "training_seed": seed, "test_seed": seed,
            "backend": "synthetic", "device": None, "dtype": "auto", **extra_args}
    records = RunRecords(experiment_dir(out_dir, args))
    records.create({
        "format_version": 1, "args": args, "synthetic": True,
        "resolved": {"mode": "icrl", "max_context_examples": max_examples, "steps": n_steps,
                     "test_steps": test_steps, "num_exemplars": 0},
        "dataset": {"task": task.name, "labels": task.labels},
        "train_example_ids": [e.id for e in train],
        "test_set": {"ids": [e.id for e in test_examples], "prompts": [task.prompt(e) for e in test_examples],
                     "answers": [task.answer(e) for e in test_examples]},
        "exemplars": []})
    strat = make_strategy(strategy, max_examples, p_keep, max_contexts, sampling_method)
    history: list[Episode] = []
    index_of: dict = {}
    tests = set(test_steps)
    test_answers = [task.answer(e) for e in test_examples]
    train_lines, test_lines, correct_total = [], [], 0
    chance = p_correct if callable(p_correct) else (lambda t: p_correct)
    for t, example in enumerate(train):
        context = strat.select(history, np.random.default_rng(seed + t))
        ids = [index_of[id(e)] for e in context]
        answer = task.answer(example)
        prediction = answer if rng.random() < chance(t) else task.labels[int(rng.integers(len(task.labels)))]
        accuracy = int(prediction == answer)
        correct_total += accuracy
        if t in tests:
            predictions = [a if rng.random() < chance(t) else task.labels[0] for a in test_answers]
            test_lines.append({"step": t, "accuracy": float(np.mean([p == a for p, a in zip(predictions, test_answers)])),
                               "per_class_accuracy": {}, "predictions": predictions, "context_size": len(ids),
                               "context": ids, "metrics": strat.metrics(), "time_s": 0.0})
        episode = Episode(task.prompt(example), prediction, accuracy, answer, accuracy)
        train_lines.append({"step": t, "example_id": example.id, "prompt": episode.prompt, "prediction": prediction,
                            "feedback": accuracy, "answer": answer, "accuracy": accuracy, "context_size": len(ids),
                            "context": ids, "metrics": strat.metrics(), "time_s": 0.0})
        index_of[id(episode)] = len(history)
        history.append(episode)
    for name, lines in ((TRAIN, train_lines), (TEST, test_lines)):
        with open(records.directory / name, "w", encoding="utf-8") as f:
            for line in lines:
                f.write(json.dumps(line, ensure_ascii=False) + "\n")
    accuracy = {str(r["step"]): r["accuracy"] for r in test_lines}
    best = max(test_lines, key=lambda r: r["accuracy"])
    records.write_results({
        "finished": True, "mode": "icrl", "steps_completed": steps, "total_steps": n_steps,
        "final_test_accuracy": test_lines[-1]["accuracy"], "best_test_accuracy": best["accuracy"],
        "best_test_step": best["step"], "regret": steps - correct_total, "train_accuracy": correct_total / steps,
        "test_accuracy": accuracy, "mean_step_time_s": 0.0, "total_time_s": 0.0})
    return records.directory
