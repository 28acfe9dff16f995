"""Count the prompt tokens of finished runs by replaying their records (no model).

For each run, every model call it made is rebuilt from the records: at each step the
training call (ICRL) renders the step's training prompt after the recorded context (the
step indices in ``train.jsonl``), and a test step renders every test prompt of
``config.json`` after that step's context, in the order the experiment made them (the
training call, then the test prompts). Rendering is the experiment's own: the run's
``Prompter`` (``icrl.run.assemble.prompter_of_record``) with the model's chat template.

The numbers per run:

- processed tokens (the headline, the paper's figure): what the published
  ``run_count_tokens.py`` counts. Training prompts only, each one's tokens minus its
  longest common token prefix with an earlier *training* prompt of the run (test prompts
  are neither counted nor remembered). A supervised-ICL run makes no training call, but
  the published script counts one per step as if it did (the step's context with gold
  answers, then the step's training input, in the ICL prompt): those ``icl_train`` calls
  are rendered for this figure only. Like the published script, it rebuilds each step's
  context from the recorded episodes and the seed with the published strategy code instead of
  reading it: for ``approximate_only_positive``, whose published code re-offers the last
  positive episode when the newest is negative (``icrl.method.strategies.base.Approximate``, not done by our
  runs unless ``--published_quirks``), those contexts differ from the ones our run showed;
  ``processed_tokens_as_run`` is the same count over the contexts the run really showed
  (equal to ``processed_tokens`` for every other strategy: their contexts are the published
  ones, see tests/unit/test_golden.py).
- prompt tokens: the tokens of every prompt actually sent, split into training calls
  ("train tokens") and test calls ("test tokens");
- uncached tokens: what a perfect prefix cache would still compute over every call sent:
  each prompt's tokens minus its longest common token prefix with ANY earlier prompt of
  the run, test prompts included. (Its training calls' share, ``train_uncached_tokens``,
  is a few tokens below the processed tokens: a training prompt can share a longer prefix
  with a test prompt of the step before than with any earlier training prompt.)

Tokenization and prefixes are ``icrl.analysis.prefixes``: prompts encoded segment by segment
with a cache (checked against whole-prompt encoding), longest common prefixes in a radix tree.

Results are cached per run in ``token_counts.json`` (valid while the record files and the
tokenizer files are unchanged) and written per step to ``token_counts.csv`` in the run.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Iterator, NamedTuple, Optional, Sequence, Union

import numpy as np

from ..config import given
from ..method.episode import Episode
from ..records.configfile import ConfigFile
from ..records.schema import TestLine, TrainLine
from ..run.readback import CheckedRun, read_run
from .prefixes import FakeEncoder, PrefixTree, SegmentEncoder

CHUNK = 256  # prompts rendered and encoded together
KINDS = ("train", "test", "icl_train")
Counts = tuple[dict[str, Any], list[dict[str, Any]]]  # (summary, per-step rows) of a run


# -- the calls of a run -------------------------------------------------------------------------
class CountedCall(NamedTuple):
    """One model call of a run: its step, kind ("train", "test" or "icl_train"), context (step
    indices), input, and for a test call the input's position in the test set."""

    step: int
    kind: str
    context: list[int]
    prompt: str
    position: int = 0


def iter_calls(config: ConfigFile, train: Sequence[TrainLine], test: Sequence[TestLine]) -> Iterator[CountedCall]:
    """Every model call, in order (``CountedCall``); kind "icl_train" is the training step of a
    supervised-ICL run, which sends nothing but which the published token count counts as a call
    (see the module docstring)."""
    mode = config.resolved.mode
    test_prompts = config.test_set.prompts
    if mode == "zero_shot":
        for line in test:
            for i, prompt in enumerate(test_prompts):
                yield CountedCall(line.step, "test", [], prompt, i)
        return
    tests = {line.step: line for line in test}
    for record in train:
        step = record.step
        if mode == "icrl" and not record.explored:  # --p_exploration: an explored step made no call
            yield CountedCall(step, "train", record.context, record.prompt)
        elif mode == "icl":
            yield CountedCall(step, "icl_train", record.context, record.prompt)
        if step in tests:  # a query-aware strategy (knn_*) recorded one context per test prompt
            contexts = tests[step].contexts or [tests[step].context or []] * len(test_prompts)
            for i, (prompt, context) in enumerate(zip(test_prompts, contexts)):
                yield CountedCall(step, "test", context, prompt, i)


