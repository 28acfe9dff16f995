"""Count the prompt tokens of finished runs by replaying their records (no model).

For each run, every model call it made is rebuilt from the records: at each step the
training call (ICRL) renders the step's training prompt after the recorded context (the
step indices in ``train.jsonl``), and a test step renders every test prompt of
``config.json`` after that step's context, in the order the experiment made them (the
training call, then the test prompts). Rendering is the experiment's own:
``build_messages`` then the model's chat template.

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

Each prefix is found in a radix tree (compressed trie) of the earlier prompts' token ids:
at most two nodes per prompt, and an edge keeps only the tokens that no earlier prompt
had at that place, so memory grows with the uncached tokens, not with the prompt tokens.
The published script keeps token strings (``tokenizer.tokenize``) in a plain trie; a
vocabulary's strings and ids correspond one to one, so the prefix lengths are the same.

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

import re
import time
from array import array
from pathlib import Path
from types import SimpleNamespace
from typing import Iterator, NamedTuple, Optional, Sequence

import numpy as np

from ..method.strategies.base import make_strategy
from ..method.episode import Episode
from ..method.prompts import build_messages
from ..records import CONFIG, TEST, TRAIN, read_json, read_jsonl

CHUNK = 256  # prompts rendered and encoded together
KINDS = ("train", "test", "icl_train")


# -- the calls of a run -------------------------------------------------------------------------
def prompt_format(task_name: str) -> SimpleNamespace:
    """What build_messages needs of a task (prediction prefix, description), without its data."""
    from ..tasks import prompt_parts

    return SimpleNamespace(**prompt_parts(task_name))


class Call(NamedTuple):
    """One model call of a run: its step, kind ("train", "test" or "icl_train"), context (step
    indices), input, and for a test call the input's position in the test set."""

    step: int
    kind: str
    context: list
    prompt: str
    index: int = 0


def iter_calls(config: dict, train: Sequence[dict], test: Sequence[dict]) -> Iterator[Call]:
    """Every model call, in order (``Call``); kind "icl_train" is the training step of a
    supervised-ICL run, which sends nothing but which the published token count counts as a call
    (see the module docstring)."""
    mode = config["resolved"]["mode"]
    test_prompts = config["test_set"]["prompts"]
    if mode == "zero_shot":
        for record in test:
            for i, prompt in enumerate(test_prompts):
                yield Call(record["step"], "test", [], prompt, i)
        return
    tests = {record["step"]: record for record in test}
    for record in train:
        step = record["step"]
        if mode == "icrl" and not record.get("explored"):  # --p_exploration: an explored step made no call
            yield Call(step, "train", record["context"], record["prompt"])
        elif mode == "icl":
            yield Call(step, "icl_train", record["context"], record["prompt"])
        if step in tests:  # a query-aware strategy (knn_*) recorded one context per test prompt
            contexts = tests[step].get("contexts") or [tests[step]["context"]] * len(test_prompts)
            for i, (prompt, context) in enumerate(zip(test_prompts, contexts)):
                yield Call(step, "test", context, prompt, i)


class Replay:
    """Renders the calls of one run exactly as the experiment rendered them: with the text a
    strategy puts before the episodes (a summary, a written guide; ``preambles``), and with
    --reasoning the prompt of the answer, which holds the call's recorded reasoning."""

    def __init__(self, config: dict, train: Sequence[dict], test: Sequence[dict], chat):
        args = config["args"]
        self.config, self.train, self.test, self.chat = config, train, test, chat
        self.mode = config["resolved"]["mode"]
        self.task = prompt_format(args["task_name"])
        self.omit_feedback = bool(args.get("icrl_omit_feedback"))
        self.exemplars = [(e["prompt"], e["answer"]) for e in config.get("exemplars", [])]
        self.history = [Episode(r["prompt"], r.get("prediction"), r.get("feedback"), r["answer"], r.get("accuracy"), i)
                        for i, r in enumerate(train)]
        self.published = published_contexts(config, self.history)
        self.preambles = preambles(config, train, self.history)
        self.reasoning = args.get("reasoning") is not None
        self.tests = {record["step"]: record for record in test}

    def calls(self):
        return iter_calls(self.config, self.train, self.test)

    def published_context(self, step: int, kind: str, context: Sequence[int]) -> Optional[list]:
        """The context the published counter rebuilds for this call, None when it is ``context``."""
        if kind == "test" or self.published is None or self.published[step] == list(context):
            return None
        return self.published[step]

    def reasoning_of(self, call: Call) -> Optional[str]:
        """What the model wrote before answering in ``call`` (--reasoning), from the records."""
        if not self.reasoning or call.kind == "icl_train":
            return None
        if call.kind == "train":
            return self.train[call.step].get("reasoning")
        written = self.tests.get(call.step, {}).get("reasoning")
        return written[call.index] if written else None

    def render(self, context: Sequence[int], prompt: str, call: Optional[Call] = None) -> str:
        """The prompt of ``call`` (its step's preamble, its reasoning) with ``context`` in it."""
        preamble = self.preambles[call.step] if call is not None and self.preambles is not None else ""
        reasoning = self.reasoning_of(call) if call is not None else None
        messages, prefix = build_messages(
            self.task, [self.history[i] for i in context], prompt, self.mode, omit_feedback=self.omit_feedback,
            exemplars=self.exemplars, supports_system_role=self.chat.supports_system_role,
            reasoning=self.reasoning and not getattr(self.chat, "thinking", False), preamble=preamble)
        if reasoning is None:
            return self.chat.render(messages, prefix)
        return self.chat.reasoning_frame(messages, prefix).answer_prompt(reasoning)

    def render_call(self, call: Call) -> str:
        return self.render(call.context, call.prompt, call)

    def extra_calls(self) -> dict:
        """The calls beside the classifier's that the records show, not rendered here (another
        prompt, maybe another model): ``<field>_calls`` for each call a part declares
        (``icrl.run.assemble.all_calls``)."""
        from ..run.assemble import all_calls

        return {f"{call.field}_calls": sum(1 for r in self.train if call.answered(r)) for call in all_calls()}

    def reasoning_tokens(self) -> dict:
        """The tokens the model generated before its answers (--reasoning), training and test apart."""
        test = sum(sum(r.get("reasoning_tokens") or []) for r in self.test)
        return {"train_reasoning_tokens": sum(r.get("reasoning_tokens") or 0 for r in self.train),
                "test_reasoning_tokens": test}