class Replay:
    """Renders the calls of one run exactly as the experiment rendered them: with the text a
    strategy puts before the episodes (a summary, a written guide; ``preambles``), and with
    --reasoning the prompt of the answer, which holds the call's recorded reasoning."""

    def __init__(self, config: ConfigFile, train: Sequence[TrainLine], test: Sequence[TestLine], chat: Any):
        from ..run.assemble import prompter_of_record

        self.config, self.train, self.test, self.chat = config, train, test, chat
        self.prompter = prompter_of_record(config)
        self.history = episodes_of(train)
        self.published = published_contexts(config, self.history)
        self.preambles = preambles(config, train, self.history)
        self.tests = {line.step: line for line in test}

    def calls(self) -> Iterator[CountedCall]:
        return iter_calls(self.config, self.train, self.test)

    def published_context(self, step: int, kind: str, context: Sequence[int]) -> Optional[list[int]]:
        """The context the published counter rebuilds for this call, None when it is ``context``."""
        if kind == "test" or self.published is None or self.published[step] == list(context):
            return None
        return self.published[step]

    def reasoning_of(self, call: CountedCall) -> Optional[str]:
        """What the model wrote before answering in ``call`` (--reasoning), from the records."""
        if not self.prompter.reasoning or call.kind == "icl_train":
            return None
        if call.kind == "train":
            return self.train[call.step].reasoning
        line = self.tests.get(call.step)
        return line.reasoning[call.position] if line is not None and line.reasoning else None

    def render(self, context: Sequence[int], prompt: str, call: Optional[CountedCall] = None) -> str:
        """The prompt of ``call`` (its step's preamble, its reasoning) with ``context`` in it."""
        preamble = self.preambles[call.step] if call is not None and self.preambles is not None else ""
        reasoning = self.reasoning_of(call) if call is not None else None
        return self.prompter.render(self.chat, [self.history[i] for i in context], prompt, preamble, reasoning)

    def render_call(self, call: CountedCall) -> str:
        return self.render(call.context, call.prompt, call)

    def extra_calls(self) -> dict[str, int]:
        """The calls beside the classifier's that the records show, not rendered here (another
        prompt, maybe another model): ``<field>_calls`` for each call a part declares
        (``icrl.run.assemble.all_calls``)."""
        from ..run.assemble import all_calls

        return {f"{call.field}_calls": sum(1 for r in self.train if call.answered(r)) for call in all_calls()}

    def reasoning_tokens(self) -> dict[str, int]:
        """The tokens the model generated before its answers (--reasoning), training and test apart."""
        test = sum(sum(r.reasoning_tokens or []) for r in self.test)
        return {"train_reasoning_tokens": sum(r.reasoning_tokens or 0 for r in self.train),
                "test_reasoning_tokens": test}


def episodes_of(train: Sequence[TrainLine]) -> list[Episode]:
    """The episodes of a run's training records, as its loop held them."""
    return [Episode(r.prompt, r.prediction, r.feedback, r.answer, r.accuracy, i) for i, r in enumerate(train)]


def preambles(config: ConfigFile, train: Sequence[TrainLine], history: Sequence[Episode]) -> Optional[list[str]]:
    """Each step's preamble (the text a strategy puts before the episodes: a summary, a guide),
    as the run showed it: from the recorded episodes and guides; None for a strategy without one."""
    from ..method.strategies.base import STRATEGIES, Strategy
    from ..run.assemble import strategy_of_record

    name = config.spec.context_strategy_name
    if config.resolved.mode == "zero_shot" or name is None or name not in STRATEGIES:
        return None
    if STRATEGIES.get(name).cls.preamble is Strategy.preamble:
        return None
    run, strategy = strategy_of_record(config)
    if strategy is None:
        return None
    explore, seed = run.exploration, given(run.spec.seed, "seed")
    labels = config.labels
    out = []
    for t in range(len(train)):
        strategy.restore(train, t)  # what its own calls wrote, as shown at step t
        out.append(strategy.preamble(history[explore.last_reset(seed, t):t], labels))
    return out