def preambles(config: dict, train: Sequence[dict], history: Sequence[Episode]) -> Optional[list[str]]:
    """Each step's preamble (the text a summary or reflection strategy puts before the episodes),
    as the run showed it: from the recorded episodes and guides; None for a strategy without one."""
    from ..method.exploration import Exploration
    from ..method.strategies.base import STRATEGIES, Strategy
    from ..run.assemble import strategy_of_record

    name = config["args"].get("context_strategy_name")
    if config["resolved"]["mode"] == "zero_shot" or name not in STRATEGIES:
        return None
    if STRATEGIES.get(name).cls.preamble is Strategy.preamble:
        return None
    spec, strategy = strategy_of_record(config)
    explore = Exploration.of(spec)
    labels = config["dataset"]["labels"]
    out = []
    for t in range(len(train)):
        strategy.restore(train, t)  # what its own calls wrote, as shown at step t
        out.append(strategy.preamble(history[explore.last_reset(spec.seed, t):t], labels))
    return out


REBUILT = ("approximate_only_positive",)  # strategies whose published contexts our runs do not show


def published_contexts(config: dict, history: Sequence[Episode]) -> Optional[list[list[int]]]:
    """Each step's context as the published run_count_tokens.py rebuilds it (its strategy code,
    seeded with seed + step, over the recorded episodes), for the strategies in REBUILT; None
    for the others, whose recorded contexts are the published ones."""
    args = config["args"]
    if args.get("context_strategy_name") not in REBUILT or config["resolved"]["mode"] == "zero_shot":
        return None
    if args.get("prob_reset") is not None or args.get("ucb_alpha") is not None:
        return None  # flags the published code never ran: there is no published count to match
    strategy = make_strategy(args["context_strategy_name"], config["resolved"]["max_context_examples"],
                             args["context_p_keep"], args["max_contexts"], args["approximate_context_sampling_method"],
                             published_quirks=True)
    index = {id(episode): i for i, episode in enumerate(history)}
    return [[index[id(e)] for e in strategy.select(history[:t], np.random.default_rng(args["seed"] + t))]
            for t in range(len(history))]


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
    tree, paper_tree = PrefixTree(), PrefixTree()
    run_tree = PrefixTree() if replay.published is not None else None  # the as-run count, when it can differ
    per_step: dict = {}
    verified = 0
    render_s = encode_s = tree_s = 0.0
    for lo in range(0, n, chunk):
        batch = calls[lo:lo + chunk]
        tic = time.perf_counter()
        texts = [replay.render_call(call) for call in batch]
        rebuilt = [(j, replay.published_context(c.step, c.kind, c.context)) for j, c in enumerate(batch)]
        rebuilt = [(j, c) for j, c in rebuilt if c is not None]
        extra = [replay.render(c, batch[j].prompt, batch[j]) for j, c in rebuilt]
        tic2 = time.perf_counter()
        ids = encoder.encode(texts + extra)
        paper_ids = dict(zip([j for j, _ in rebuilt], ids[len(texts):]))
        ids = ids[:len(texts)]
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
    rows, cum_p, cum_u, cum_q = [], 0, 0, 0
    totals = {kind: [0, 0, 0, 0, 0] for kind in KINDS}
    for (step, kind), values in per_step.items():
        if run_tree is None:  # every context is the published one
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
    seconds = time.perf_counter() - start
    train, test, icl = totals["train"], totals["test"], totals["icl_train"]
    prompt_tokens = train[1] + test[1]
    summary = {
        "processed_tokens": train[3] + icl[3] if replay.mode != "zero_shot" else None,
        "processed_tokens_as_run": train[4] + icl[4] if replay.mode != "zero_shot" else None,
        "rebuilt_contexts": sum(1 for t, r in enumerate(replay.train) if replay.published is not None
                                and replay.published[t] != list(r["context"])),
        "calls": train[0] + test[0], "prompt_tokens": prompt_tokens, "uncached_tokens": train[2] + test[2],
        "train_calls": train[0], "train_prompt_tokens": train[1], "train_uncached_tokens": train[2],
        "test_calls": test[0], "test_prompt_tokens": test[1], "test_uncached_tokens": test[2],
        "icl_train_calls": icl[0], "icl_train_prompt_tokens": icl[1],
        "steps": len(replay.train) if replay.mode != "zero_shot" else len(replay.test),
        "tokenization": "incremental" if encoder.incremental else "full",
        "verified_prompts": verified, "cached_segments": encoder.cached_segments,
        "tree_nodes": tree.nodes + paper_tree.nodes + (run_tree.nodes if run_tree is not None else 0),
        **replay.reasoning_tokens(), **replay.extra_calls(),
        "seconds": seconds, "render_s": render_s, "encode_s": encode_s, "prefix_tree_s": tree_s,
        "tokens_per_s": (prompt_tokens + icl[1]) / seconds if seconds > 0 else None,
    }
    return summary, rows