REBUILT = ("approximate_only_positive",)  # strategies whose published contexts our runs do not show


def published_contexts(config: ConfigFile, history: Sequence[Episode]) -> Optional[list[list[int]]]:
    """Each step's context as the published run_count_tokens.py rebuilds it (its strategy code,
    seeded with seed + step, over the recorded episodes), for the strategies in REBUILT; None
    for the others, whose recorded contexts are the published ones."""
    spec = config.spec
    if spec.context_strategy_name not in REBUILT or config.resolved.mode == "zero_shot":
        return None
    if spec.prob_reset is not None or spec.ucb_alpha is not None:
        return None  # flags the published code never ran: there is no published count to match
    from ..run.assemble import strategy_of_record

    _, strategy = strategy_of_record(config, published=True)
    if strategy is None:
        return None
    index, seed = {id(episode): i for i, episode in enumerate(history)}, given(spec.seed, "seed")
    return [[index[id(e)] for e in strategy.select(history[:t], np.random.default_rng(seed + t))]
            for t in range(len(history))]


# -- counting one run ---------------------------------------------------------------------------
class IncrementalMismatch(Exception):
    pass


def count_run(run: Union[CheckedRun, Path, str], chat: Any, **options: Any) -> Counts:
    """(summary, per-step rows) for one run (``count_records``'s ``options``). ``run``: its
    records as the readers read them (``icrl.run.readback.CheckedRun``), or its folder, read so
    (a run a resume refuses: DamagedRecords in one line)."""
    checked = run if isinstance(run, CheckedRun) else read_run(Path(run))
    return count_records(checked.config, checked.train, checked.test, chat, **options)


def count_records(config: ConfigFile, train: Sequence[TrainLine], test: Sequence[TestLine], chat: Any, *,
                  full_tokenization: bool = False, verify: int = 32,
                  chunk: int = CHUNK) -> Counts:
    """(summary, per-step rows) of a run's config.json and lines; see the module docstring.

    ``verify``: besides the first 8 prompts, about this many more spread over the run are
    also encoded whole and compared (incremental mode only).
    """
    replay = Replay(config, train, test, chat)
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


def _verify(encoder: Union[SegmentEncoder, FakeEncoder], batch: list[CountedCall], texts: list[str],
            ids: list[np.ndarray], lo: int, every: int) -> int:
    """The first 8 prompts of the run and every ``every``-th after (``lo``: the chunk's first)
    encoded whole and compared with their segment-wise ``ids``; how many were checked
    (IncrementalMismatch on a difference)."""
    check = [j for j in range(len(batch)) if lo + j < 8 or (every and (lo + j) % every == every - 1)]
    if check:
        whole = encoder.encode_full([texts[j] for j in check])
        for j, full in zip(check, whole):
            if not np.array_equal(full, ids[j]):
                step, kind = batch[j][0], batch[j][1]
                raise IncrementalMismatch(f"segment-wise ids differ from whole-prompt ids at step {step} ({kind})")
    return len(check)


def _rows(per_step: dict[tuple[int, str], list[int]],
          as_published: bool) -> tuple[list[dict[str, Any]], dict[str, list[int]]]:
    """(the per-step rows with their running sums, the totals per kind) of the counts per
    (step, kind); ``as_published``: every context is the published one (as-run = processed)."""
    rows, cum_p, cum_u, cum_q = [], 0, 0, 0
    totals = {kind: [0, 0, 0, 0, 0] for kind in KINDS}
    for (step, kind), values in per_step.items():
        if as_published:
            values[4] = values[3]
        calls_, p, u, q, _ = values
        if kind != "icl_train":
            cum_p, cum_u = cum_p + p, cum_u + u
        cum_q += q
        rows.append({"step": step, "kind": kind, "calls": calls_, "prompt_tokens": p, "uncached_tokens": u,
                     "processed_tokens": q, "cumulative_prompt_tokens": cum_p, "cumulative_uncached_tokens": cum_u,
                     "cumulative_processed_tokens": cum_q})
        for i, v in enumerate(values):
            totals[kind][i] += v
    return rows, totals


def _count(replay: Replay, encoder: Union[SegmentEncoder, FakeEncoder], verify: int, chunk: int, start: float) -> Counts:
    calls = list(replay.calls())
    n = len(calls)
    every = max(1, n // verify) if verify > 0 else 0
    tree, paper_tree = PrefixTree(), PrefixTree()
    run_tree = PrefixTree() if replay.published is not None else None  # the as-run count, when it can differ
    per_step: dict[tuple[int, str], list[int]] = {}
    verified = 0
    render_s = encode_s = tree_s = 0.0
    for lo in range(0, n, chunk):
        batch = calls[lo:lo + chunk]
        tic = time.perf_counter()
        texts = [replay.render_call(call) for call in batch]
        published = [(j, replay.published_context(c.step, c.kind, c.context)) for j, c in enumerate(batch)]
        rebuilt = [(j, c) for j, c in published if c is not None]
        extra = [replay.render(c, batch[j].prompt, batch[j]) for j, c in rebuilt]
        tic2 = time.perf_counter()
        ids = encoder.encode(texts + extra)
        paper_ids = dict(zip([j for j, _ in rebuilt], ids[len(texts):]))
        ids = ids[:len(texts)]
        if encoder.incremental:
            verified += _verify(encoder, batch, texts, ids, lo, every)
        tic3 = time.perf_counter()
        for j, ((step, kind, *_), x) in enumerate(zip(batch, ids)):
            row = per_step.get((step, kind))
            if row is None:
                row = per_step[(step, kind)] = [0, 0, 0, 0, 0]
            row[0] += 1
            row[1] += len(x)
            if kind != "icl_train":  # sent: the cache of every call
                row[2] += len(x) - tree.insert(x)
            if kind != "test":  # the published count: training prompts against training prompts
                paper = paper_ids.get(j, x)  # in the context the published counter rebuilds
                row[3] += len(paper) - paper_tree.insert(paper)
                if run_tree is not None:  # in the context the run showed
                    row[4] += len(x) - run_tree.insert(x)
        tic4 = time.perf_counter()
        render_s, encode_s, tree_s = render_s + tic2 - tic, encode_s + tic3 - tic2, tree_s + tic4 - tic3
    rows, totals = _rows(per_step, run_tree is None)
    seconds = time.perf_counter() - start
    train, test, icl = totals["train"], totals["test"], totals["icl_train"]
    prompt_tokens = train[1] + test[1]
    summary = {
        "processed_tokens": train[3] + icl[3] if replay.prompter.mode != "zero_shot" else None,
        "processed_tokens_as_run": train[4] + icl[4] if replay.prompter.mode != "zero_shot" else None,
        "rebuilt_contexts": sum(1 for t, r in enumerate(replay.train) if replay.published is not None
                                and replay.published[t] != list(r.context)),
        "calls": train[0] + test[0], "prompt_tokens": prompt_tokens, "uncached_tokens": train[2] + test[2],
        "train_calls": train[0], "train_prompt_tokens": train[1], "train_uncached_tokens": train[2],
        "test_calls": test[0], "test_prompt_tokens": test[1], "test_uncached_tokens": test[2],
        "icl_train_calls": icl[0], "icl_train_prompt_tokens": icl[1],
        "steps": len(replay.train) if replay.prompter.mode != "zero_shot" else len(replay.test),
        "tokenization": "incremental" if encoder.incremental else "full",
        "verified_prompts": verified, "cached_segments": encoder.cached_segments,
        "tree_nodes": tree.nodes + paper_tree.nodes + (run_tree.nodes if run_tree is not None else 0),
        **replay.reasoning_tokens(), **replay.extra_calls(),
        "seconds": seconds, "render_s": render_s, "encode_s": encode_s, "prefix_tree_s": tree_s,
        "tokens_per_s": (prompt_tokens + icl[1]) / seconds if seconds > 0 else None,
    }
    return summary, rows


